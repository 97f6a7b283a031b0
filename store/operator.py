"""Read-only operator queries: a run's open work, queue backlog and live workers (M8, M9)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import children, fleet, fragments, run_visibility, runs, sql, workers
from burrow.store import schema as s
from burrow.store.models import (
    PendingActivity,
    PendingWorkflowTask,
    ReplayMode,
    RunDescription,
    RunRow,
    TaskState,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

LIVE_AFTER = timedelta(seconds=60)  # a worker silent this long is not counted as live


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Backlog of one (namespace, connection, queue, task kind)."""

    namespace: str
    connection: str
    queue: str
    kind: str
    ready: int
    scheduled: int
    leased: int
    oldest_ready_seconds: float | None
    live_workers: int
    """Live workers serving this connection and queue."""
    blocked: int = 0
    """Due ready tasks no live worker of this connection and queue can take (M9)."""


_STATS_SQL = """
    SELECT namespace, connection, queue, '{kind}' AS kind,
           count(*) FILTER (WHERE state = 'ready' AND available_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'ready' AND available_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'leased') AS leased,
           extract(epoch FROM now() - min(available_at)
                   FILTER (WHERE state = 'ready' AND available_at <= now())) AS oldest_ready_seconds
    FROM {table}
    WHERE state IN ('ready', 'leased')
      AND (CAST(:namespace AS text) IS NULL OR namespace = :namespace)
    GROUP BY namespace, connection, queue
"""
_QUEUE_STATS = statement(
    "SELECT s.*, (SELECT count(*) FROM worker_registrations w"
    " WHERE w.namespace = s.namespace AND w.task_queue = s.queue AND w.state = 'active'"
    " AND w.connection = s.connection"
    " AND w.heartbeat_at > now() - make_interval(secs => :live_seconds)) AS live_workers"
    " FROM ("
    + " UNION ALL ".join(
        _STATS_SQL.format(kind=kind, table=table)
        for kind, table in (
            ("workflow", "workflow_tasks"),
            ("activity", "activity_tasks"),
            ("query", "query_tasks"),
        )
    )
    + ") AS s ORDER BY namespace, connection, queue, kind"
)

_STALE_READY = statement(
    " UNION ".join(
        f"SELECT DISTINCT namespace, connection, queue, '{kind}' AS kind FROM {table}"
        " WHERE state = 'ready' AND available_at <= now() - make_interval(secs => :older_than)"
        for kind, table in (("workflow", "workflow_tasks"), ("activity", "activity_tasks"))
    )
)


async def queue_stats(
    conn: AsyncConnection, *, namespace: str | None, live_after: timedelta
) -> list[QueueStats]:
    """Per queue and task kind: ready depth, delayed, leased, oldest ready age, live workers."""
    rows = await sql.fetch(
        conn, _QUEUE_STATS, {"namespace": namespace, "live_seconds": live_after.total_seconds()}
    )
    blocked = await fleet.blocked_counts(conn, namespace=namespace, live_after=live_after)
    return [
        QueueStats(
            namespace=row.namespace,
            connection=row.connection,
            queue=row.queue,
            kind=row.kind,
            ready=row.ready,
            scheduled=row.scheduled,
            leased=row.leased,
            oldest_ready_seconds=None
            if row.oldest_ready_seconds is None
            else float(row.oldest_ready_seconds),
            live_workers=row.live_workers,
            blocked=blocked.get((row.namespace, row.connection, row.queue, row.kind), 0),
        )
        for row in rows
    ]


async def renotify_stale_ready(txn: Txn[AsyncConnection], *, older_than: timedelta) -> int:
    """Notify queues whose ready work has waited longer than `older_than` (lost wakes)."""
    rows = await sql.fetch(txn.conn, _STALE_READY, {"older_than": older_than.total_seconds()})
    for row in rows:
        txn.notify(row.namespace, row.connection, row.queue, row.kind)
    return len(rows)


# The run's binding (S4) and how its latest workflow task was claimed (S7). An open task is the
# run's latest, found through the open-task index; only without one are the closed tasks read
# (Postgres stops an appended scan as soon as the LIMIT is met).
_STICKY = statement("""
    SELECT r.sticky_worker_id, r.sticky_until, t.sticky_replay_mode, t.sticky_claimed_at
    FROM runs r LEFT JOIN LATERAL (
        (SELECT sticky_replay_mode, sticky_claimed_at FROM workflow_tasks
         WHERE run_id = r.run_id AND state IN ('ready', 'leased'))
        UNION ALL
        (SELECT sticky_replay_mode, sticky_claimed_at FROM workflow_tasks
         WHERE run_id = r.run_id ORDER BY created_at DESC LIMIT 1)
        LIMIT 1
    ) t ON true
    WHERE r.run_id = :run_id
""")


async def describe_run(conn: AsyncConnection, *, run: RunRow) -> RunDescription:
    """The run plus its open work, sticky binding and any compatibility gap."""
    w, a = s.workflow_tasks.c, s.activity_tasks.c
    task = (
        await conn.execute(
            sa.select(s.workflow_tasks).where(
                w.run_id == run.run_id, fragments.state_is(w.state, *runs.OPEN_TASK_STATES)
            )
        )
    ).first()
    acts = await conn.execute(
        sa.select(s.activity_tasks)
        .where(a.run_id == run.run_id, fragments.state_is(a.state, *runs.OPEN_TASK_STATES))
        .order_by(a.step_seq)
    )
    live = await workers.live_workers(
        conn,
        namespace=run.namespace,
        task_queue=run.task_queue,
        stale_after=LIVE_AFTER,
        connection=run.connection,  # M7: only workers serving its connection take it
    )
    sticky = await sql.one(conn, _STICKY, {"run_id": run.run_id})
    skipped = await count_skipped_signals(conn, run_id=run.run_id)
    started = await children.children_of(conn, run_ids=[run.run_id]) if run.has_children else []
    memo = await run_visibility.memo_of(conn, run.run_id)
    held = await run_visibility.attributes_of(conn, namespace=run.namespace, run_ids=[run.run_id])
    gap = None
    if task is not None and not any(run.workflow_type in types for _, types, _ in live):
        on = "" if run.connection == "default" else f" (connection {run.connection!r})"
        gap = (
            f"no live worker on task queue {run.task_queue!r}{on}"
            f" declares workflow type {run.workflow_type!r}"
        )
    elif task is not None and run.build_id is not None:
        gap = await _build_gap(conn, run, run.build_id)
    return RunDescription(
        run=run.info(),
        memo=memo,
        search_attributes=held.get(run.run_id, {}),
        workflow_task=None
        if task is None
        else PendingWorkflowTask(
            task_id=task.task_id,
            state=TaskState(task.state),
            attempt=task.attempt,
            lease_owner=task.lease_owner,
            available_at=task.available_at,
            last_failure=task.last_failure,
        ),
        activities=[
            PendingActivity(
                step_seq=act.step_seq,
                activity_type=act.activity_type,
                activity_execution_id=act.activity_execution_id,
                state=TaskState(act.state),
                attempt_number=act.attempt,
                lease_owner=act.lease_owner,
                last_failure=act.last_failure,
            )
            for act in acts
        ],
        compatibility_gap=gap,
        sticky_worker_id=sticky.sticky_worker_id,
        sticky_until=sticky.sticky_until,
        sticky_replay_mode=(
            None if sticky.sticky_replay_mode is None else ReplayMode(sticky.sticky_replay_mode)
        ),
        sticky_claimed_at=sticky.sticky_claimed_at,
        skipped_signals=skipped,
        children=started,
        local_activities=await count_local_activities(conn, run_id=run.run_id),
    )


async def _build_gap(conn: AsyncConnection, run: RunRow, build_id: str) -> str | None:
    """M7: a run pinned to a build no live worker of its queue runs is compatibility-blocked."""
    served = await workers.serves_build(
        conn,
        namespace=run.namespace,
        task_queue=run.task_queue,
        workflow_type=run.workflow_type,
        build_id=build_id,
        stale_after=LIVE_AFTER,
        connection=run.connection,
    )
    if served:
        return None
    return (
        f"compatibility blocked: the run is pinned to build {build_id!r} and no live"
        f" worker of that build on task queue {run.task_queue!r} declares workflow type"
        f" {run.workflow_type!r}"
    )


async def count_skipped_signals(conn: AsyncConnection, *, run_id: str) -> int:
    """How many signals the run recorded as skipped (SignalSkipped events, issue 13).

    Derived from history rather than kept as a counter on the run: the event is already written
    once per skipped signal id, in the completion's transaction, so a count cannot drift from
    it and needs no schema change; the scan is limited to the run's own rows by the history
    primary key (run_id, sequence), and describe() is an operator read, not a hot path.
    """
    h = s.history_events.c
    stmt = (
        sa.select(sa.func.count())
        .select_from(s.history_events)
        .where(h.run_id == run_id, h.event_type == "SignalSkipped")
    )
    return int((await conn.execute(stmt)).scalar_one())


async def count_local_activities(conn: AsyncConnection, *, run_id: str) -> int:
    """How many local activity executions the run recorded (A3), from its history.

    A local activity runs inside its workflow task and leaves no activity task row; its
    ActivityScheduled event (`execution_mode` local) is the one record of it.
    """
    h = s.history_events.c
    stmt = (
        sa.select(sa.func.count())
        .select_from(s.history_events)
        .where(
            h.run_id == run_id,
            h.event_type == "ActivityScheduled",
            h.payload["execution_mode"].astext == "local",
        )
    )
    return int((await conn.execute(stmt)).scalar_one())
