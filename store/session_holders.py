"""The sessions a live worker holds, between attempts too (W1, W5).

A holder that runs no attempt still holds its sessions: its worker heartbeat renews them, so a
workflow may sleep or wait for a signal longer than `lease_seconds` between session steps. A
planned stop (drain, deregistration) hands over the sessions another worker may reacquire
(`orphaned`, reason `worker_shutdown`) and closes the others. Lock order as in store/sessions.py:
the worker registration first (the caller's UPDATE of it), then sessions by id.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import sessions, sql
from burrow.store.models import SessionState
from burrow.store.sql import statement
from burrow.store.transactions import Txn

SHUTDOWN = sessions.CLOSE_REASON_SHUTDOWN

# W1: the unexpired sessions of an active holder, renewed for their own lease_seconds. A lease
# that already lapsed is left to the status refresh (PROTOCOL.md 12), as an explicit session
# heartbeat would be refused for it.
_RENEW_HELD = statement(
    """
    WITH held AS (
        SELECT s.namespace, s.session_id
        FROM worker_sessions s JOIN worker_registrations o ON o.worker_id = s.owner_worker_id
        WHERE s.owner_worker_id = :worker_id AND o.state = 'active' AND s.state = 'active'
          AND s.lease_expires_at > now() AND s.ttl_expires_at > now()
        ORDER BY s.session_id
        FOR NO KEY UPDATE OF s
    )
    """
    + sessions.RENEW_HELD_SESSIONS
)

# W5: a planned stop orphans what may be reacquired and closes the rest, both `worker_shutdown`.
_RELEASE_HELD = statement(
    """
    WITH held AS (
        SELECT namespace, session_id FROM worker_sessions
        WHERE owner_worker_id = :worker_id AND state = 'active'
        ORDER BY session_id
        FOR NO KEY UPDATE
    )
    UPDATE worker_sessions t
    SET state = CASE WHEN t.allow_reacquire_after_failure THEN 'orphaned' ELSE 'closed' END,
        failure_reason = CASE WHEN t.allow_reacquire_after_failure THEN :reason END,
        close_reason = CASE WHEN t.allow_reacquire_after_failure THEN NULL ELSE :reason END,
        closed_at = CASE WHEN t.allow_reacquire_after_failure THEN NULL ELSE now() END,
        updated_at = now()
    FROM held WHERE t.namespace = held.namespace AND t.session_id = held.session_id
    RETURNING t.namespace, t.session_id, t.state
    """
)


async def renew_held(conn: AsyncConnection, *, worker_id: str) -> None:
    """Renew every unexpired session an active worker holds (W1: its heartbeat keeps them)."""
    await sql.execute(conn, _RENEW_HELD, {"worker_id": worker_id})


async def release_held(txn: Txn[AsyncConnection], *, worker_id: str) -> dict[str, list[str]]:
    """Hand over or close every active session a stopping worker holds (W5); ids per new state.

    The ready attempts of the handed-over sessions are announced, so a capable worker
    reacquires the session without waiting for a re-poll.
    """
    released = await sql.fetch(
        txn.conn, _RELEASE_HELD, {"worker_id": worker_id, "reason": SHUTDOWN}
    )
    moved: dict[str, list[str]] = {}
    for row in released:
        moved.setdefault(row.state, []).append(row.session_id)
    orphaned = [row for row in released if row.state == SessionState.ORPHANED]
    await sessions.announce_reacquirable(txn, orphaned)
    return moved
