"""Worker sessions (W1, W3, W5, W6): admission, lease renewal, close and expiry.

A session row is locked (FOR UPDATE) by every operation that decides who owns it, so two
claimers never both take it; the claimer's registration row is locked first, so the sessions a
worker holds are counted by one claim at a time. Locks are taken in one order everywhere:
activity task rows (SKIP LOCKED), then the worker registration, then sessions by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol.shapes import SessionSpec
from burrow.store import errors, fragments, session_views, sql
from burrow.store.models import (
    SessionAdmission,
    SessionFailureReason,
    SessionOutcome,
    SessionRefusal,
    SessionState,
    WorkerSessionInfo,
    WorkerState,
)
from burrow.store.session_views import session_info, stale_params
from burrow.store.sql import statement
from burrow.store.transactions import Txn

DEFAULT_OWNER_STALE = session_views.DEFAULT_OWNER_STALE
CLOSE_REASON_SHUTDOWN = "worker_shutdown"


def _transition(s: str, o: str) -> tuple[str, str]:
    """(next state, failure reason) SQL for session `s` with holder `o`: NULL when unchanged.

    The one statement of the status refresh every touch and every repair pass applies
    (PROTOCOL.md 12): TTL passed, lease lapsed, holder gone. Losing the lease or the holder
    fails the session for good when it may not be reacquired.
    """
    ttl = (
        f"{s}.state IN ('active', 'expired', 'orphaned') AND {s}.ttl_expires_at <= now()"
        f" AND {s}.failure_reason IS DISTINCT FROM 'ttl_expired'"
    )
    lease = f"{s}.state = 'active' AND {s}.lease_expires_at <= now()"
    stale = f"{s}.state = 'active' AND {fragments.session_holder_gone(o)}"

    def lost(state: str) -> str:
        return f"CASE WHEN {s}.allow_reacquire_after_failure THEN '{state}' ELSE 'failed' END"

    state = (
        f"CASE WHEN {ttl} THEN 'expired' WHEN {lease} THEN {lost('expired')}"
        f" WHEN {stale} THEN {lost('orphaned')} END"
    )
    reason = (
        f"CASE WHEN {ttl} THEN 'ttl_expired' WHEN {lease} THEN 'lease_expired'"
        f" WHEN {stale} THEN 'worker_heartbeat_stale' END"
    )
    return state, reason


_NEXT_STATE, _NEXT_REASON = _transition("s", "o")

_LOCK_SESSION = statement(
    f"""
    SELECT s.*, {_NEXT_STATE} AS next_state, {_NEXT_REASON} AS next_reason
    FROM worker_sessions s LEFT JOIN worker_registrations o ON o.worker_id = s.owner_worker_id
    WHERE s.namespace = :namespace AND s.session_id = :session_id
    FOR UPDATE OF s
    """
)

_SET_STATE = statement(
    """
    UPDATE worker_sessions SET state = :state, failure_reason = :reason, updated_at = now()
    WHERE namespace = :namespace AND session_id = :session_id
    """
)

# The repair pass (store invariant 5): lock only the sessions that change, skipping those a
# claim or heartbeat holds (they refresh them themselves).
_EXPIRE_SESSIONS = statement(
    f"""
    WITH due AS (
        SELECT s.namespace, s.session_id, {_NEXT_STATE} AS next_state,
               {_NEXT_REASON} AS next_reason
        FROM worker_sessions s LEFT JOIN worker_registrations o ON o.worker_id = s.owner_worker_id
        WHERE s.state IN ('active', 'expired', 'orphaned') AND ({_NEXT_STATE}) IS NOT NULL
        FOR UPDATE OF s SKIP LOCKED
    )
    UPDATE worker_sessions t
    SET state = due.next_state, failure_reason = due.next_reason, updated_at = now()
    FROM due WHERE t.namespace = due.namespace AND t.session_id = due.session_id
    RETURNING t.namespace, t.session_id, t.state
    """
)
# The ready attempts of sessions another worker may now reacquire: announced again (C4).
_READY_IN_SESSIONS = statement(
    """
    SELECT task_id, namespace, connection, queue FROM activity_tasks
    WHERE state = 'ready' AND namespace = ANY(:namespaces) AND session_id = ANY(:session_ids)
    """
)

_INSERT_SESSION = statement(
    """
    INSERT INTO worker_sessions (namespace, session_id, state, owner_worker_id, connection, queue,
        requirements, lease_seconds, ttl_seconds, max_concurrent_activities, create_if_missing,
        allow_reacquire_after_failure, lease_expires_at, ttl_expires_at, last_heartbeat_at)
    VALUES (:namespace, :session_id, 'active', :worker_id, :connection, :queue,
        CAST(:requirements AS text[]), CAST(:lease_seconds AS integer),
        CAST(:ttl_seconds AS integer), :max_concurrent_activities,
        :create_if_missing, :allow_reacquire_after_failure,
        now() + make_interval(secs => CAST(:lease_seconds AS integer)),
        now() + make_interval(secs => CAST(:ttl_seconds AS integer)), now())
    ON CONFLICT (namespace, session_id) DO NOTHING
    RETURNING session_id
    """
)

_RENEW = statement(
    """
    UPDATE worker_sessions
    SET lease_expires_at = now() + make_interval(
            secs => coalesce(CAST(:lease_seconds AS integer), lease_seconds)),
        last_heartbeat_at = now(), updated_at = now()
    WHERE namespace = :namespace AND session_id = :session_id
    """
)

_REACQUIRE = statement(
    """
    UPDATE worker_sessions
    SET state = 'active', owner_worker_id = :worker_id, failure_reason = NULL,
        lease_expires_at = now() + make_interval(secs => lease_seconds),
        last_heartbeat_at = now(), reacquire_count = reacquire_count + 1, updated_at = now()
    WHERE namespace = :namespace AND session_id = :session_id
    """
)

_CLOSE = statement(
    """
    UPDATE worker_sessions
    SET state = 'closed', closed_at = now(), close_reason = :reason, updated_at = now()
    WHERE namespace = :namespace AND session_id = :session_id
    """
)

# W6: the active, unexpired session leases one registration holds.
_COUNT_HELD = statement(
    """
    SELECT count(*) FROM worker_sessions
    WHERE owner_worker_id = :worker_id AND state = 'active'
      AND lease_expires_at > now() AND ttl_expires_at > now()
    """
)

# W6: the leased, unexpired attempts of one session.
_COUNT_LEASED = statement(
    """
    SELECT count(*) FROM activity_tasks
    WHERE namespace = :namespace AND session_id = :session_id AND state = 'leased'
      AND lease_expires_at > now()
    """
)

# W1: the lease keeper of a worker renews the sessions of the attempts it still holds, as an
# activity heartbeat would; sessions are locked in id order (the module's lock order).
# Renews, for its own lease_seconds, each session a `held` CTE selected (and locked).
RENEW_HELD_SESSIONS = """
    UPDATE worker_sessions t
    SET lease_expires_at = now() + make_interval(secs => t.lease_seconds),
        last_heartbeat_at = now(), updated_at = now()
    FROM held WHERE t.namespace = held.namespace AND t.session_id = held.session_id
"""

_RENEW_FOR_ATTEMPTS = statement(
    f"""
    WITH held AS (
        SELECT s.namespace, s.session_id
        FROM worker_sessions s JOIN activity_tasks a
            ON a.namespace = s.namespace AND a.session_id = s.session_id
        WHERE a.task_id = ANY({fragments.TASK_IDS}) AND a.state = 'leased'
          AND s.state = 'active' AND s.owner_worker_id = a.lease_owner
          AND s.lease_expires_at > now() AND s.ttl_expires_at > now()
        ORDER BY s.session_id
        FOR NO KEY UPDATE OF s
    )
    """
    + RENEW_HELD_SESSIONS
)

_LOCK_WORKER = statement(
    """
    SELECT worker_id, namespace, task_queue, state, capabilities, max_concurrent_worker_sessions,
           connection
    FROM worker_registrations WHERE worker_id = :worker_id
    FOR NO KEY UPDATE
    """
)


@dataclass(frozen=True, slots=True)
class Claimant:
    """The registration of a worker asking for a session, locked for its admission."""

    worker_id: str
    namespace: str
    task_queue: str
    state: WorkerState
    capabilities: frozenset[str]
    max_concurrent_worker_sessions: int
    connection: str = "default"


async def lock_claimant(conn: AsyncConnection, worker_id: str) -> Claimant | None:
    """Lock and read a worker's registration; None when it never registered."""
    row = await sql.first(conn, _LOCK_WORKER, {"worker_id": worker_id})
    if row is None:
        return None
    return Claimant(
        worker_id=row.worker_id,
        namespace=row.namespace,
        task_queue=row.task_queue,
        state=WorkerState(row.state),
        capabilities=frozenset(row.capabilities or ()),
        max_concurrent_worker_sessions=row.max_concurrent_worker_sessions,
        connection=row.connection,
    )


async def _lock_session(
    conn: AsyncConnection, namespace: str, session_id: str, owner_stale: timedelta
) -> sql.Row | None:
    """Lock a session row and apply its status refresh (PROTOCOL.md 12); None when absent."""
    key = {"namespace": namespace, "session_id": session_id}
    row = await sql.first(conn, _LOCK_SESSION, {**key, **stale_params(owner_stale)})
    if row is None or row.next_state is None:
        return row
    await sql.execute(conn, _SET_STATE, {**key, "state": row.next_state, "reason": row.next_reason})
    return await sql.first(conn, _LOCK_SESSION, {**key, **stale_params(owner_stale)})


async def _snapshot(
    conn: AsyncConnection, namespace: str, session_id: str, owner_stale: timedelta
) -> WorkerSessionInfo:
    info = await session_views.get_session(
        conn, namespace=namespace, session_id=session_id, owner_stale=owner_stale
    )
    if info is None:
        raise errors.InvariantBroken(f"session {session_id!r} vanished while its row was locked")
    return info


async def _held(conn: AsyncConnection, worker_id: str) -> int:
    return int(await sql.scalar_one(conn, _COUNT_HELD, {"worker_id": worker_id}))


async def _leased(conn: AsyncConnection, namespace: str, session_id: str) -> int:
    params = {"namespace": namespace, "session_id": session_id}
    return int(await sql.scalar_one(conn, _COUNT_LEASED, params))


def _is_terminal(row: sql.Row) -> bool:
    """Closed, failed, or past its TTL: that session id is done (W5)."""
    return row.state in (SessionState.CLOSED, SessionState.FAILED) or (
        row.state == SessionState.EXPIRED and row.failure_reason == SessionFailureReason.TTL_EXPIRED
    )


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """What a session admission is asked for: the options, and where the work runs.

    `queue` is the queue the work is routed to (the activity task's, or the worker's for an
    explicit create). `pending` counts attempts of this session the same claim already admitted
    but not yet leased; `for_activity` applies the per-session activity limit.
    """

    namespace: str
    options: SessionSpec
    queue: str
    connection: str = "default"
    pending: int = 0
    for_activity: bool = True


async def admit(
    conn: AsyncConnection,
    *,
    claimant: Claimant | None,
    request: AdmissionRequest,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> SessionAdmission:
    """Decide, and apply, a worker's admission to a session (W6; PROTOCOL.md 12 acquire).

    The caller locked `claimant` (lock_claimant); this locks the session. Admitted, the session is
    created, renewed or reacquired for the claimant; refused, nothing changes but the refresh.
    """
    options, namespace = request.options, request.namespace
    if claimant is None or claimant.state != WorkerState.ACTIVE:
        return SessionAdmission.refused(SessionRefusal.WORKER_NOT_REGISTERED)
    if claimant.task_queue != request.queue:  # W3: queue routing first
        return SessionAdmission.refused(SessionRefusal.SESSION_QUEUE_MISMATCH)
    missing = sorted(set(options.requirements) - claimant.capabilities)
    if missing:
        return SessionAdmission.refused(
            SessionRefusal.SESSION_REQUIREMENTS_NOT_MET, missing_requirements=missing
        )
    row = await _lock_session(conn, namespace, options.session_id, owner_stale)
    if row is None:
        if not options.create_if_missing:
            return SessionAdmission.refused(SessionRefusal.SESSION_MISSING)
        refusal = await _worker_limit(conn, claimant)
        if refusal is not None:
            return refusal
        created = await sql.first(
            conn,
            _INSERT_SESSION,
            {
                "namespace": namespace,
                "session_id": options.session_id,
                "worker_id": claimant.worker_id,
                "connection": options.connection or request.connection,
                "queue": options.queue or request.queue,
                "requirements": list(options.requirements),
                "lease_seconds": options.lease_seconds,
                "ttl_seconds": options.ttl_seconds,
                "max_concurrent_activities": options.max_concurrent_activities,
                "create_if_missing": options.create_if_missing,
                "allow_reacquire_after_failure": options.allow_reacquire_after_failure,
            },
        )
        if created is not None:
            return await _admitted(conn, SessionOutcome.CREATED, request, owner_stale)
        # Another claim created it first and has committed: decide against its row.
        row = await _lock_session(conn, namespace, options.session_id, owner_stale)
        if row is None:
            raise errors.InvariantBroken(
                f"session {options.session_id!r} was neither created nor found after a conflict"
            )
    return await _admit_existing(conn, claimant, request, row, owner_stale)


async def _admit_existing(
    conn: AsyncConnection,
    claimant: Claimant,
    request: AdmissionRequest,
    row: sql.Row,
    owner_stale: timedelta,
) -> SessionAdmission:
    namespace, session_id = request.namespace, request.options.session_id
    key = {"namespace": namespace, "session_id": session_id}
    if _is_terminal(row):
        reason = (
            SessionRefusal.SESSION_REACQUIRE_DISALLOWED
            if row.state == SessionState.FAILED
            else SessionRefusal.SESSION_CLOSED
        )
        return SessionAdmission.refused(reason, session_info(row))
    if row.state == SessionState.ACTIVE and row.owner_worker_id != claimant.worker_id:
        return SessionAdmission.refused(
            SessionRefusal.SESSION_OWNED_BY_ANOTHER_WORKER, session_info(row)
        )
    if request.for_activity:
        leased = await _leased(conn, namespace, session_id) + request.pending
        if leased >= row.max_concurrent_activities:
            return SessionAdmission.refused(
                SessionRefusal.SESSION_ACTIVITY_LIMIT_EXCEEDED, session_info(row)
            )
    if row.state == SessionState.ACTIVE:
        await sql.execute(conn, _RENEW, {**key, "lease_seconds": None})
        return await _admitted(conn, SessionOutcome.REUSED, request, owner_stale)
    # Expired or orphaned (W5): the refresh already failed it when reacquiring is not allowed.
    refusal = await _worker_limit(conn, claimant)
    if refusal is not None:
        return refusal
    await sql.execute(conn, _REACQUIRE, {**key, "worker_id": claimant.worker_id})
    return await _admitted(conn, SessionOutcome.REACQUIRED, request, owner_stale)


async def _worker_limit(conn: AsyncConnection, claimant: Claimant) -> SessionAdmission | None:
    """The refusal when the claimant already holds as many sessions as it may (W6)."""
    limit = claimant.max_concurrent_worker_sessions
    if await _held(conn, claimant.worker_id) >= limit:
        return SessionAdmission.refused(
            SessionRefusal.WORKER_SESSION_LIMIT_EXCEEDED, max_concurrent_worker_sessions=limit
        )
    return None


async def _admitted(
    conn: AsyncConnection,
    outcome: SessionOutcome,
    request: AdmissionRequest,
    owner_stale: timedelta,
) -> SessionAdmission:
    session = await _snapshot(conn, request.namespace, request.options.session_id, owner_stale)
    return SessionAdmission(admitted=True, outcome=outcome, session=session)


async def create_session(
    conn: AsyncConnection,
    *,
    worker_id: str,
    namespace: str,
    options: SessionSpec,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> SessionAdmission:
    """Create (or reuse, or reacquire) a session before polling (W2, W5: explicit create).

    The session's queue must be the worker's registered queue.
    """
    claimant = await lock_claimant(conn, worker_id)
    queue = options.queue or (claimant.task_queue if claimant is not None else "")
    request = AdmissionRequest(
        namespace=namespace,
        options=options,
        queue=queue,
        # M7: without one of its own, the session is on the creating worker's connection.
        connection=options.connection or (claimant.connection if claimant else "default"),
        for_activity=False,
    )
    return await admit(conn, claimant=claimant, request=request, owner_stale=owner_stale)


async def heartbeat_session(
    conn: AsyncConnection,
    *,
    worker_id: str,
    namespace: str,
    session_id: str,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
    reacquire: bool = False,
    lease_seconds: int | None = None,
) -> SessionAdmission:
    """Renew a session's lease for its owner (W1, W5: explicit heartbeat).

    `lease_seconds` renews it for that long this time (default: the session's own). With
    `reacquire` (an activity heartbeat of the owner's own attempt), an expired or orphaned
    session still owned by the same worker is taken back when its options allow it and the
    worker is still active: a draining worker handed its sessions over (W5).
    """
    # Registration before session (the module's lock order): a drain in flight is seen.
    claimant = await lock_claimant(conn, worker_id) if reacquire else None
    row = await _lock_session(conn, namespace, session_id, owner_stale)
    if row is None:
        return SessionAdmission.refused(SessionRefusal.SESSION_NOT_FOUND)
    key = {"namespace": namespace, "session_id": session_id}
    if row.owner_worker_id != worker_id:
        return SessionAdmission.refused(SessionRefusal.SESSION_OWNER_MISMATCH, session_info(row))
    if row.state != SessionState.ACTIVE:
        may_reacquire = claimant is not None and claimant.state == WorkerState.ACTIVE
        if not (may_reacquire and not _is_terminal(row) and row.allow_reacquire_after_failure):
            return SessionAdmission.refused(SessionRefusal.SESSION_NOT_ACTIVE, session_info(row))
        await sql.execute(conn, _REACQUIRE, {**key, "worker_id": worker_id})
        session = await _snapshot(conn, namespace, session_id, owner_stale)
        return SessionAdmission(admitted=True, outcome=SessionOutcome.REACQUIRED, session=session)
    await sql.execute(conn, _RENEW, {**key, "lease_seconds": lease_seconds})
    session = await _snapshot(conn, namespace, session_id, owner_stale)
    return SessionAdmission(
        admitted=True, outcome=SessionOutcome.HEARTBEAT_RECORDED, session=session
    )


async def close_session(
    conn: AsyncConnection,
    *,
    worker_id: str,
    namespace: str,
    session_id: str,
    reason: str = CLOSE_REASON_SHUTDOWN,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> SessionAdmission:
    """Close a session for good (W5: terminal for that id); only its owner may close it."""
    row = await _lock_session(conn, namespace, session_id, owner_stale)
    if row is None:
        return SessionAdmission.refused(SessionRefusal.SESSION_NOT_FOUND)
    if row.state == SessionState.CLOSED:
        return SessionAdmission(
            admitted=True,
            outcome=SessionOutcome.ALREADY_CLOSED,
            session=session_info(row),
        )
    if row.owner_worker_id != worker_id:
        return SessionAdmission.refused(SessionRefusal.SESSION_OWNER_MISMATCH, session_info(row))
    await sql.execute(
        conn, _CLOSE, {"namespace": namespace, "session_id": session_id, "reason": reason}
    )
    session = await _snapshot(conn, namespace, session_id, owner_stale)
    return SessionAdmission(admitted=True, outcome=SessionOutcome.CLOSED, session=session)


async def renew_for_attempts(conn: AsyncConnection, *, task_ids: set[str]) -> None:
    """Renew the sessions of the given leased attempts for the workers that hold them (W1)."""
    if task_ids:
        await sql.execute(conn, _RENEW_FOR_ATTEMPTS, {"task_ids": sorted(task_ids)})


async def announce_ready(txn: Txn[sql.Conn], *, namespace: str, session_id: str) -> None:
    """Announce a session's ready attempts again: one of its leased attempts just ended.

    An attempt refused for the session's activity limit (W6) waits for that; without a notice it
    would wait for the next re-poll.
    """
    params = {"namespaces": [namespace], "session_ids": [session_id]}
    for task in await sql.fetch(txn.conn, _READY_IN_SESSIONS, params):
        txn.notify(task.namespace, task.connection, task.queue, "activity", task.task_id)


async def expire_sessions(txn: Txn[AsyncConnection], *, owner_stale: timedelta) -> dict[str, int]:
    """The repair pass's session refresh (W5): how many sessions moved to each state.

    The ready attempts of sessions that became reacquirable are announced again, so a capable
    worker takes them without waiting for a re-poll.
    """
    moved: dict[str, int] = {}
    reacquirable: list[sql.Row] = []
    for row in await sql.fetch(txn.conn, _EXPIRE_SESSIONS, stale_params(owner_stale)):
        moved[row.state] = moved.get(row.state, 0) + 1
        if row.state in (SessionState.EXPIRED, SessionState.ORPHANED):
            reacquirable.append(row)
    await announce_reacquirable(txn, reacquirable)
    return moved


async def announce_reacquirable(txn: Txn[AsyncConnection], released: list[sql.Row]) -> None:
    """Announce the ready attempts of sessions another worker may now reacquire (C4).

    `released`: rows naming each session by `namespace` and `session_id`.
    """
    if not released:
        return
    params = {
        "namespaces": sorted({row.namespace for row in released}),
        "session_ids": sorted({row.session_id for row in released}),
    }
    for task in await sql.fetch(txn.conn, _READY_IN_SESSIONS, params):
        txn.notify(task.namespace, task.connection, task.queue, "activity", task.task_id)


_SESSION_TASK = statement(
    """
    SELECT task_id, namespace, connection, queue, state, session_id, worker_session
    FROM activity_tasks WHERE task_id = CAST(:task_id AS uuid)
    """
)


async def explain_admission(
    conn: AsyncConnection,
    *,
    task_id: str,
    worker_id: str,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> SessionAdmission:
    """Whether `worker_id` would be admitted to the session of activity task `task_id`, and why.

    Applies the claim's rules (W3, W6) in the caller's transaction, which the caller rolls back:
    this answers an operator or a worker-plane refusal, it takes nothing.
    """
    task = await sql.first(conn, _SESSION_TASK, {"task_id": task_id})
    if task is None or task.session_id is None:
        return SessionAdmission.refused(SessionRefusal.NOT_A_SESSION_TASK)
    claimant = await lock_claimant(conn, worker_id)
    if task.state != "ready":
        return SessionAdmission.refused(SessionRefusal.TASK_NOT_READY)
    request = AdmissionRequest(
        namespace=task.namespace,
        options=SessionSpec.model_validate(task.worker_session),
        queue=task.queue,
        connection=task.connection,
    )
    return await admit(conn, claimant=claimant, request=request, owner_stale=owner_stale)
