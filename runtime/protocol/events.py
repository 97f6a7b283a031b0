"""History events: one frozen model per Durable Workflow event type Burrow records (PROTOCOL.md 8).

Replay consumes these and the store produces them; neither builds nor reads the other's JSON by
hand. `to_json()` is the event's `payload` exactly as stored in `history_events.payload` (JSONB),
and `parse(event_type, payload)` turns a stored payload back into its model. `HistoryEvent` is
the record around one event (its run, sequence, time and workflow task).

Burrow adds one event the catalogue lacks: `SignalSkipped`, a signal no handler could take.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import ValidationError

from burrow.codec import Payload
from burrow.errors import PayloadError
from burrow.protocol.commands import LocalAttempt, RecordLocalActivity
from burrow.protocol.shapes import (
    RECORDED,
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

ExecutionMode = Literal["queued", "local"]


class Event(WireModel):
    """Base of every history event model; `event_type` is the catalogue name."""

    event_type: ClassVar[str]


# -- run lifecycle --------------------------------------------------------------------------------


class WorkflowStarted(Event):
    """Event 1 of every run."""

    event_type: ClassVar[str] = "WorkflowStarted"
    workflow_type: str
    workflow_instance_id: str
    workflow_run_id: str
    continued_from_run_id: str | None = None


class WorkflowCompleted(Event):
    """The run returned; `output` is the raw blob, `payload_codec` its codec."""

    event_type: ClassVar[str] = "WorkflowCompleted"
    output: str
    payload_codec: str


class WorkflowFailed(Event):
    """The run raised an application error."""

    event_type: ClassVar[str] = "WorkflowFailed"
    exception_type: str | None
    message: str | None
    non_retryable: bool = False
    failure_category: str = "application"
    exception: ExceptionInfo = ExceptionInfo()


class _OfRun(Event):
    """An event that names its run: the workflow id and the run id."""

    workflow_instance_id: str
    workflow_run_id: str


class WorkflowCancelled(_OfRun):
    """The run let a requested cancellation through."""

    event_type: ClassVar[str] = "WorkflowCancelled"
    closed_reason: str = "cancelled"
    message: str


class WorkflowTerminated(_OfRun):
    """An operator closed the run without running workflow code."""

    event_type: ClassVar[str] = "WorkflowTerminated"
    closed_reason: str = "terminated"
    reason: str


class WorkflowContinuedAsNew(Event):
    """The run closed and a new run of the same workflow id took over."""

    event_type: ClassVar[str] = "WorkflowContinuedAsNew"
    continued_to_run_id: str
    closed_reason: str = "continued"


class CancelRequested(_OfRun):
    """Cancellation was requested; workflow code sees it at its next await."""

    event_type: ClassVar[str] = "CancelRequested"
    command_type: str = "cancel"
    reason: str


# -- activities -----------------------------------------------------------------------------------


class ActivityScheduled(Event):
    """A step scheduled an activity execution."""

    event_type: ClassVar[str] = "ActivityScheduled"
    activity_execution_id: str
    activity_type: str
    sequence: int
    execution_mode: ExecutionMode = "queued"
    local_activity: bool = False
    workflow_task_id: str
    activity: ActivitySpec | LocalActivitySpec


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


class ActivityStarted(_Attempt):
    """An attempt started (informational: replay does not wait on it).

    A queued attempt was leased until `lease_expires_at`; a local one ran under its workflow
    task's lease, so it has none and says `execution_mode=local`.
    """

    event_type: ClassVar[str] = "ActivityStarted"
    lease_expires_at: Timestamp | None = Omitted
    execution_mode: ExecutionMode | None = Omitted
    local_activity: bool | None = Omitted


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


class _FailureFields(_Outcome):
    exception_type: str | None
    message: str | None
    non_retryable: bool = False
    failure_category: str = "application"
    timeout_kind: str | None = Omitted
    details: Payload | None = Omitted
    exception: ExceptionInfo | None = Omitted


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


# -- timers, side effects, versions ---------------------------------------------------------------


class _Timer(Event):
    timer_id: str
    sequence: int
    delay_seconds: float


class TimerScheduled(_Timer):
    """A step started a durable timer."""

    event_type: ClassVar[str] = "TimerScheduled"
    fire_at: Timestamp


class TimerFired(_Timer):
    """A durable timer came due."""

    event_type: ClassVar[str] = "TimerFired"
    fired_at: Timestamp


class TimerCancelled(_Timer):
    """Workflow code cancelled a timer before it fired."""

    event_type: ClassVar[str] = "TimerCancelled"
    cancelled_at: Timestamp


class SideEffectRecorded(Event):
    """A non-deterministic value recorded once (D1); `result` is the raw blob."""

    event_type: ClassVar[str] = "SideEffectRecorded"
    sequence: int
    result: str
    payload_codec: str


class VersionMarkerRecorded(Event):
    """Which branch of a changed workflow this run takes."""

    event_type: ClassVar[str] = "VersionMarkerRecorded"
    sequence: int
    change_id: str
    version: int
    min_supported: int
    max_supported: int


# -- signals and updates --------------------------------------------------------------------------


class SignalReceived(Event):
    """A signal was delivered (once per signal id)."""

    event_type: ClassVar[str] = "SignalReceived"
    signal_id: str
    signal_name: str
    workflow_instance_id: str
    workflow_run_id: str
    arguments: Payload


class SignalSkipped(Event):
    """A recorded signal workflow code never saw: no handler, or arguments that do not fit.

    A Burrow event (the catalogue ignores unknown signals silently): it keeps the decision in
    history, so replay skips the same signal again, and it is what `describe()` counts.
    """

    event_type: ClassVar[str] = "SignalSkipped"
    signal_id: str
    signal_name: str
    reason: str


class UpdateAccepted(Event):
    """An update was accepted (once per update id) and waits for its handler."""

    event_type: ClassVar[str] = "UpdateAccepted"
    update_id: str
    update_name: str
    workflow_instance_id: str
    workflow_run_id: str
    arguments: Payload


class UpdateApplied(Event):
    """An update handler ran at this point of history (recorded for SDK-run workflows).

    SDK workers run an accepted update in a task of its own and replay the handler here later
    (PROTOCOL.md 8.2); Burrow's own replay runs handlers at `UpdateAccepted` and ignores this.
    """

    event_type: ClassVar[str] = "UpdateApplied"
    update_id: str
    update_name: str
    workflow_instance_id: str
    workflow_run_id: str
    arguments: Payload


class UpdateCompleted(Event):
    """An update handler returned (`result`, `payload_codec`) or failed (message, type)."""

    event_type: ClassVar[str] = "UpdateCompleted"
    update_id: str
    workflow_run_id: str
    result: str | None = Omitted
    payload_codec: str | None = Omitted
    message: str | None = Omitted
    exception_type: str | None = Omitted
    non_retryable: bool | None = Omitted
    exception: ExceptionInfo | None = Omitted


EVENT_TYPES: dict[str, type[Event]] = {
    cls.event_type: cls
    for cls in (
        WorkflowStarted,
        WorkflowCompleted,
        WorkflowFailed,
        WorkflowCancelled,
        WorkflowTerminated,
        WorkflowContinuedAsNew,
        CancelRequested,
        ActivityScheduled,
        ActivityStarted,
        ActivityHeartbeatRecorded,
        ActivityCompleted,
        ActivityFailed,
        ActivityTimedOut,
        ActivityRetryScheduled,
        ActivityCancelled,
        TimerScheduled,
        TimerFired,
        TimerCancelled,
        SideEffectRecorded,
        VersionMarkerRecorded,
        SignalReceived,
        SignalSkipped,
        UpdateAccepted,
        UpdateApplied,
        UpdateCompleted,
    )
}
"""Every event type Burrow records, by catalogue name."""

STEP_EVENTS = (ActivityScheduled, TimerScheduled, SideEffectRecorded, VersionMarkerRecorded)
"""Events that record a workflow step (payload `sequence` is the step number, PROTOCOL.md 8.3)."""

TERMINAL_EVENTS = (
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    WorkflowContinuedAsNew,
    WorkflowTerminated,
)
"""Events that close a run."""

ActivityClosed = ActivityCompleted | ActivityFailed | ActivityTimedOut | ActivityCancelled
StepEvent = ActivityScheduled | TimerScheduled | SideEffectRecorded | VersionMarkerRecorded


def is_local(event: Event) -> bool:
    """Whether the event belongs to a local activity (recorded by its workflow task, A3)."""
    return bool(getattr(event, "local_activity", False))


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
    return model(**ids, **_failure_fields(failure))


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
    return _failure_fields(
        Failure(
            exception_type=attempt.exception_type,
            message=attempt.message,
            non_retryable=bool(attempt.non_retryable),
            timeout_kind=attempt.timeout_kind,
        )
    )


def _failure_fields(failure: Failure) -> JsonDict:
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


class HistoryError(PayloadError):
    """A stored history event that is not a known, well-formed catalogue event."""


def parse(event_type: str, payload: JsonDict) -> Event:
    """The model of one stored event; HistoryError for an unknown type or malformed payload."""
    model = EVENT_TYPES.get(event_type)
    if model is None:
        raise HistoryError(f"unknown history event type {event_type!r}", event_type=event_type)
    try:
        # What history recorded was valid when it was written: newer option checks do not apply.
        return model.model_validate(payload, context=RECORDED)
    except ValidationError as exc:
        raise HistoryError(
            f"malformed {event_type} payload: {exc.errors(include_url=False)}",
            event_type=event_type,
        ) from exc


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One recorded event: its run, its place in the run's history, when, and which task."""

    run_id: str
    sequence: int
    event: Event
    recorded_at: datetime
    workflow_task_id: str | None = None

    @classmethod
    def from_record(
        cls,
        *,
        run_id: str,
        sequence: int,
        event_type: str,
        payload: JsonDict,
        recorded_at: datetime,
        workflow_task_id: str | None = None,
    ) -> HistoryEvent:
        """Build the record from stored columns, parsing the payload into its model."""
        return cls(
            run_id=run_id,
            sequence=sequence,
            event=parse(event_type, payload),
            recorded_at=recorded_at,
            workflow_task_id=workflow_task_id,
        )

    @property
    def event_type(self) -> str:
        """The catalogue name of the event."""
        return self.event.event_type

    @property
    def payload(self) -> JsonDict:
        """The event's payload JSON, as stored."""
        return self.event.to_json()

    def to_json(self) -> JsonDict:
        """The worker-facing record shape (PROTOCOL.md 8.1)."""
        return {
            "sequence": self.sequence,
            "event_type": self.event_type,
            "payload": self.payload,
            "workflow_task_id": self.workflow_task_id,
            "recorded_at": self.recorded_at.isoformat(),
        }
