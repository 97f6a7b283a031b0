"""A workflow task's lease while it runs and when it fails: heartbeats and retries.

Its completion is store/completion/ (commands become events, follow-up tasks, run changes).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from burrow.protocol.shapes import JsonObject
from burrow.store import errors, fragments, sql
from burrow.store.models import HeartbeatResult, Lease
from burrow.store.sql import statement
from burrow.store.transactions import Txn

DEFAULT_WORKFLOW_TASK_RETRY_SECONDS = 1.0
MAX_WORKFLOW_TASK_RETRY_SECONDS = 60.0

_FAIL_WORKFLOW_TASK = statement(
    f"""
    UPDATE workflow_tasks SET {fragments.return_to_ready("now() + CAST(:backoff AS interval)")}
    WHERE {fragments.LEASE_FENCE}
    RETURNING task_id, available_at, namespace, connection, queue, {fragments.sticky_owner()}
    """,
    json_params=["last_failure"],
)


# A3: a local activity's heartbeat renews the lease of the workflow task running it, and learns
# whether the run was asked to cancel meanwhile.
_HEARTBEAT_WORKFLOW_TASK = statement(
    f"""
    WITH task AS (
        UPDATE workflow_tasks
        SET lease_expires_at = now() + CAST(:lease_duration AS interval)
        WHERE {fragments.LEASE_FENCE}
        RETURNING run_id, lease_expires_at
    )
    SELECT task.lease_expires_at, runs.cancel_requested FROM task JOIN runs USING (run_id)
    """
)


async def heartbeat_workflow_task(
    conn: sql.Conn, *, lease: Lease, lease_duration: timedelta
) -> HeartbeatResult:
    """Renew a held workflow task lease; StaleLease when it is no longer current."""
    params = {**fragments.fence_params(lease), "lease_duration": lease_duration}
    row = await sql.first(conn, _HEARTBEAT_WORKFLOW_TASK, params)
    if row is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    return HeartbeatResult(
        cancel_requested=row.cancel_requested, lease_expires_at=row.lease_expires_at
    )


async def fail_workflow_task(txn: Txn[sql.Conn], *, lease: Lease, failure: JsonObject) -> datetime:
    """Hand the task back for a retry with backoff, recording why (visible in describe)."""
    backoff = min(
        DEFAULT_WORKFLOW_TASK_RETRY_SECONDS * 2 ** (lease.attempt - 1),
        MAX_WORKFLOW_TASK_RETRY_SECONDS,
    )
    params = {
        **fragments.fence_params(lease),
        "backoff": timedelta(seconds=backoff),
        "last_failure": failure,
    }
    row = await sql.first(txn.conn, _FAIL_WORKFLOW_TASK, params)
    if row is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    available_at: datetime = row.available_at
    txn.notify_workflow_task(row, available_at)
    return available_at
