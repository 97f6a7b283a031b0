"""An activity attempt's lease renewed without progress (PROTOCOL.md 6.2, 18.3)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import fragments, sessions, sql
from burrow.store.models import Fence, LeaseRenewed
from burrow.store.sql import statement

# A lease renewal without progress: only the lease moves. Heartbeat time, details and the
# business deadlines (start-to-close from `started_at`, heartbeat from `heartbeat_at`) stay,
# and an expired lease is never revived (LEASE_FENCE). The identity comes back to be checked.
_RENEW_LEASE = statement(
    f"""
    WITH {fragments.fence_probe("activity_tasks")}, renewed AS (
        UPDATE activity_tasks
        SET lease_expires_at = now() + CAST(:lease_duration AS interval)
        WHERE {fragments.LEASE_FENCE}{fragments.ATTEMPT_ID_FENCE}
        RETURNING run_id, activity_execution_id, CAST(activity_attempt_id AS text) AS attempt_id,
                  attempt AS attempt_number, cancel_requested, lease_expires_at, heartbeat_at,
                  heartbeat_seconds, session_id, now() AS server_time
    )
    SELECT renewed.*, runs.workflow_id, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN renewed ON true
    LEFT JOIN runs ON runs.run_id = renewed.run_id
    """
)


async def renew_activity_lease(
    conn: AsyncConnection, *, lease: Fence, lease_duration: timedelta
) -> LeaseRenewed:
    """Renew a live attempt's lease, recording no progress; refused like a heartbeat (6.2).

    The session of a session attempt is renewed with it (W1), as a heartbeat would.
    """
    params = {**fragments.fence_params(lease, "activity"), "lease_duration": lease_duration}
    row = await sql.one(conn, _RENEW_LEASE, params)
    if row.lease_expires_at is None:
        raise fragments.refused(row, lease, "activity")
    if row.session_id is not None:
        await sessions.renew_for_attempts(conn, task_ids={lease.task_id})
    return LeaseRenewed(
        task=fragments.fenced_task(row, lease),
        workflow_id=row.workflow_id,
        run_id=row.run_id,
        activity_execution_id=row.activity_execution_id,
        activity_attempt_id=row.attempt_id,
        attempt_number=row.attempt_number,
        lease_owner=lease.lease_owner,
        cancel_requested=row.cancel_requested,
        server_time=row.server_time,
        lease_expires_at=row.lease_expires_at,
        last_heartbeat_at=row.heartbeat_at,
        heartbeat_deadline_at=None
        if row.heartbeat_at is None or row.heartbeat_seconds is None
        else row.heartbeat_at + timedelta(seconds=row.heartbeat_seconds),
    )
