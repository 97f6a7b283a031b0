"""The SQL that claims activity attempts.

Plain attempts are leased in one statement; session attempts once the claimer is admitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.protocol.shapes import SessionSpec
from burrow.store import errors, fragments, sessions, sql
from burrow.store.leasing import QueueFilter, claim_params, lease_of
from burrow.store.models import ClaimedActivityTask, WorkerSessionInfo
from burrow.store.sql import jsonb_object, statement

log = structlog.get_logger("burrow.store")

# The ActivityStarted event of the attempts a statement leases (the rows named `claimed`).
ACTIVITY_STARTED = jsonb_object(
    events.ActivityStarted,
    **fragments.attempt_columns("claimed"),
    lease_expires_at="claimed.lease_expires_at",
    started_at="claimed.started_at",
)
# Its idempotency key: one ActivityStarted per attempt, whoever leases it.
ACTIVITY_STARTED_KEY = (
    "'activity\\:' || claimed.activity_execution_id || '\\:started\\:' || claimed.attempt"
)
_STARTED = {
    "started_type": events.ActivityStarted.event_type,
    "started": ACTIVITY_STARTED,
    "started_key": ACTIVITY_STARTED_KEY,
}
_CLAIM_ACTIVITIES_SQL = """
    WITH picked AS (
        SELECT task_id FROM activity_tasks
        WHERE state = 'ready' AND namespace = :namespace AND queue = :queue AND {only}
          AND connection = :connection AND available_at <= now()
          AND activity_type = ANY(:types)
          AND (build_id IS NULL OR build_id = :build_id)
          -- A repair never re-runs an activity past its schedule-to-close deadline.
          AND (schedule_to_close_deadline IS NULL OR schedule_to_close_deadline > now())
        ORDER BY available_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE activity_tasks a
        SET state = 'leased', lease_owner = :worker_id, lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => :lease_seconds),
            started_at = now(), heartbeat_at = NULL, claimed_at = clock_timestamp()
        FROM picked WHERE a.task_id = picked.task_id
        RETURNING a.*
    ), started AS (
        INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key, wakes_workflow)
        SELECT run_id, '{started_type}', {started}, {started_key}, false
        FROM claimed
        ON CONFLICT (run_id, idempotency_key) DO NOTHING
    )
    SELECT c.*, {sessions_waiting} AS sessions_waiting
    FROM (SELECT 1) AS one
    LEFT JOIN (SELECT claimed.*, runs.workflow_id FROM claimed JOIN runs USING (run_id)) AS c
        ON true
"""
# Whether session attempts wait on the queue (W6): only then does a claim pay for admission.
# One row comes back even when nothing was claimed, to carry it.
_SESSIONS_WAITING = """EXISTS (
        SELECT 1 FROM activity_tasks w
        WHERE w.namespace = :namespace AND w.session_id IS NOT NULL AND w.state = 'ready'
          AND w.queue = :queue AND w.connection = :connection AND w.available_at <= now())"""
_CLAIM_ACTIVITY_TASKS = statement(
    _CLAIM_ACTIVITIES_SQL.format(
        only="session_id IS NULL", sessions_waiting=_SESSIONS_WAITING, **_STARTED
    )
)
# Eager dispatch: the worker that just scheduled these activities takes them in the same
# transaction, saving a claim round trip (filters and fencing are the same).
_CLAIM_ACTIVITY_TASKS_BY_ID = statement(
    _CLAIM_ACTIVITIES_SQL.format(
        only=f"session_id IS NULL AND task_id = ANY({fragments.TASK_IDS})",
        sessions_waiting=_SESSIONS_WAITING,
        **_STARTED,
    )
)
# Session activities the claim admitted (W6): the rows are already locked by this transaction.
_LEASE_ADMITTED = statement(
    _CLAIM_ACTIVITIES_SQL.format(
        only=f"task_id = ANY({fragments.TASK_IDS})", sessions_waiting="false", **_STARTED
    )
)

# W3: queue routing first (the same filters as any claim), then the session rules a claim can
# check without locking: the claimer's registered capabilities cover the requirements, and the
# session is not held live by another worker, at its activity limit, nor done for good. So a
# worker never locks (and hides from others) attempts it could not take. The decision itself,
# limits included, is made again under the session's row lock (store/sessions.py).
_PICK_SESSION_TASKS_SQL = """
    SELECT a.task_id, a.run_id, a.queue, a.connection, a.session_id, a.worker_session
    FROM activity_tasks a
    WHERE a.state = 'ready' AND a.namespace = :namespace AND a.queue = :queue AND {only}
      AND a.connection = :connection AND a.available_at <= now()
      AND a.activity_type = ANY(:types)
      AND (a.build_id IS NULL OR a.build_id = :build_id)
      AND (a.schedule_to_close_deadline IS NULL OR a.schedule_to_close_deadline > now())
      AND a.session_id IS NOT NULL
      AND coalesce(a.worker_session -> 'requirements', '[]'::jsonb) <@ coalesce(
          (SELECT to_jsonb(r.capabilities) FROM worker_registrations r
           WHERE r.worker_id = :worker_id AND r.state = 'active'), '[]'::jsonb)
      AND NOT EXISTS (
          SELECT 1 FROM worker_sessions s LEFT JOIN worker_registrations o
              ON o.worker_id = s.owner_worker_id
          WHERE s.namespace = a.namespace AND s.session_id = a.session_id
            AND ({done}
                 OR (s.state = 'active' AND s.owner_worker_id <> :worker_id
                     AND s.lease_expires_at > now() AND s.ttl_expires_at > now()
                     AND NOT {holder_gone})
                 -- Already running as many attempts as it may (rechecked under its lock).
                 OR (SELECT count(*) FROM activity_tasks l
                     WHERE l.namespace = s.namespace AND l.session_id = s.session_id
                       AND l.state = 'leased' AND l.lease_expires_at > now())
                    >= s.max_concurrent_activities))
    ORDER BY a.available_at
    LIMIT :limit
    FOR UPDATE OF a SKIP LOCKED
"""
_SESSION_RULES = {
    "done": fragments.session_done("s"),
    "holder_gone": fragments.session_holder_gone("o"),
}
_PICK_SESSION_TASKS = statement(_PICK_SESSION_TASKS_SQL.format(only="true", **_SESSION_RULES))
_PICK_SESSION_TASKS_BY_ID = statement(
    _PICK_SESSION_TASKS_SQL.format(only=f"a.task_id = ANY({fragments.TASK_IDS})", **_SESSION_RULES)
)


async def claim_activity_tasks(
    conn: AsyncConnection,
    *,
    flt: QueueFilter,
    worker_id: str,
    lease: timedelta,
    limit: int,
    task_ids: Sequence[str] | None = None,
    owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
) -> list[ClaimedActivityTask]:
    """Lease up to `limit` ready activity attempts (only `task_ids`, if given).

    Plain attempts are leased in one statement; session attempts (W6) only once the claimer is
    admitted to their session, which this creates, renews or reacquires for it. A refused attempt
    stays ready for another worker.
    """
    params = claim_params(flt, worker_id, lease, limit=limit)
    stmt = _CLAIM_ACTIVITY_TASKS
    if task_ids is not None:
        stmt, params["task_ids"] = _CLAIM_ACTIVITY_TASKS_BY_ID, list(task_ids)
    rows = await sql.fetch(conn, stmt, params)
    claimed = [_claimed_activity(row) for row in rows if row.task_id is not None]
    if len(claimed) < limit and rows[0].sessions_waiting:
        claimed += await _claim_session_tasks(
            conn,
            params={**params, "limit": limit - len(claimed)},
            by_id=task_ids is not None,
            owner_stale=owner_stale,
        )
    return claimed


async def _claim_session_tasks(
    conn: AsyncConnection, *, params: dict[str, object], by_id: bool, owner_stale: timedelta
) -> list[ClaimedActivityTask]:
    params = {**params, "owner_stale_seconds": owner_stale.total_seconds()}
    pick = _PICK_SESSION_TASKS_BY_ID if by_id else _PICK_SESSION_TASKS
    candidates = await sql.fetch(conn, pick, params)
    if not candidates:
        return []
    worker_id = str(params["worker_id"])
    claimant = await sessions.lock_claimant(conn, worker_id)
    admitted: dict[str, WorkerSessionInfo] = {}
    pending: dict[str, int] = {}
    # Sessions are locked in id order, so concurrent claims never wait on each other in a cycle.
    for row in sorted(candidates, key=lambda r: r.session_id):
        options = SessionSpec.model_validate(row.worker_session)
        request = sessions.AdmissionRequest(
            namespace=str(params["namespace"]),
            options=options,
            queue=row.queue,
            connection=row.connection,
            pending=pending.get(row.session_id, 0),
        )
        decision = await sessions.admit(
            conn, claimant=claimant, request=request, owner_stale=owner_stale
        )
        if not decision.admitted:
            log.info(
                "session_activity_refused",
                namespace=request.namespace,
                queue=row.queue,
                run_id=row.run_id,
                task_id=row.task_id,
                worker_id=worker_id,
                session_id=row.session_id,
                reason=None if decision.reason is None else decision.reason.value,
                missing_requirements=decision.missing_requirements or None,
            )
            continue
        if decision.session is None:
            raise errors.InvariantBroken(f"session {row.session_id!r} admitted without its row")
        admitted[row.task_id] = decision.session
        pending[row.session_id] = pending.get(row.session_id, 0) + 1
    if not admitted:
        return []
    lease_params = {**params, "task_ids": list(admitted), "limit": len(admitted)}
    rows = await sql.fetch(conn, _LEASE_ADMITTED, lease_params)
    return [
        _claimed_activity(row, admitted[row.task_id]) for row in rows if row.task_id is not None
    ]


def _claimed_activity(
    row: sql.AnyRow, session: WorkerSessionInfo | None = None
) -> ClaimedActivityTask:
    return ClaimedActivityTask(
        lease=lease_of(row),
        run_id=row.run_id,
        workflow_id=row.workflow_id,
        namespace=row.namespace,
        queue=row.queue,
        step_seq=row.step_seq,
        activity_type=row.activity_type,
        activity_execution_id=row.activity_execution_id,
        activity_attempt_id=row.activity_attempt_id,
        attempt_number=row.attempt,
        arguments=row.arguments,
        heartbeat_details=row.heartbeat_details,
        heartbeat_seconds=row.heartbeat_seconds,
        start_to_close_seconds=row.start_to_close_seconds,
        scheduled_at=row.scheduled_at,
        worker_session=session,
        schedule_to_close_deadline=row.schedule_to_close_deadline,
        connection=row.connection,
    )
