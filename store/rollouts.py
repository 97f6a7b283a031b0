"""Build-id rollouts of a task queue (SPEC M7, M8): cohorts, and an operator's drain intent.

A cohort is the workers of one task queue registered with one build id; the workers registered
without one are the unversioned cohort (`build_key` ''). Draining a cohort records the intent
and marks its active workers draining at once: they finish what they hold and take no new tasks
(their polls are refused with 409 `worker_draining`, their sticky bindings and sessions are
handed over), and a worker of the cohort registering later lands draining (store/workers.py).
Runs pinned to that build then wait, compatibility-blocked, until a worker of it is active again.
Resuming clears the intent and makes the cohort's draining workers active again.

Promoting a cohort selects it for fresh starts on the queue: a start that names no build (and is
not a continuation, retry or child, which keep their chain's) pins to it (store/runs.py). One
cohort at a time is promoted; promoting the unversioned one leaves fresh starts unpinned. A
cohort is refused promotion while it drains (`fleet_is_draining`) or while no live active
worker of it serves the queue (`no_compatible_workers`): its runs would only wait.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import sql, workers
from burrow.store.models import WorkerState
from burrow.store.sql import statement
from burrow.store.transactions import Txn

ACTIVE = WorkerState.ACTIVE.value
DRAINING = WorkerState.DRAINING.value


def build_key(build_id: str | None) -> str:
    """The stored key of a cohort: the trimmed build id, '' for the unversioned one."""
    return (build_id or "").strip()


class RolloutState(BaseModel):
    """The recorded drain intent of one cohort (`active` when none was ever recorded)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    build_id: str | None
    drain_intent: str = ACTIVE
    drained_at: datetime | None = None
    promoted_at: datetime | None = None
    """Set while the cohort is the one fresh starts on the queue pin to."""


class PromotionRefused(BaseModel):
    """Why a cohort was not promoted (the reference's blockage)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    message: str
    expected_resolution: str


class CohortWorker(BaseModel):
    """One registered (not stopped) worker of a queue, as the cohort view counts it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    build_id: str | None
    state: WorkerState
    stale: bool
    runtime: str
    sdk_version: str | None
    heartbeat_at: datetime
    registered_at: datetime


_RECORD = statement("""
    INSERT INTO build_rollouts AS r (namespace, task_queue, build_key, drain_intent, drained_at)
    VALUES (:namespace, :task_queue, :build_key, CAST(:intent AS text),
            CASE WHEN CAST(:intent AS text) = 'draining' THEN now() END)
    ON CONFLICT (namespace, task_queue, build_key) DO UPDATE SET
        drain_intent = excluded.drain_intent,
        drained_at = CASE WHEN excluded.drain_intent = 'draining'
                          THEN COALESCE(CASE WHEN r.drain_intent = 'draining'
                                             THEN r.drained_at END, now()) END,
        updated_at = now()
    RETURNING drain_intent, drained_at, promoted_at
""")
_PROMOTE = statement("""
    WITH others AS (
        UPDATE build_rollouts SET promoted_at = NULL, updated_at = now()
        WHERE namespace = :namespace AND task_queue = :task_queue AND build_key <> :build_key
          AND promoted_at IS NOT NULL
    )
    INSERT INTO build_rollouts AS r (namespace, task_queue, build_key, promoted_at)
    VALUES (:namespace, :task_queue, :build_key, now())
    ON CONFLICT (namespace, task_queue, build_key) DO UPDATE SET
        promoted_at = COALESCE(r.promoted_at, now()), updated_at = now()
    RETURNING drain_intent, drained_at, promoted_at
""")
_COHORT = """
    namespace = :namespace AND task_queue = :task_queue AND COALESCE(build_id, '') = :build_key
"""
_ACTIVE_OF_COHORT = statement(
    f"SELECT worker_id FROM worker_registrations WHERE {_COHORT} AND state = 'active'"
)
_LIVE_OF_COHORT = statement(
    f"""SELECT count(*) FROM worker_registrations WHERE {_COHORT} AND state = 'active'
        AND heartbeat_at > now() - make_interval(secs => :live_seconds)"""
)
_RESUME_COHORT = statement(
    f"UPDATE worker_registrations SET state = 'active' WHERE {_COHORT} AND state = 'draining'"
)
_ROLLOUTS = statement("""
    SELECT build_key, drain_intent, drained_at, promoted_at FROM build_rollouts
    WHERE namespace = :namespace AND task_queue = :task_queue
""")
_WORKERS = statement("""
    SELECT NULLIF(btrim(COALESCE(build_id, '')), '') AS build_id, state, runtime, sdk_version,
           heartbeat_at, registered_at,
           heartbeat_at <= now() - make_interval(secs => :stale_seconds) AS stale
    FROM worker_registrations
    WHERE namespace = :namespace AND task_queue = :task_queue AND state <> 'stopped'
    ORDER BY heartbeat_at DESC, worker_id
""")


async def set_drain_intent(
    txn: Txn[AsyncConnection],
    *,
    namespace: str,
    task_queue: str,
    build_id: str | None,
    draining: bool,
) -> RolloutState:
    """Drain or resume a cohort; idempotent (a repeated drain keeps its first `drained_at`)."""
    key = build_key(build_id)
    params = {"namespace": namespace, "task_queue": task_queue, "build_key": key}
    row = await sql.one(txn.conn, _RECORD, {**params, "intent": DRAINING if draining else ACTIVE})
    if draining:
        for worker in await sql.fetch(txn.conn, _ACTIVE_OF_COHORT, params):
            await workers.drain_worker(txn, worker_id=worker.worker_id)
    else:
        await sql.execute(txn.conn, _RESUME_COHORT, params)
    return _state(key, row)


def _state(key: str, row: sql.Row) -> RolloutState:
    return RolloutState(
        build_id=key or None,
        drain_intent=row.drain_intent,
        drained_at=row.drained_at,
        promoted_at=row.promoted_at,
    )


async def promote(
    txn: Txn[AsyncConnection],
    *,
    namespace: str,
    task_queue: str,
    build_id: str | None,
    live_after: timedelta,
) -> RolloutState | PromotionRefused:
    """Select a cohort for fresh starts on the queue; idempotent (keeps its `promoted_at`)."""
    key = build_key(build_id)
    params = {"namespace": namespace, "task_queue": task_queue, "build_key": key}
    recorded = (await rollouts(txn.conn, namespace=namespace, task_queue=task_queue)).get(key)
    if recorded is not None and recorded.drain_intent == DRAINING:
        return PromotionRefused(
            reason="fleet_is_draining",
            message=f"Build [{key or 'unversioned'}] is draining on task queue [{task_queue}].",
            expected_resolution="Resume the build id before promoting it.",
        )
    live = await sql.scalar_one(
        txn.conn, _LIVE_OF_COHORT, {**params, "live_seconds": live_after.total_seconds()}
    )
    if not live:
        return PromotionRefused(
            reason="no_compatible_workers",
            message=(
                f"No live worker of build [{key or 'unversioned'}] polls task queue [{task_queue}]."
            ),
            expected_resolution="Start workers of the build id, then promote it.",
        )
    return _state(key, await sql.one(txn.conn, _PROMOTE, params))


async def rollouts(
    conn: AsyncConnection, *, namespace: str, task_queue: str
) -> dict[str, RolloutState]:
    """The recorded intents of the queue's cohorts, by build key."""
    rows = await sql.fetch(conn, _ROLLOUTS, {"namespace": namespace, "task_queue": task_queue})
    return {row.build_key: _state(row.build_key, row) for row in rows}


async def cohort_workers(
    conn: AsyncConnection, *, namespace: str, task_queue: str, stale_after: timedelta
) -> list[CohortWorker]:
    """The queue's registered workers, most recently heard from first."""
    rows = await sql.fetch(
        conn,
        _WORKERS,
        {
            "namespace": namespace,
            "task_queue": task_queue,
            "stale_seconds": stale_after.total_seconds(),
        },
    )
    return [CohortWorker.model_validate(dict(row)) for row in rows]
