"""A workflow task's lease while it runs and when it fails: heartbeats and retries.

Its completion is store/completion/ (commands become events, follow-up tasks, run changes).
"""

from __future__ import annotations

from datetime import timedelta

from burrow.protocol.shapes import Failure
from burrow.store import fragments, payloads, sql
from burrow.store.models import Fence, FencedTask, HeartbeatResult
from burrow.store.sql import statement
from burrow.store.transactions import Txn

DEFAULT_WORKFLOW_TASK_RETRY_SECONDS = 1.0
MAX_WORKFLOW_TASK_RETRY_SECONDS = 60.0

_FAIL_WORKFLOW_TASK = statement(
    f"""
    WITH {fragments.fence_probe("workflow_tasks")}, task AS (
        UPDATE workflow_tasks
        SET {fragments.return_to_ready("now() + CAST(:backoff AS interval)", by_holder="true")}
        WHERE {fragments.LEASE_FENCE}
        RETURNING task_id, available_at, namespace, connection, queue, {fragments.sticky_owner()}
    )
    SELECT task.*, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN task ON true
    """,
    json_params=["last_failure"],
)


# A3: a local activity's heartbeat renews the lease of the workflow task running it, and learns
# whether the run was asked to cancel meanwhile.
_HEARTBEAT_WORKFLOW_TASK = statement(
    f"""
    WITH {fragments.fence_probe("workflow_tasks")}, task AS (
        UPDATE workflow_tasks
        SET lease_expires_at = now() + CAST(:lease_duration AS interval)
        WHERE {fragments.LEASE_FENCE}
        RETURNING run_id, lease_expires_at
    )
    SELECT task.lease_expires_at, runs.cancel_requested, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true
    LEFT JOIN (task JOIN runs USING (run_id)) ON true
    """
)


# A lease checked without a change: for reads a lease entitles to (a history page).
_CHECK_WORKFLOW_TASK_LEASE = statement(
    f"""
    WITH {fragments.fence_probe("workflow_tasks")}, held AS (
        SELECT task_id FROM workflow_tasks WHERE {fragments.LEASE_FENCE}
    )
    SELECT held.task_id, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN held ON true
    """
)


async def check_workflow_task_lease(conn: sql.Conn, *, lease: Fence) -> FencedTask:
    """The task, while `lease` is its current lease; else StaleLease saying why."""
    row = await sql.one(
        conn, _CHECK_WORKFLOW_TASK_LEASE, fragments.fence_params(lease, "workflow task")
    )
    if row.task_id is None:
        raise fragments.refused(row, lease, "workflow task")
    return fragments.fenced_task(row, lease)


async def heartbeat_workflow_task(
    conn: sql.Conn, *, lease: Fence, lease_duration: timedelta
) -> HeartbeatResult:
    """Renew a held workflow task lease; StaleLease (saying why) when it is not current."""
    params = {**fragments.fence_params(lease, "workflow task"), "lease_duration": lease_duration}
    row = await sql.one(conn, _HEARTBEAT_WORKFLOW_TASK, params)
    if row.lease_expires_at is None:
        raise fragments.refused(row, lease, "workflow task")
    return HeartbeatResult(
        cancel_requested=row.cancel_requested,
        lease_expires_at=row.lease_expires_at,
        task=fragments.fenced_task(row, lease),
    )


async def fail_workflow_task(txn: Txn[sql.Conn], *, lease: Fence, failure: Failure) -> FencedTask:
    """Hand the task back for a retry with backoff, recording why (visible in describe).

    The backoff grows with the attempt the fence names.
    """
    params = {
        **fragments.fence_params(lease, "workflow task"),
        "last_failure": payloads.failure_record(failure),
        "backoff": _backoff(lease),
    }
    row = await sql.one(txn.conn, _FAIL_WORKFLOW_TASK, params)
    if row.task_id is None:
        raise fragments.refused(row, lease, "workflow task")
    txn.notify_workflow_task(row, row.available_at)
    return fragments.fenced_task(row, lease)


def _backoff(lease: Fence) -> timedelta:
    attempt = lease.attempt or 1
    seconds = min(
        DEFAULT_WORKFLOW_TASK_RETRY_SECONDS * 2 ** (attempt - 1), MAX_WORKFLOW_TASK_RETRY_SECONDS
    )
    return timedelta(seconds=seconds)
