"""Worker sessions as operators see them (W9): one session, a listing, counts per state.

Read-only: each snapshot carries the holder's registration (and whether it went silent) and the
session's leased attempts, as the operator API serves them (PROTOCOL.md 12).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import fragments, sql
from burrow.store.models import (
    SessionCounts,
    SessionFailureReason,
    SessionHolder,
    SessionState,
    WorkerSessionInfo,
)
from burrow.store.sql import statement

# PROTOCOL.md 12: a holder whose registration heartbeat is older than this is gone (orphaned).
DEFAULT_OWNER_STALE = timedelta(seconds=30)


_SNAPSHOT_SQL = """
    SELECT s.*, o.task_queue AS holder_queue, o.state AS holder_state,
           o.heartbeat_at AS holder_heartbeat_at, {stale} AS holder_stale,
           (SELECT count(*) FROM activity_tasks a
            WHERE a.namespace = s.namespace AND a.session_id = s.session_id
              AND a.state = 'leased' AND a.lease_expires_at > now()) AS active_activity_count
    FROM worker_sessions s LEFT JOIN worker_registrations o ON o.worker_id = s.owner_worker_id
    WHERE s.namespace = :namespace AND {where}
    ORDER BY s.created_at DESC, s.session_id
    LIMIT :limit
"""
_SNAPSHOT = statement(
    _SNAPSHOT_SQL.format(
        stale=fragments.session_holder_gone("o"), where="s.session_id = :session_id"
    )
)
_LIST = statement(
    _SNAPSHOT_SQL.format(
        stale=fragments.session_holder_gone("o"),
        where="(CAST(:state AS text) IS NULL OR s.state = :state)",
    )
)
_COUNTS = statement(
    "SELECT state, count(*) AS n FROM worker_sessions WHERE namespace = :namespace GROUP BY state"
)


def session_info(row: sql.AnyRow) -> WorkerSessionInfo:
    """The typed session from a `worker_sessions` row (with snapshot columns when present)."""
    holder = None
    if row.owner_worker_id is not None and hasattr(row, "holder_stale"):
        holder = SessionHolder(
            worker_id=row.owner_worker_id,
            task_queue=row.holder_queue,
            status=row.holder_state,
            last_heartbeat_at=row.holder_heartbeat_at,
            is_stale=bool(row.holder_stale),
        )
    return WorkerSessionInfo(
        namespace=row.namespace,
        session_id=row.session_id,
        state=SessionState(row.state),
        lease_owner=row.owner_worker_id,
        connection=row.connection,
        queue=row.queue,
        requirements=list(row.requirements or []),
        lease_seconds=row.lease_seconds,
        ttl_seconds=row.ttl_seconds,
        max_concurrent_activities=row.max_concurrent_activities,
        create_if_missing=row.create_if_missing,
        allow_reacquire_after_failure=row.allow_reacquire_after_failure,
        lease_expires_at=row.lease_expires_at,
        ttl_expires_at=row.ttl_expires_at,
        last_heartbeat_at=row.last_heartbeat_at,
        failure_reason=(
            None if row.failure_reason is None else SessionFailureReason(row.failure_reason)
        ),
        close_reason=row.close_reason,
        closed_at=row.closed_at,
        reacquire_count=row.reacquire_count,
        created_at=row.created_at,
        updated_at=row.updated_at,
        active_activity_count=int(getattr(row, "active_activity_count", None) or 0),
        holder=holder,
    )


def stale_params(owner_stale: timedelta) -> dict[str, object]:
    """The parameter `owner_stale_sql()` binds."""
    return {"owner_stale_seconds": owner_stale.total_seconds()}


async def get_session(
    conn: AsyncConnection,
    *,
    namespace: str,
    session_id: str,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> WorkerSessionInfo | None:
    """One session with its holder and active activity count (W9), or None."""
    params = {
        "namespace": namespace,
        "session_id": session_id,
        "limit": 1,
        **stale_params(owner_stale),
    }
    row = await sql.first(conn, _SNAPSHOT, params)
    return None if row is None else session_info(row)


async def list_sessions(
    conn: AsyncConnection,
    *,
    namespace: str,
    state: SessionState | None = None,
    limit: int = 100,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> list[WorkerSessionInfo]:
    """The newest sessions of a namespace (of one state, if given), as operators see them (W9)."""
    params = {
        "namespace": namespace,
        "state": None if state is None else state.value,
        "limit": limit,
        **stale_params(owner_stale),
    }
    return [session_info(row) for row in await sql.fetch(conn, _LIST, params)]


async def session_counts(conn: AsyncConnection, *, namespace: str) -> SessionCounts:
    """Sessions of a namespace per state (W9 operator metrics)."""
    counts = {
        SessionState(row.state).value: int(row.n)
        for row in await sql.fetch(conn, _COUNTS, {"namespace": namespace})
    }
    return SessionCounts(total=sum(counts.values()), **counts)
