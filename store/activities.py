"""Activity attempts: schedule, heartbeat, complete, fail, retry and time out."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events, shapes
from burrow.protocol.shapes import ExceptionInfo, Failure
from burrow.store import claims, fragments, history, payloads, runs, sessions, sql, standalone
from burrow.store.history import NewEvent
from burrow.store.models import (
    ActivityAttemptRow,
    Fence,
    FencedTask,
    HeartbeatResult,
    JsonDict,
    RunStatus,
    SessionRefusal,
    TaskState,
)
from burrow.store.sql import jsonb_object, statement
from burrow.store.transactions import Txn

# Issue 13 item 6: a policy that leaves a key out gets the durable-execution default, unlimited
# attempts with 1 s x 2.0 backoff capped at 100 s, so attempts lost to a killed worker (expired
# leases) never turn into a business failure; schedule_to_close_timeout is what bounds it.
DEFAULT_MAX_ATTEMPTS = shapes.UNLIMITED_ATTEMPTS
DEFAULT_INITIAL_BACKOFF_SECONDS = shapes.DEFAULT_INITIAL_INTERVAL_SECONDS
DEFAULT_BACKOFF_COEFFICIENT = shapes.DEFAULT_BACKOFF_COEFFICIENT
DEFAULT_MAX_BACKOFF_SECONDS = shapes.DEFAULT_MAXIMUM_INTERVAL_SECONDS
# Issue 25 item 1: the longest duration the store computes with, the authoring bound (100 years).
# Rows written before that bound may hold more (1e14 s overflows an interval, 1e12 s a datetime);
# they are clamped here so a date is always computable, and the repair pass never fails on them.
MAX_DURATION_SECONDS = float(shapes.MAX_DURATION_SECONDS)


def clamp_seconds(seconds: float) -> float:
    """`seconds` within [0, MAX_DURATION_SECONDS]; NaN counts as the longest (never due soon)."""
    if seconds != seconds:  # NaN
        return MAX_DURATION_SECONDS
    return min(max(seconds, 0.0), MAX_DURATION_SECONDS)


def attempt_row(row: sql.AnyRow) -> ActivityAttemptRow:
    """The typed attempt from an `activity_tasks` row selected with `now()` AS now."""
    return ActivityAttemptRow(
        task_id=row.task_id,
        run_id=row.run_id,
        namespace=row.namespace,
        connection=row.connection,
        queue=row.queue,
        state=TaskState(row.state),
        step_seq=row.step_seq,
        activity_type=row.activity_type,
        activity_execution_id=row.activity_execution_id,
        activity_attempt_id=row.activity_attempt_id,
        attempt=row.attempt,
        retry_policy=row.retry_policy,
        cancel_requested=row.cancel_requested,
        available_at=row.available_at,
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        lease_expires_at=row.lease_expires_at,
        schedule_to_start_seconds=row.schedule_to_start_seconds,
        start_to_close_seconds=row.start_to_close_seconds,
        heartbeat_seconds=row.heartbeat_seconds,
        schedule_to_close_deadline=row.schedule_to_close_deadline,
        now=row.now,
        session_id=getattr(row, "session_id", None),
    )


def _attempt(row: ActivityAttemptRow) -> JsonDict:
    """The fields every event about this attempt carries."""
    return {field: getattr(row, column) for field, column in fragments.ATTEMPT_COLUMNS.items()}


def backoff_seconds(policy: JsonDict, attempt: int) -> float:
    """Backoff before the attempt after `attempt`, from the DW retry policy shape."""
    explicit = policy.get("backoff_seconds") or []
    if explicit:
        return clamp_seconds(float(explicit[min(attempt - 1, len(explicit) - 1)]))
    initial = float(policy.get("initial_interval_seconds", DEFAULT_INITIAL_BACKOFF_SECONDS))
    coefficient = float(policy.get("backoff_coefficient", DEFAULT_BACKOFF_COEFFICIENT))
    ceiling = float(policy.get("maximum_interval_seconds", DEFAULT_MAX_BACKOFF_SECONDS))
    try:
        grown = initial * coefficient ** (attempt - 1)
    except OverflowError:  # unlimited attempts reach 2.0 ** 1024 after about a day at the cap
        return clamp_seconds(ceiling)
    return clamp_seconds(min(grown, ceiling))


def max_attempts(policy: JsonDict) -> int:
    """The policy's attempt limit; `shapes.UNLIMITED_ATTEMPTS` (0) when it sets none."""
    return int(policy.get("max_attempts") or DEFAULT_MAX_ATTEMPTS)


def should_retry(row: ActivityAttemptRow, failure: JsonDict) -> float | None:
    """The backoff for another attempt, or None when this failure is final."""
    policy = row.retry_policy or {}
    limit = max_attempts(policy)
    if failure.get("non_retryable") or row.cancel_requested:
        return None
    if failure.get("exception_type") in (policy.get("non_retryable_error_types") or []):
        return None
    if limit != shapes.UNLIMITED_ATTEMPTS and row.attempt >= limit:
        return None
    backoff = backoff_seconds(policy, row.attempt)
    deadline = row.schedule_to_close_deadline
    if deadline is not None and row.now + timedelta(seconds=backoff) >= deadline:
        return None
    return backoff


CANCELLED_TYPES = frozenset({"CancelledError", "ActivityCancelled"})
"""Failure types an attempt reports when it stopped because it was asked to: Burrow's worker
(asyncio cancellation) and the SDK's (`ActivityCancelled`, PROTOCOL.md 6.2)."""

_FINISH_ATTEMPT = statement(
    f"UPDATE activity_tasks SET state = :state, {fragments.token_kept_when(':by_holder')}"
    " WHERE task_id = :task_id"
)

# The fenced attempt, locked after its run (the order completions lock in), or (no attempt)
# the `fence_columns` saying why the fence refused.
_SELECT_LEASED = statement(
    f"""
    WITH {fragments.fence_probe("activity_tasks")}, locked AS (
        SELECT run_id FROM runs WHERE run_id = (SELECT run_id FROM probe) FOR NO KEY UPDATE
    )
    SELECT leased.*, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN (
        SELECT *, now() AS now FROM activity_tasks
        WHERE {fragments.LEASE_FENCE}{fragments.ATTEMPT_ID_FENCE}
          AND run_id IN (SELECT run_id FROM locked)
        FOR UPDATE
    ) AS leased ON true
    """
)

# A new attempt of the same execution, with an attempt id of its own.
_RETRY_ATTEMPT = statement(
    f"""
    UPDATE activity_tasks
    SET {fragments.return_to_ready(":available_at", by_holder=":by_holder")},
        activity_attempt_id = :activity_attempt_id, started_at = NULL
    WHERE task_id = :task_id
    """,
    json_params=["last_failure"],
)

_HEARTBEAT = statement(
    f"""
    WITH {fragments.fence_probe("activity_tasks")}, beat AS (
        UPDATE activity_tasks
        SET heartbeat_at = now(), lease_expires_at = now() + CAST(:lease_duration AS interval),
            heartbeat_details = COALESCE(:details, heartbeat_details)
        WHERE {fragments.LEASE_FENCE}{fragments.ATTEMPT_ID_FENCE}
        RETURNING cancel_requested, lease_expires_at, heartbeat_at, namespace, session_id
    )
    SELECT beat.*, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN beat ON true
    """,
    json_params=["details"],
)


async def _finish(
    txn: Txn[AsyncConnection],
    *,
    row: ActivityAttemptRow,
    event: NewEvent,
    state: TaskState,
    by_holder: bool,
) -> None:
    """Close the execution and hand its outcome to the workflow's next task."""
    conn = txn.conn
    params = {"state": state.value, "task_id": row.task_id, "by_holder": by_holder}
    await sql.execute(conn, _FINISH_ATTEMPT, params)
    run = await runs.lock_run(conn, run_id=row.run_id)
    if run.status == RunStatus.RUNNING:
        await runs.record_external_event(txn, run=run, event=event)
        if run.workflow_type == standalone.HOST_WORKFLOW_TYPE:
            await standalone.settle(txn, run_id=run.run_id)


async def _select_leased(
    conn: AsyncConnection, lease: Fence
) -> tuple[ActivityAttemptRow, FencedTask]:
    row = await sql.one(conn, _SELECT_LEASED, fragments.fence_params(lease, "activity"))
    if row.task_id is None:
        raise fragments.refused(row, lease, "activity")
    return attempt_row(row), fragments.fenced_task(row, lease)


# The ActivityCompleted of the attempt in CTE `done` (its activity_tasks row), with the result
# bound as `:blob` and `:codec`, and the time it finished as `:finished_at` (the worker's; the
# database's clock when it names none).
_COMPLETED_FIELDS = {
    **fragments.attempt_columns("done"),
    "execution_mode": "'queued'",
    "local_activity": "false",
    "result": "CAST(:blob AS text)",
    "payload_codec": "CAST(:codec AS text)",
    "finished_at": "coalesce(CAST(:finished_at AS timestamptz), clock_timestamp())",
}
ACTIVITY_COMPLETED = jsonb_object(events.ActivityCompleted, **_COMPLETED_FIELDS)
# Written with the workflow task it woke: also the time that task's code ran with (S12).
ACTIVITY_COMPLETED_WITH_TASK = jsonb_object(
    events.ActivityCompleted,
    **_COMPLETED_FIELDS,
    workflow_time="CAST(:workflow_time AS timestamptz)",
)
# Its idempotency key: an execution closes once.
ACTIVITY_CLOSED_KEY = "'activity\\:' || done.activity_execution_id || '\\:closed'"

# The run is the fenced attempt's (its row read by `probe`: callers may not know it).
# Fenced completion, the ActivityCompleted inbox event and the follow-up workflow task in one
# statement; the run lock (taken before the inbox insert needs it) serialises it with workflow
# task completion, so an event is never left without a task to observe it. With `:eager`, a
# follow-up task the completing worker's claim would take (same filters and sticky rules, S5)
# is created leased to it, and the run opened as that claim opens it (claims.open_runs_sql):
# eager dispatch in the same statement.
_COMPLETE_ACTIVITY = statement(
    """
    WITH {probe}, locked AS (  -- the row as it is once locked: later CTEs read it, not `runs`
        SELECT * FROM runs WHERE run_id = (SELECT run_id FROM probe) FOR NO KEY UPDATE
    ), done AS (
        UPDATE activity_tasks SET state = 'completed', {recorded_keeps_token}
        WHERE {lease_fence}{attempt_id_fence}
        RETURNING run_id, step_seq, activity_type, activity_execution_id, activity_attempt_id,
                  attempt, namespace AS activity_namespace, session_id
    ), leasable AS (
        SELECT locked.* FROM locked JOIN done USING (run_id)
        WHERE :eager AND locked.status = 'running'
          AND locked.namespace = :namespace AND locked.task_queue = :queue
          AND locked.connection = :connection AND locked.workflow_type = ANY(:types)
          AND (locked.build_id IS NULL OR locked.build_id = :build_id)
          AND (NOT :sticky_enabled OR locked.sticky_worker_id IS NULL
               OR locked.sticky_until <= now() OR locked.sticky_worker_id = :worker_id
               OR {owner_gone})
          AND NOT EXISTS (SELECT 1 FROM workflow_tasks w
                          WHERE w.run_id = (SELECT run_id FROM probe)
                            AND w.state IN ('ready', 'leased'))
    ), claimed AS (
        {insert_leased_task}
        {one_open_task}
        RETURNING {claimed_columns}
    ), queued AS (
        INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key, wakes_workflow,
                                  applied)
        SELECT done.run_id, '{completed_type}', {completed},
               {closed_key}, true,
               EXISTS (SELECT 1 FROM claimed)  -- moved into the history below
        FROM done JOIN locked USING (run_id)
        WHERE locked.status = 'running'
        ON CONFLICT (run_id, idempotency_key) DO NOTHING
        RETURNING run_id, id, event_type, payload, idempotency_key
    ), task AS (
        {insert_task}
        WHERE NOT EXISTS (SELECT 1 FROM claimed)
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    ), {flagged}, announced AS (
        SELECT task_id, namespace, connection, queue, sticky_owner FROM task
        UNION ALL
        -- A workflow task already waiting: claims skipped it while this statement held the
        -- run, so it is announced again (and may be leased eagerly) once this commits.
        SELECT w.task_id, w.namespace, w.connection, w.queue, {w_sticky_owner}
        FROM workflow_tasks w
        WHERE w.run_id = (SELECT run_id FROM probe) AND w.state = 'ready'
          AND EXISTS (SELECT 1 FROM queued) AND NOT EXISTS (SELECT 1 FROM task)
          AND NOT EXISTS (SELECT 1 FROM claimed)
    ), {open_runs}
    SELECT (SELECT count(*) FROM done) AS completed,
           (SELECT session_id FROM done) AS session_id,
           (SELECT activity_namespace FROM done) AS activity_namespace,
           (SELECT workflow_type FROM locked) = '{host_type}' AS standalone_host,
           announced.task_id AS ready_task_id, announced.namespace AS ready_namespace,
           announced.connection AS ready_connection, announced.queue AS ready_queue,
           announced.sticky_owner AS ready_sticky_owner,
           opened.*, {fence_columns}
    FROM (SELECT 1) AS one LEFT JOIN announced ON true LEFT JOIN opened ON true
         LEFT JOIN probe ON true
    """.format(
        probe=fragments.fence_probe("activity_tasks"),
        fence_columns=fragments.fence_columns(),
        lease_fence=fragments.LEASE_FENCE,
        attempt_id_fence=fragments.ATTEMPT_ID_FENCE,
        recorded_keeps_token=fragments.RECORDED_KEEPS_TOKEN,
        owner_gone=fragments.owner_gone("locked.sticky_worker_id"),
        insert_leased_task=fragments.insert_leased_workflow_task(
            "CAST(:new_task_id AS uuid)", "leasable"
        ),
        claimed_columns=claims.CLAIMED_COLUMNS,
        insert_task=fragments.insert_workflow_task(
            ":new_task_id", "locked JOIN queued USING (run_id)"
        ),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
        w_sticky_owner=fragments.sticky_owner("w"),
        flagged=fragments.flag_leased_task(
            "(SELECT run_id FROM probe)", "EXISTS (SELECT 1 FROM queued)"
        ),
        open_runs=claims.open_runs_sql(
            "SELECT * FROM pending UNION ALL SELECT * FROM queued", runs="locked"
        ),
        completed_type=events.ActivityCompleted.event_type,
        completed=ACTIVITY_COMPLETED,
        closed_key=ACTIVITY_CLOSED_KEY,
        host_type=standalone.HOST_WORKFLOW_TYPE,
    )
)


@dataclass(slots=True)  # not frozen: ready.WorkflowTaskRow's members are plain attributes
class _ReadyTask:
    """A ready workflow task to announce (ready.WorkflowTaskRow)."""

    task_id: str
    namespace: str
    connection: str
    queue: str
    sticky_owner: str | None


@dataclass(frozen=True, slots=True)
class ActivityCompletion:
    """What an activity completion's statement did, and what is left to do after it commits."""

    task: FencedTask
    """The completed attempt's task."""
    leased: claims.LeasedRun | None = None
    """The follow-up workflow task, leased to the completer (eager dispatch)."""
    waiting: _ReadyTask | None = None
    """A follow-up task that was waiting already: the completer's claim may still take it."""
    session: tuple[str, str] | None = None
    """(namespace, session id) of a session attempt: its session's ready attempts are
    announced again (`sessions.announce_ready`)."""
    standalone_host: bool = False
    """The run is a standalone activity's host: it is settled next (`standalone.settle`)."""


async def complete_activity(
    txn: Txn[sql.Conn],
    *,
    lease: Fence,
    result: JsonDict,
    eager: claims.EagerClaim | None = None,
    finished_at: datetime | None = None,
) -> ActivityCompletion:
    """Record the attempt's result once, in ONE statement; a stale lease changes nothing.

    With `eager`, the workflow task it makes ready is created leased to the same worker.
    `finished_at` is when the attempt returned, as its worker saw it (D3).
    """
    row = await sql.one(
        txn.conn,
        _COMPLETE_ACTIVITY,
        {
            **fragments.fence_params(lease, "activity"),
            **_eager_params(eager),
            "blob": result["blob"],
            "codec": result["codec"],
            "finished_at": finished_at,
            "new_task_id": str(uuid.uuid4()),
        },
    )
    if not row.completed:
        raise fragments.refused(row, lease, "activity")
    session = None if row.session_id is None else (row.activity_namespace, row.session_id)
    task = fragments.fenced_task(row, lease)
    if row.standalone_host:  # no workflow task follows (nothing claims a host's)
        return ActivityCompletion(task, session=session, standalone_host=True)
    if row.lease_token is not None:
        return ActivityCompletion(task, leased=claims.LeasedRun(row), session=session)
    if row.ready_task_id is None:
        return ActivityCompletion(task, session=session)
    ready_task = _ReadyTask(
        task_id=row.ready_task_id,
        namespace=row.ready_namespace,
        connection=row.ready_connection,
        queue=row.ready_queue,
        sticky_owner=row.ready_sticky_owner,
    )
    flt = None if eager is None else eager.flt
    here = (ready_task.queue, ready_task.namespace, ready_task.connection)
    if flt is not None and here == (flt.queue, flt.namespace, flt.connection):
        return ActivityCompletion(task, waiting=ready_task, session=session)
    txn.notify_workflow_task(ready_task)
    return ActivityCompletion(task, session=session)


def _eager_params(eager: claims.EagerClaim | None) -> dict[str, object]:
    if eager is None:
        return {
            "eager": False,
            "namespace": None,
            "queue": None,
            "connection": None,
            "types": [],
            "build_id": None,
            "worker_id": None,
            "lease_seconds": 0.0,
            "sticky_enabled": False,
            "owner_stale_seconds": 0.0,
            "tail_when_bound": False,
            "history_page": history.HISTORY_PAGE_EVENTS,
        }
    return {
        **claims.workflow_claim_params(eager.flt, eager.worker_id, eager.lease, 1, eager.sticky),
        "eager": True,
    }


async def claim_waiting(
    txn: Txn[sql.Conn], task: _ReadyTask, eager: claims.EagerClaim
) -> claims.LeasedRun | None:
    """Lease a follow-up task that was already waiting to the completer, else announce it."""
    claimed = await claims.claim_workflow_task(
        txn.conn,
        flt=eager.flt,
        worker_id=eager.worker_id,
        lease=eager.lease,
        task_id=task.task_id,
        sticky=eager.sticky,
    )
    if claimed is None:
        txn.notify_workflow_task(task)
    return claimed


async def fail_activity(
    txn: Txn[AsyncConnection], *, lease: Fence, failure: Failure
) -> tuple[bool, FencedTask]:
    """Record a failed attempt: retry with backoff, or fail the execution; True if retried."""
    row, task = await _select_leased(txn.conn, lease)
    record = payloads.failure_record(failure)
    return await fail_attempt(txn, row=row, failure=record, by_holder=True), task


async def fail_attempt(
    txn: Txn[AsyncConnection], *, row: ActivityAttemptRow, failure: JsonDict, by_holder: bool
) -> bool:
    """Apply the retry policy to a failed or timed-out attempt (caller holds run and row).

    `by_holder`: the lease's holder reports it, and its token stays on the row
    (fragments.RECORDED_KEEPS_TOKEN); a repair's timeout clears it.
    """
    retried = await _fail_attempt(txn, row=row, failure=failure, by_holder=by_holder)
    if row.session_id is not None:
        await sessions.announce_ready(txn, namespace=row.namespace, session_id=row.session_id)
    return retried


async def _fail_attempt(
    txn: Txn[AsyncConnection], *, row: ActivityAttemptRow, failure: JsonDict, by_holder: bool
) -> bool:
    conn = txn.conn
    now = row.now
    backoff = should_retry(row, failure)
    attempt = _attempt(row)
    recorded = Failure.of(failure)
    closed_key = f"activity:{row.activity_execution_id}:closed"
    if backoff is None:
        if row.cancel_requested and recorded.exception_type in CANCELLED_TYPES:
            cancelled = events.ActivityCancelled(
                **attempt, cancelled_at=now, message=recorded.message
            )
            await _finish(
                txn,
                row=row,
                event=NewEvent(cancelled, closed_key),
                state=TaskState.CANCELLED,
                by_holder=by_holder,
            )
            return False
        timed_out = bool(recorded.timeout_kind)
        model = events.ActivityTimedOut if timed_out else events.ActivityFailed
        closed = model(**attempt, **_failure_fields(recorded))
        state = TaskState.TIMED_OUT if timed_out else TaskState.FAILED
        await _finish(
            txn, row=row, event=NewEvent(closed, closed_key), state=state, by_holder=by_holder
        )
        return False
    retry_at = now + timedelta(seconds=backoff)
    await sql.execute(
        conn,
        _RETRY_ATTEMPT,
        {
            "task_id": row.task_id,
            "activity_attempt_id": str(uuid.uuid4()),
            "available_at": retry_at,
            "last_failure": failure,
            "by_holder": by_holder,
        },
    )
    txn.notify(row.namespace, row.connection, row.queue, "activity", row.task_id, retry_at)
    retry = events.ActivityRetryScheduled(
        **attempt,
        **_failure_fields(recorded),
        retry_available_at=retry_at,
        retry_backoff_seconds=backoff,
        retry_after_attempt=row.attempt,
        retry_reason="timeout" if recorded.timeout_kind else "failure",
        max_attempts=max_attempts(row.retry_policy or {}),
    )
    event = NewEvent(retry, f"activity:{row.activity_execution_id}:retry:{row.attempt}")
    run = await runs.lock_run(conn, run_id=row.run_id)
    await runs.record_external_event(txn, run=run, event=event, wakes_workflow=False)
    return True


def _failure_fields(failure: Failure) -> JsonDict:
    """A failure as activity events record it: details at the top, the stack in `exception`."""
    return {
        "exception_type": failure.exception_type,
        "message": failure.message,
        "non_retryable": failure.non_retryable,
        "failure_category": failure.failure_category or "application",
        "timeout_kind": failure.timeout_kind or None,
        "details": failure.details,
        "exception": ExceptionInfo(stack=failure.stack) if failure.stack else None,
    }


async def heartbeat_activity(
    conn: AsyncConnection,
    *,
    lease: Fence,
    details: JsonDict | None,
    lease_duration: timedelta,
    owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
) -> HeartbeatResult:
    """Record heartbeat details (kept when None) and renew the lease; reports cancellation.

    The heartbeat of a session attempt renews the session's lease too (W1). When another worker
    now holds the session, the answer says the attempt may not continue; a session closed or
    ended otherwise leaves the attempt to its own lease (W7). Cancellation is reported either
    way (W8): a session never hides it.
    """
    params = {
        **fragments.fence_params(lease, "activity"),
        "details": details,
        "lease_duration": lease_duration,
    }
    row = await sql.one(conn, _HEARTBEAT, params)
    if row.lease_expires_at is None:
        raise fragments.refused(row, lease, "activity")
    task = fragments.fenced_task(row, lease)
    if row.session_id is None:
        return HeartbeatResult(
            cancel_requested=row.cancel_requested,
            lease_expires_at=row.lease_expires_at,
            last_heartbeat_at=row.heartbeat_at,
            task=task,
        )
    renewal = await sessions.heartbeat_session(
        conn,
        worker_id=lease.lease_owner,
        namespace=row.namespace,
        session_id=row.session_id,
        owner_stale=owner_stale,
        reacquire=True,
    )
    return HeartbeatResult(
        cancel_requested=row.cancel_requested,
        lease_expires_at=row.lease_expires_at,
        last_heartbeat_at=row.heartbeat_at,
        can_continue=renewal.reason != SessionRefusal.SESSION_OWNER_MISMATCH,
        reason=None if renewal.reason is None else renewal.reason.value,
        worker_session=renewal.session,
        task=task,
    )
