"""The worker roster and one task queue's detail, as the control plane serves them (SPEC M8).

Read-only. What `/api/workers` and `/api/task-queues/{name}` report in the reference server's
shapes (runtime/server/fleet_shapes.py): each registered worker with what it declared, and per
queue its pollers, open-task counts per kind, the oldest ready task and the current leases.
Counts cover open tasks only (through the open-task indexes): "added" and "dispatched in the
last minute" are the open tasks created, or claimed, within it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import sql
from burrow.store.models import WorkerState
from burrow.store.sql import statement

CURRENT_LEASE_LIMIT = 50


class RegisteredWorker(BaseModel):
    """One registered worker that has not stopped, and whether it went silent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    namespace: str
    task_queue: str
    connection: str
    build_id: str | None
    runtime: str
    sdk_version: str | None
    state: WorkerState
    stale: bool
    """Not heard from within the liveness window."""
    registered_at: datetime
    heartbeat_at: datetime
    workflow_types: list[str]
    activity_types: list[str]
    workflow_fingerprints: dict[str, str]
    capabilities: list[str]
    concurrency: int
    max_workflow_tasks: int | None
    max_activity_tasks: int | None


class KindCounts(BaseModel):
    """The open tasks of one kind on one queue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    ready: int = 0
    leased: int = 0
    expired_leases: int = 0
    oldest_lease_expired_at: datetime | None = None
    overdue: int = 0
    """Ready and due for longer than the republish window: a wake may have been lost (C4)."""
    oldest_overdue_since: datetime | None = None
    added_last_minute: int = 0
    dispatched_last_minute: int = 0


class OldestReady(BaseModel):
    """The queue's longest-waiting ready and due task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    task_type: str
    workflow_id: str
    run_id: str
    available_at: datetime


class CurrentLease(BaseModel):
    """A leased workflow or activity task of the queue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    task_type: str
    workflow_id: str
    run_id: str
    lease_owner: str | None
    lease_expires_at: datetime | None
    is_expired: bool
    attempt: int
    activity_attempt_id: str | None


class QueueDetail(BaseModel):
    """What the store knows of one task queue; `now` is the database's clock."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    now: datetime
    kinds: dict[str, KindCounts]
    """`workflow` and `activity`."""
    pending_queries: int = 0
    oldest_ready: OldestReady | None = None
    current_leases: list[CurrentLease] = []


_WORKERS = statement("""
    SELECT worker_id, namespace, task_queue, connection, build_id, runtime, sdk_version, state,
           heartbeat_at <= now() - make_interval(secs => :stale_seconds) AS stale,
           registered_at, heartbeat_at, workflow_types, activity_types, workflow_fingerprints,
           capabilities, concurrency, max_workflow_tasks, max_activity_tasks
    FROM worker_registrations
    WHERE namespace = :namespace AND state <> 'stopped'
      AND (CAST(:task_queue AS text) IS NULL OR task_queue = :task_queue)
      AND (CAST(:worker_id AS text) IS NULL OR worker_id = :worker_id)
    ORDER BY heartbeat_at DESC, worker_id
""")
_COUNTS_SQL = """
    SELECT '{kind}' AS kind,
           count(*) FILTER (WHERE state = 'ready' AND available_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'leased') AS leased,
           count(*) FILTER (WHERE state = 'leased' AND lease_expires_at <= now())
               AS expired_leases,
           min(lease_expires_at) FILTER (WHERE state = 'leased' AND lease_expires_at <= now())
               AS oldest_lease_expired_at,
           count(*) FILTER (WHERE state = 'ready' AND available_at
                            <= now() - make_interval(secs => :overdue_seconds)) AS overdue,
           min(available_at) FILTER (WHERE state = 'ready' AND available_at
                            <= now() - make_interval(secs => :overdue_seconds))
               AS oldest_overdue_since,
           count(*) FILTER (WHERE created_at >= now() - interval '1 minute')
               AS added_last_minute,
           count(*) FILTER (WHERE claimed_at >= now() - interval '1 minute')
               AS dispatched_last_minute
    FROM {kind}_tasks
    WHERE state IN ('ready', 'leased') AND namespace = :namespace AND queue = :queue
"""
_COUNTS = statement(
    " UNION ALL ".join(_COUNTS_SQL.format(kind=kind) for kind in ("workflow", "activity"))
)
_PENDING_QUERIES = statement("""
    SELECT count(*) AS pending, now() AS now FROM query_tasks
    WHERE state IN ('ready', 'leased') AND namespace = :namespace AND queue = :queue
""")
_OLDEST_SQL = """
    (SELECT t.task_id, '{kind}' AS task_type, r.workflow_id, t.run_id, t.available_at
     FROM {kind}_tasks t JOIN runs r ON r.run_id = t.run_id
     WHERE t.state = 'ready' AND t.available_at <= now()
       AND t.namespace = :namespace AND t.queue = :queue
     ORDER BY t.available_at, t.task_id LIMIT 1)
"""
_OLDEST = statement(
    " UNION ALL ".join(_OLDEST_SQL.format(kind=kind) for kind in ("workflow", "activity"))
    + " ORDER BY available_at, task_id LIMIT 1"
)
_LEASES_SQL = """
    (SELECT t.task_id, '{kind}' AS task_type, r.workflow_id, t.run_id, t.lease_owner,
            t.lease_expires_at, COALESCE(t.lease_expires_at <= now(), false) AS is_expired,
            t.attempt, {attempt_id} AS activity_attempt_id
     FROM {kind}_tasks t JOIN runs r ON r.run_id = t.run_id
     WHERE t.state = 'leased' AND t.namespace = :namespace AND t.queue = :queue
     ORDER BY t.lease_expires_at, t.task_id LIMIT :limit)
"""
_LEASES = statement(
    " UNION ALL ".join(
        _LEASES_SQL.format(kind=kind, attempt_id=attempt_id)
        for kind, attempt_id in (
            ("workflow", "CAST(NULL AS text)"),
            ("activity", "CAST(t.activity_attempt_id AS text)"),
        )
    )
    + " ORDER BY is_expired DESC, task_id LIMIT :limit"
)


async def registered_workers(
    conn: AsyncConnection,
    *,
    namespace: str,
    stale_after: timedelta,
    task_queue: str | None = None,
    worker_id: str | None = None,
) -> list[RegisteredWorker]:
    """The namespace's workers that have not stopped, most recently heard from first."""
    rows = await sql.fetch(
        conn,
        _WORKERS,
        {
            "namespace": namespace,
            "stale_seconds": stale_after.total_seconds(),
            "task_queue": task_queue,
            "worker_id": worker_id,
        },
    )
    return [RegisteredWorker.model_validate(dict(row)) for row in rows]


async def queue_detail(
    conn: AsyncConnection, *, namespace: str, queue: str, overdue_after: timedelta
) -> QueueDetail:
    """Open-task counts per kind, pending queries, the oldest ready task and current leases."""
    params = {"namespace": namespace, "queue": queue}
    counts = await sql.fetch(
        conn, _COUNTS, {**params, "overdue_seconds": overdue_after.total_seconds()}
    )
    pending = await sql.one(conn, _PENDING_QUERIES, params)
    oldest = await sql.first(conn, _OLDEST, params)
    leases = await sql.fetch(conn, _LEASES, {**params, "limit": CURRENT_LEASE_LIMIT})
    return QueueDetail(
        now=pending.now,
        kinds={row.kind: KindCounts.model_validate(dict(row)) for row in counts},
        pending_queries=pending.pending,
        oldest_ready=None if oldest is None else OldestReady.model_validate(dict(oldest)),
        current_leases=[CurrentLease.model_validate(dict(row)) for row in leases],
    )
