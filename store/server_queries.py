"""Reads and one release the HTTP server needs (PROTOCOL.md 5.6, 6.2, 4.3, 18).

A resent poll is answered again only while the lease it handed out is current: these read a
task's lease for that (the calls a lease entitles to are fenced by the store's statements,
fragments.LEASE_FENCE). A worker's deregistration
hands its workflow-task leases back. The control plane's cancel closes a run at once
(PROTOCOL.md 17), unlike Burrow's own cooperative cancellation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.protocol.list_query_types import ListQuery
from burrow.store import children, fragments, history, ready, runs, sql, visibility_sql
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import JsonDict, RunRow, RunStatus, TaskState, WorkerState
from burrow.store.sql import statement
from burrow.store.transactions import Txn
from burrow.store.workflow_views import (
    ListedRun,
    RunFilter,
    filter_clauses,
    listed_run,
    open_state_of_run,
)


@dataclass(frozen=True, slots=True)
class TaskLeaseState:
    """A task's current lease as stored, with the database's now."""

    task_id: str
    state: TaskState
    attempt: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    now: datetime
    activity_attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    """What a worker registered: its queue and the types it runs."""

    worker_id: str
    namespace: str
    connection: str
    task_queue: str
    build_id: str | None
    workflow_types: list[str]
    activity_types: list[str]
    state: WorkerState
    sticky_cache_enabled: bool = False
    workflow_fingerprints: dict[str, str] = field(default_factory=dict)
    """S8: workflow type -> the definition fingerprint the worker registered."""


async def _task_lease(
    conn: AsyncConnection, table: sa.Table, task_id: str, *extra: str
) -> TaskLeaseState | None:
    """A task's current lease with the `extra` columns of its kind, or None when no such task."""
    c = table.c
    row = (
        await conn.execute(
            sa.select(
                c.task_id,
                c.state,
                c.attempt,
                c.lease_owner,
                c.lease_expires_at,
                *(c[name] for name in extra),
                sa.func.now().label("now"),
            ).where(c.task_id == task_id)
        )
    ).first()
    if row is None:
        return None
    return TaskLeaseState(
        task_id=row.task_id,
        state=TaskState(row.state),
        attempt=row.attempt,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        now=row.now,
        **{name: getattr(row, name) for name in extra},
    )


async def workflow_task_lease(conn: AsyncConnection, *, task_id: str) -> TaskLeaseState | None:
    """The workflow task's current lease, or None when no such task exists."""
    return await _task_lease(conn, s.workflow_tasks, task_id)


async def activity_task_lease(conn: AsyncConnection, *, task_id: str) -> TaskLeaseState | None:
    """The activity task's current lease and attempt id, or None when no such task exists."""
    return await _task_lease(conn, s.activity_tasks, task_id, "activity_attempt_id")


async def query_task_lease(conn: AsyncConnection, *, task_id: str) -> TaskLeaseState | None:
    """The query task's current lease, or None when no such task exists (PROTOCOL.md 6.3)."""
    return await _task_lease(conn, s.query_tasks, task_id)


async def task_arguments(
    conn: AsyncConnection, *, kind: Literal["activity", "query"], task_id: str
) -> JsonDict | None:
    """An activity or query task's arguments, or None when no such task exists.

    A resent poll is answered from them again: the server keeps no payload in memory.
    """
    table = s.activity_tasks if kind == "activity" else s.query_tasks
    stmt = sa.select(table.c.arguments).where(table.c.task_id == task_id)
    arguments: JsonDict | None = (await conn.execute(stmt)).scalar_one_or_none()
    return arguments


async def worker_registration(
    conn: AsyncConnection, *, worker_id: str
) -> WorkerRegistration | None:
    """The worker's registration, or None when it never registered."""
    w = s.worker_registrations.c
    row = (
        await conn.execute(
            sa.select(
                w.worker_id,
                w.namespace,
                w.connection,
                w.task_queue,
                w.build_id,
                w.workflow_types,
                w.activity_types,
                w.state,
                w.sticky_cache_enabled,
                w.workflow_fingerprints,
            ).where(w.worker_id == worker_id)
        )
    ).first()
    if row is None:
        return None
    return WorkerRegistration(
        worker_id=row.worker_id,
        namespace=row.namespace,
        connection=row.connection,
        task_queue=row.task_queue,
        build_id=row.build_id,
        workflow_types=list(row.workflow_types),
        activity_types=list(row.activity_types),
        state=WorkerState(row.state),
        sticky_cache_enabled=bool(row.sticky_cache_enabled),
        workflow_fingerprints=dict(row.workflow_fingerprints),
    )


@dataclass(frozen=True, slots=True)
class RecordedSignal:
    """A signal as first recorded under its id."""

    signal_name: str
    arguments: JsonDict


async def recorded_signal(
    conn: AsyncConnection, *, run_id: str, signal_id: str
) -> RecordedSignal | None:
    """The signal recorded under `signal_id` on the run, or None."""
    g = s.signals.c
    row = (
        await conn.execute(
            sa.select(g.signal_name, g.arguments).where(
                g.run_id == run_id, g.signal_id == signal_id
            )
        )
    ).first()
    return None if row is None else RecordedSignal(row.signal_name, dict(row.arguments))


_RELEASE_WORKFLOW_LEASES = statement(
    f"""
    UPDATE workflow_tasks SET {fragments.return_to_ready("now()")}
    WHERE state = 'leased' AND lease_owner = :worker_id
    RETURNING task_id, namespace, connection, queue, {fragments.sticky_owner()}
    """,
    json_params=["last_failure"],
)
_RELEASED = {"exception_type": "WorkerDeregistered", "message": "the lease owner deregistered"}


async def release_workflow_leases(txn: Txn[AsyncConnection], *, worker_id: str) -> int:
    """Hand the worker's workflow-task leases back as next attempts; how many (PROTOCOL 4.3)."""
    rows = await sql.fetch(
        txn.conn, _RELEASE_WORKFLOW_LEASES, {"worker_id": worker_id, "last_failure": _RELEASED}
    )
    for row in rows:
        txn.notify_workflow_task(row)
    return len(rows)


async def cancel_run_now(txn: Txn[AsyncConnection], *, run: RunRow, reason: str) -> None:
    """Close the run as cancelled at once, without running workflow code (PROTOCOL.md 17).

    History gets `CancelRequested` then `WorkflowCancelled`; open tasks and timers close.
    """
    conn = txn.conn
    runs.require_running(run)
    message = reason or "workflow cancelled"
    failure: JsonDict = {"message": message, "exception_type": "WorkflowCancelled"}
    requested = events.CancelRequested(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, reason=reason
    )
    cancelled = events.WorkflowCancelled(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, message=message
    )
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        # Keys of their own: a cooperative request may already hold "cancel-requested".
        events=[NewEvent(requested, "cancel-now"), NewEvent(cancelled, "workflow-closed")],
        workflow_task_id=None,
    )
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(
            status=RunStatus.CANCELLED,
            cancel_requested=True,
            last_event_seq=last,
            failure=failure,
            closed_at=sa.func.now(),
        )
    )
    await runs.close_open_work(conn, run_id=run.run_id)
    txn.notify_run(run.namespace, run.run_id, ready.Change.CLOSED, notify_queue=run.notify_queue)
    # Issue 28: a child's close reaches its parent; its own children's close policies are marked.
    await children.run_closed(txn, run, children.ClosedRun(RunStatus.CANCELLED, failure=failure))


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of a namespace's runs, in the list's order, and where the next page starts."""

    runs: list[ListedRun]
    next_after: tuple[visibility_sql.PageKey, str] | None
    """(order key, run_id) of the page's last run, when more runs follow; the order key is
    `created_at` unless the query names an ORDER BY."""


async def list_runs_page(
    conn: AsyncConnection,
    *,
    namespace: str,
    wanted: RunFilter,
    workflow_type: str | None,
    after: tuple[visibility_sql.PageKey, str] | None,
    limit: int,
    query: ListQuery | None = None,
) -> RunPage:
    """A page of runs after the (order key, run_id) key (PROTOCOL.md 17; issue 30).

    Newest first unless `query` orders otherwise. Keyset paging: a run started while a caller
    pages through shows up on no page twice and moves no run to another page.
    """
    r = s.runs.c
    stmt = sa.select(s.runs, open_state_of_run()).where(
        r.namespace == namespace, *filter_clauses(wanted)
    )
    if workflow_type is not None:
        stmt = stmt.where(r.workflow_type == workflow_type)
    if query is not None:
        stmt = stmt.where(visibility_sql.filter_clause(namespace, query))
    key, descending = visibility_sql.order_key(namespace, query)
    stmt = stmt.add_columns(key.label("page_key"))
    if after is not None:
        stmt = stmt.where(visibility_sql.after_clause(key, descending, after))
    stmt = stmt.order_by(*visibility_sql.order_clauses(key, descending)).limit(limit + 1)
    rows = (await conn.execute(stmt)).all()
    shown = rows[:limit]
    more = len(rows) > limit and shown
    last = shown[-1] if more else None
    return RunPage(
        runs=[listed_run(row) for row in shown],
        next_after=None if last is None else (last.page_key, str(last.run_id)),
    )


_READY_SESSION_TASKS = statement(
    """
    SELECT task_id, session_id FROM activity_tasks
    WHERE state = 'ready' AND namespace = :namespace AND connection = :connection
      AND queue = :queue AND session_id IS NOT NULL AND available_at <= now()
      AND activity_type = ANY(:types)
    ORDER BY available_at
    LIMIT :limit
    """
)


async def ready_session_tasks(
    conn: AsyncConnection,
    *,
    namespace: str,
    connection: str,
    queue: str,
    types: list[str],
    limit: int,
) -> list[tuple[str, str]]:
    """(task id, session id) of the ready session attempts on a queue (W3, W6)."""
    params = {
        "namespace": namespace,
        "connection": connection,
        "queue": queue,
        "types": types,
        "limit": limit,
    }
    rows = await sql.fetch(conn, _READY_SESSION_TASKS, params)
    return [(str(row.task_id), str(row.session_id)) for row in rows]
