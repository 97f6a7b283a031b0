"""Activity history events, queued and local, and the history a local execution records (A3).

Re-exported by `burrow.protocol.events`, which holds the catalogue of every event type.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from burrow.codec import Payload
from burrow.protocol.commands import LocalAttempt, RecordLocalActivity
from burrow.protocol.event_base import Event, ExecutionMode
from burrow.protocol.shapes import (
    ActivitySpec,
    ExceptionInfo,
    Failure,
    JsonDict,
    LocalActivitySpec,
    Omitted,
    Timestamp,
    WireModel,
    activity_execution_id,
)

# -- activities -----------------------------------------------------------------------------------


class LocalPreparation(WireModel):
    """How a prepared local execution was admitted (protocol 1.20 prepared local activities).

    Alone it was admitted by its own `prepare`; as a member of a parallel group, by the group's
    atomic checkpoint, which names the group's first step, size and kind (a member's index is
    its step less the base). History shows the group on the events of every member (local or
    not) as the SDK built it.
    """

    parallel_group_base_sequence: int | None = Omitted
    parallel_group_size: int | None = Omitted
    parallel_group_kind: str | None = Omitted


class ActivityScheduled(Event):
    """A step scheduled an activity execution.

    A local execution the worker prepared before running it (rather than recorded after)
    carries `local_preparation`.
    """

    event_type: ClassVar[str] = "ActivityScheduled"
    activity_execution_id: str
    activity_type: str
    sequence: int
    execution_mode: ExecutionMode = "queued"
    local_activity: bool = False
    workflow_task_id: str
    activity: ActivitySpec | LocalActivitySpec
    local_preparation: LocalPreparation | None = Omitted


class AttemptSummary(WireModel):
    """How one local attempt went (`activity_attempt` of a local attempt's events)."""

    attempt_id: str
    attempt_number: int
    outcome: str
    duration_ms: int


class _Attempt(Event):
    """Fields every event about one attempt of an execution carries.

    A local attempt's events add the workflow task that ran it and its `activity_attempt`.
    """

    activity_execution_id: str
    activity_attempt_id: str
    activity_type: str
    sequence: int
    attempt_number: int
    workflow_task_id: str | None = Omitted
    activity_attempt: AttemptSummary | None = Omitted


class LocalCleanup(WireModel):
    """The cancellation cleanup a prepared local attempt runs in.

    The run's request, the delivery its workflow code took it at, and the cleanup deadline no
    attempt outlives.
    """

    request_id: str
    root_request_id: str
    delivery_history_event_id: str
    cleanup_deadline_at: Timestamp


class LocalAdmission(WireModel):
    """The workflow claim a prepared local attempt was admitted on, and its fixed deadlines.

    Every later call about the attempt must come from that claim (task, attempt and owner) and
    name the worker's attempt nonce; the deadlines never move (protocol 1.20).
    """

    workflow_task_attempt: int
    lease_owner: str
    worker_attempt_id: str
    start_to_close_deadline_at: Timestamp | None = None
    schedule_to_close_deadline_at: Timestamp | None = None
    cancellation_cleanup: LocalCleanup | None = Omitted


class ActivityStarted(_Attempt):
    """An attempt started (informational: replay does not wait on it).

    A queued attempt was leased until `lease_expires_at`; a local one ran under its workflow
    task's lease, so it has none and says `execution_mode=local`. A prepared local attempt
    (admitted before it ran) carries its `local_admission`.
    """

    event_type: ClassVar[str] = "ActivityStarted"
    lease_expires_at: Timestamp | None = Omitted
    started_at: Timestamp | None = Omitted
    """When a queued attempt started (leased), by the database's clock; older histories lack it."""
    execution_mode: ExecutionMode | None = Omitted
    local_activity: bool | None = Omitted
    local_admission: LocalAdmission | None = Omitted


class ActivityHeartbeatRecorded(_Attempt):
    """A local attempt reported progress (`progress`: its details) `elapsed_ms` after it began.

    Queued attempts keep only their latest details on the task row; a local attempt's
    heartbeats are recorded with its execution, at most MAX_LOCAL_HEARTBEATS per attempt.
    """

    event_type: ClassVar[str] = "ActivityHeartbeatRecorded"
    execution_mode: ExecutionMode = "local"
    local_activity: bool = True
    elapsed_ms: int
    progress: Payload | None = Omitted


class _Outcome(_Attempt):
    execution_mode: ExecutionMode = "queued"
    local_activity: bool = False


class ActivityCompleted(_Outcome):
    """The execution returned; `result` is the raw blob, `payload_codec` its codec."""

    event_type: ClassVar[str] = "ActivityCompleted"
    result: str
    payload_codec: str
    finished_at: Timestamp | None = Omitted
    """When a queued attempt returned, by its worker's clock (the database's when the worker
    names no time); older histories lack it. `recorded_at` is when history recorded it."""
    workflow_time: Timestamp | None = Omitted
    """S12: the time workflow code ran with on this result when the worker wrote the result
    together with the workflow task it woke (before the database stamped `recorded_at`); replay
    hands the code this time instead of `recorded_at` (HistoryEvent.workflow_time)."""


class LocalRecovery(WireModel):
    """A prepared local attempt closed by the claim that found it open after its own was lost.

    Whether its callback stopped is not known (`callback_stop_state` is always `unknown`).
    """

    workflow_task_id: str
    workflow_task_attempt: int
    lease_owner: str
    callback_stop_state: Literal["unknown"] = "unknown"


class _FailureFields(_Outcome):
    exception_type: str | None
    message: str | None
    non_retryable: bool = False
    failure_category: str = "application"
    timeout_kind: str | None = Omitted
    details: Payload | None = Omitted
    exception: ExceptionInfo | None = Omitted
    local_recovery: LocalRecovery | None = Omitted


class ActivityFailed(_FailureFields):
    """The execution failed for good (no attempts left, or non-retryable)."""

    event_type: ClassVar[str] = "ActivityFailed"


class ActivityTimedOut(_FailureFields):
    """The execution exceeded a timeout for good."""

    event_type: ClassVar[str] = "ActivityTimedOut"


class ActivityRetryScheduled(_FailureFields):
    """An attempt failed or timed out and another was scheduled after a backoff."""

    event_type: ClassVar[str] = "ActivityRetryScheduled"
    retry_available_at: Timestamp | None = Omitted  # a local retry ran in-process: no time
    retry_backoff_seconds: float
    retry_after_attempt: int
    retry_reason: Literal["failure", "timeout"]
    max_attempts: int


class ActivityCancelled(_Outcome):
    """The execution ended because its run asked it to cancel."""

    event_type: ClassVar[str] = "ActivityCancelled"
    cancelled_at: Timestamp
    message: str | None


ActivityClosed = ActivityCompleted | ActivityFailed | ActivityTimedOut | ActivityCancelled
"""The events that end an activity execution."""


NO_ATTEMPT_ID = ""
"""The attempt id of a local activity cancelled before any attempt ran."""


def local_activity_events(
    command: RecordLocalActivity,
    *,
    run_id: str,
    step: int,
    workflow_task_id: str,
    now: datetime,
) -> list[tuple[Event, str]]:
    """The activity history of a local execution, each event with its once-only key (A3, D3).

    ActivityScheduled, then per attempt ActivityStarted, its heartbeats and (before another
    attempt) ActivityRetryScheduled, then the terminal event: all `execution_mode=local`,
    `local_activity=true`. The store records them; replay resolves the step from the terminal.
    """
    execution_id = activity_execution_id(run_id, step)
    local: JsonDict = {"execution_mode": "local", "local_activity": True}
    scheduled = ActivityScheduled(
        activity_execution_id=execution_id,
        activity_type=command.activity_type,
        sequence=step,
        workflow_task_id=workflow_task_id,
        activity=command.options(),
        **local,
    )
    found: list[tuple[Event, str]] = [(scheduled, f"step:{step}:scheduled")]
    key = f"activity:{execution_id}"
    policy = command.retry_policy.to_json()
    for attempt in command.attempts:
        ids = _local_attempt(command, execution_id, step, workflow_task_id, attempt)
        found.append((ActivityStarted(**ids, **local), f"{key}:started:{attempt.attempt_number}"))
        for index, beat in enumerate(attempt.heartbeats):
            heartbeat = ActivityHeartbeatRecorded(
                **ids, elapsed_ms=beat.elapsed_ms, progress=beat.details
            )
            found.append((heartbeat, f"{key}:heartbeat:{attempt.attempt_number}:{index}"))
        if attempt.retry_reason is not None:
            retry = ActivityRetryScheduled(
                **ids,
                **local,
                **_attempt_failure(attempt),
                retry_backoff_seconds=attempt.backoff_seconds or 0.0,
                retry_after_attempt=attempt.attempt_number,
                retry_reason=attempt.retry_reason,
                max_attempts=int(policy.get("max_attempts") or 0),
            )
            found.append((retry, f"{key}:retry:{attempt.attempt_number}"))
    found.append(
        (local_terminal_event(command, run_id=run_id, step=step, now=now), f"{key}:closed")
    )
    return found


def local_terminal_event(
    command: RecordLocalActivity, *, run_id: str, step: int, now: datetime
) -> ActivityClosed:
    """The terminal event of a local execution: what resolves its step, live and on replay."""
    execution_id = activity_execution_id(run_id, step)
    last = command.attempts[-1] if command.attempts else None
    ids: JsonDict = {
        "activity_execution_id": execution_id,
        "activity_attempt_id": NO_ATTEMPT_ID if last is None else last.attempt_id,
        "activity_type": command.activity_type,
        "sequence": step,
        "attempt_number": 0 if last is None else last.attempt_number,
        "execution_mode": "local",
        "local_activity": True,
    }
    if command.outcome == "completed" and command.result is not None:
        return ActivityCompleted(
            **ids, result=command.result["blob"], payload_codec=command.result["codec"]
        )
    failure = command.failure()
    if command.outcome == "cancelled":
        return ActivityCancelled(**ids, cancelled_at=now, message=failure.message)
    model = ActivityTimedOut if command.outcome == "timed_out" else ActivityFailed
    return model(**ids, **failure_fields(failure))


def _local_attempt(
    command: RecordLocalActivity,
    execution_id: str,
    step: int,
    workflow_task_id: str,
    attempt: LocalAttempt,
) -> JsonDict:
    return {
        "activity_execution_id": execution_id,
        "activity_attempt_id": attempt.attempt_id,
        "activity_type": command.activity_type,
        "sequence": step,
        "attempt_number": attempt.attempt_number,
        "workflow_task_id": workflow_task_id,
        "activity_attempt": AttemptSummary(
            attempt_id=attempt.attempt_id,
            attempt_number=attempt.attempt_number,
            outcome=attempt.outcome,
            duration_ms=attempt.duration_ms,
        ),
    }


def _attempt_failure(attempt: LocalAttempt) -> JsonDict:
    return failure_fields(
        Failure(
            exception_type=attempt.exception_type,
            message=attempt.message,
            non_retryable=bool(attempt.non_retryable),
            timeout_kind=attempt.timeout_kind,
        )
    )


def failure_fields(failure: Failure) -> JsonDict:
    """A failure as activity events record it: details at the top, the stack in `exception`."""
    return {
        "exception_type": failure.exception_type,
        "message": failure.message,
        "non_retryable": failure.non_retryable,
        "failure_category": "timeout" if failure.timeout_kind else "application",
        "timeout_kind": failure.timeout_kind or None,
        "details": failure.details,
        "exception": ExceptionInfo(stack=failure.stack) if failure.stack else None,
    }
