"""Worker registrations: register, heartbeat, deregister, and who is live on a queue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import errors, session_holders, sticky_reports
from burrow.store import schema as s
from burrow.store.models import StickyCacheReport, WorkerState
from burrow.store.transactions import Txn

DEFAULT_MAX_CONCURRENT_WORKER_SESSIONS = 10


async def register_worker(
    conn: AsyncConnection,
    *,
    worker_id: str,
    namespace: str,
    task_queue: str,
    workflow_types: Sequence[str],
    activity_types: Sequence[str],
    concurrency: int,
    connection: str = "default",
    build_id: str | None = None,
    sticky_cache: StickyCacheReport | None = None,
    capabilities: Sequence[str] = (),
    max_concurrent_worker_sessions: int = DEFAULT_MAX_CONCURRENT_WORKER_SESSIONS,
    workflow_fingerprints: Mapping[str, str] | None = None,
    runtime: str = "python",
    update_validators: Mapping[str, Sequence[str]] | None = None,
    sdk_version: str | None = None,
    max_workflow_tasks: int | None = None,
    max_activity_tasks: int | None = None,
) -> WorkerState:
    """Insert or refresh a worker's registration (S3, S8, S10, W3, W6); the state it got.

    `workflow_fingerprints`: workflow type -> definition fingerprint of the code it runs (S8).
    `runtime`: the language its SDK runs in, as it registered it (S10: the fleet reports it).
    `update_validators`: workflow type -> the update names it runs a validator for before the
    update is accepted.

    A worker registers with its sticky cache figures when it keeps a cache (S3: it opts in to
    sticky routing), else with the cache off; with the `capabilities` session requirements are
    matched against (W3) and how many sessions it may hold at once (W6).

    `sdk_version` and the `max_*_tasks` an HTTP worker declared are what the fleet views report
    (M8). A worker of a build-id cohort an operator drained on its queue registers draining: it
    takes no new tasks until the cohort is resumed (store/rollouts.py).

    Raises:
        WorkerIdTaken: the id is registered in another namespace; its row is left as it was.
    """
    values = {
        "namespace": namespace,
        "connection": connection,
        "task_queue": task_queue,
        "build_id": build_id,
        "runtime": runtime,
        "workflow_types": list(workflow_types),
        "activity_types": list(activity_types),
        "concurrency": concurrency,
        "capabilities": sorted(set(capabilities)),
        "max_concurrent_worker_sessions": max_concurrent_worker_sessions,
        "workflow_fingerprints": dict(workflow_fingerprints or {}),
        "update_validators": {
            name: sorted(set(updates)) for name, updates in (update_validators or {}).items()
        },
        "sticky_cache_enabled": sticky_cache is not None and sticky_cache.enabled,
        "sticky_cache_capacity": 0 if sticky_cache is None else sticky_cache.capacity,
        "sticky_cache": sa.null() if sticky_cache is None else sticky_cache.model_dump(),
        "sdk_version": sdk_version,
        "max_workflow_tasks": max_workflow_tasks,
        "max_activity_tasks": max_activity_tasks,
        "state": sa.case(
            (_cohort_drained(namespace, task_queue, build_id), WorkerState.DRAINING.value),
            else_=WorkerState.ACTIVE.value,
        ),
        "heartbeat_at": sa.func.now(),
        "stopped_at": None,
    }
    w = s.worker_registrations.c
    stmt = (
        pg.insert(s.worker_registrations)
        .values(worker_id=worker_id, **values)
        # A worker id belongs to its namespace: another namespace's caller cannot take it over.
        .on_conflict_do_update(
            index_elements=["worker_id"], set_=values, where=w.namespace == namespace
        )
        .returning(w.state)
    )
    registered = (await conn.execute(stmt)).first()
    if registered is None:
        raise errors.WorkerIdTaken(worker_id=worker_id, namespace=namespace)
    return WorkerState(registered.state)


def _cohort_drained(
    namespace: str, task_queue: str, build_id: str | None
) -> sa.ColumnElement[bool]:
    """Whether an operator drained the build-id cohort `build_id` of the queue (M7, M8)."""
    r = s.build_rollouts.c
    return sa.exists().where(
        r.namespace == namespace,
        r.task_queue == task_queue,
        r.build_key == (build_id or ""),
        r.drain_intent == WorkerState.DRAINING.value,
    )


async def heartbeat_worker(
    conn: AsyncConnection, *, worker_id: str, sticky_cache: StickyCacheReport | None = None
) -> None:
    """Mark a worker live, store its cache figures (S10, sticky_reports.py), renew its sessions.

    A draining worker keeps heartbeating and stays draining (S8). An active worker's heartbeat
    renews the unexpired sessions it holds (W1), between their attempts too.
    """
    if sticky_cache is not None:
        figures = sticky_reports.StickyFigures.of(sticky_cache)
        await sticky_reports.record(conn, worker_id=worker_id, figures=figures, heartbeat=True)
    else:
        w = s.worker_registrations.c
        await conn.execute(
            sa.update(s.worker_registrations)
            .where(w.worker_id == worker_id, w.state != WorkerState.STOPPED)
            .values(heartbeat_at=sa.func.now())
        )
    await session_holders.renew_held(conn, worker_id=worker_id)


_RELEASED_STICKY_TASKS = sa.text("""
    SELECT task_id, namespace, connection, queue FROM workflow_tasks
    WHERE state = 'ready' AND sticky_worker_id = :worker_id AND sticky_until > now()
""")


async def _announce_released(txn: Txn[AsyncConnection], worker_id: str) -> int:
    """Announce the ready tasks bound to a worker that takes no more to the shared queues."""
    rows = (await txn.conn.execute(_RELEASED_STICKY_TASKS, {"worker_id": worker_id})).all()
    for row in rows:
        txn.notify(row.namespace, row.connection, row.queue, "workflow", row.task_id)
    return len(rows)


async def drain_worker(txn: Txn[AsyncConnection], *, worker_id: str) -> int:
    """Mark a worker draining (S8): it takes no new workflow tasks, so its bindings are released.

    The ready tasks bound to it become claimable by any worker at once (S5c: the owner is
    unavailable) and are announced to the shared queues, not to its sticky queue. Returns how
    many were announced. The worker sessions it holds are handed over (`orphaned`) when they
    may be reacquired, else closed (W5); its running session attempts keep their own leases (W7).
    """
    conn = txn.conn
    w = s.worker_registrations.c
    await conn.execute(
        sa.update(s.worker_registrations)
        .where(w.worker_id == worker_id, w.state == WorkerState.ACTIVE)
        .values(state=WorkerState.DRAINING)
    )
    await session_holders.release_held(txn, worker_id=worker_id)
    return await _announce_released(txn, worker_id)


async def deregister_worker(txn: Txn[AsyncConnection], *, worker_id: str) -> None:
    """Mark a worker stopped (graceful shutdown); its bound ready tasks go to anyone (S5c).

    Sessions it still holds are handed over or closed, as on a drain (W5).
    """
    conn = txn.conn
    w = s.worker_registrations.c
    await conn.execute(
        sa.update(s.worker_registrations)
        .where(w.worker_id == worker_id)
        .values(state=WorkerState.STOPPED, stopped_at=sa.func.now())
    )
    await session_holders.release_held(txn, worker_id=worker_id)
    await _announce_released(txn, worker_id)


async def live_workers(
    conn: AsyncConnection,
    *,
    namespace: str,
    task_queue: str,
    stale_after: timedelta,
    connection: str | None = None,
) -> list[tuple[str, list[str], list[str]]]:
    """(worker_id, workflow_types, activity_types) of live workers on a queue (and connection)."""
    w = s.worker_registrations.c
    where = [
        w.namespace == namespace,
        w.task_queue == task_queue,
        w.state == WorkerState.ACTIVE,
        w.heartbeat_at > sa.func.now() - stale_after,
    ]
    if connection is not None:
        where.append(w.connection == connection)
    rows = await conn.execute(
        sa.select(w.worker_id, w.workflow_types, w.activity_types).where(*where)
    )
    return [(row.worker_id, list(row.workflow_types), list(row.activity_types)) for row in rows]


async def serves_build(
    conn: AsyncConnection,
    *,
    namespace: str,
    task_queue: str,
    workflow_type: str,
    build_id: str,
    stale_after: timedelta,
    connection: str = "default",
) -> bool:
    """Whether a live worker of `build_id` on the queue and connection declares the type (M7)."""
    w = s.worker_registrations.c
    stmt = sa.select(
        sa.exists().where(
            w.namespace == namespace,
            w.task_queue == task_queue,
            w.connection == connection,
            w.state == WorkerState.ACTIVE,
            w.heartbeat_at > sa.func.now() - stale_after,
            w.build_id == build_id,
            sa.literal(workflow_type) == sa.any_(w.workflow_types),
        )
    )
    return bool((await conn.execute(stmt)).scalar_one())
