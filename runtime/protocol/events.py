"""History events: one frozen model per Durable Workflow event type Burrow records (PROTOCOL.md 8).

Replay consumes these and the store produces them; neither builds nor reads the other's JSON by
hand. `to_json()` is the event's `payload` exactly as stored in `history_events.payload` (JSONB),
and `parse(event_type, payload)` turns a stored payload back into its model. `HistoryEvent` is
the record around one event (its run, sequence, time and workflow task).

Burrow adds one event the catalogue lacks: `SignalSkipped`, a signal no handler could take.
Activity events live in `burrow.protocol.activity_events` and the control plane's command events
in `burrow.protocol.control_events`; both are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from pydantic import ValidationError

from burrow.codec import Payload
from burrow.errors import PayloadError
from burrow.protocol.activity_events import (
    NO_ATTEMPT_ID,
    ActivityCancelled,
    ActivityClosed,
    ActivityCompleted,
    ActivityFailed,
    ActivityHeartbeatRecorded,
    ActivityRetryScheduled,
    ActivityScheduled,
    ActivityStarted,
    ActivityTimedOut,
    AttemptSummary,
    local_activity_events,
    local_terminal_event,
)
from burrow.protocol.cancellation_events import (
    ActivityCancelRequested,
    CooperativeCancellationDelivered,
    CooperativeCancellationRequested,
)
from burrow.protocol.child_events import (
    CHILD_CLOSED_EVENTS,
    ChildCancelRequested,
    ChildClosed,
    ChildRunCancelled,
    ChildRunCompleted,
    ChildRunFailed,
    ChildRunStarted,
    ChildRunTerminated,
    ChildSignalled,
    ChildWorkflowScheduled,
    TimeoutPolicy,
    WorkflowTimedOut,
)
from burrow.protocol.control_events import (
    CONTROL_EVENTS,
    ArchiveRequested,
    RedriveRequested,
    RepairRequested,
    WorkflowArchived,
)
from burrow.protocol.event_base import Event, ExecutionMode, is_local
from burrow.protocol.selection_events import (
    SelectionGroupOpened,
    SelectionOperationCancelled,
    SelectionResolved,
)
from burrow.protocol.shapes import (
    RECORDED,
    ExceptionInfo,
    JsonDict,
    Omitted,
    RetrySpec,
    Timestamp,
)
from burrow.protocol.visibility_events import (
    VISIBILITY_EVENTS,
    MemoUpserted,
    SearchAttributesUpserted,
)

__all__ = [
    "CHILD_CLOSED_EVENTS",
    "CONDITION_WAIT_EVENTS",
    "CONTROL_EVENTS",
    "EVENT_TYPES",
    "NO_ATTEMPT_ID",
    "STEP_EVENTS",
    "TERMINAL_EVENTS",
    "VISIBILITY_EVENTS",
    "ActivityCancelRequested",
    "ActivityCancelled",
    "ActivityClosed",
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityHeartbeatRecorded",
    "ActivityRetryScheduled",
    "ActivityScheduled",
    "ActivityStarted",
    "ActivityTimedOut",
    "ArchiveRequested",
    "AttemptSummary",
    "CancelRequested",
    "ChildCancelRequested",
    "ChildClosed",
    "ChildRunCancelled",
    "ChildRunCompleted",
    "ChildRunFailed",
    "ChildRunStarted",
    "ChildRunTerminated",
    "ChildSignalled",
    "ChildWorkflowScheduled",
    "ConditionWaitOpened",
    "ConditionWaitSatisfied",
    "ConditionWaitTimedOut",
    "CooperativeCancellationDelivered",
    "CooperativeCancellationRequested",
    "Event",
    "ExecutionMode",
    "HistoryError",
    "HistoryEvent",
    "MemoUpserted",
    "RedriveRequested",
    "RepairRequested",
    "SearchAttributesUpserted",
    "SelectionGroupOpened",
    "SelectionOperationCancelled",
    "SelectionResolved",
    "SideEffectRecorded",
    "SignalReceived",
    "SignalSkipped",
    "StepEvent",
    "TimeoutPolicy",
    "TimerCancelled",
    "TimerFired",
    "TimerScheduled",
    "UpdateAccepted",
    "UpdateApplied",
    "UpdateCompleted",
    "VersionMarkerRecorded",
    "WorkflowArchived",
    "WorkflowCancelled",
    "WorkflowCompleted",
    "WorkflowContinuedAsNew",
    "WorkflowFailed",
    "WorkflowStarted",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "is_local",
    "local_activity_events",
    "local_terminal_event",
    "parse",
]


# -- run lifecycle --------------------------------------------------------------------------------


class WorkflowStarted(Event):
    """Event 1 of every run."""

    event_type: ClassVar[str] = "WorkflowStarted"
    workflow_type: str
    workflow_instance_id: str
    workflow_run_id: str
    continued_from_run_id: str | None = None
    workflow_definition_fingerprint: str | None = Omitted
    """S8: the definition the run was started against (`sha256:...`), when one was known."""
    parent_workflow_instance_id: str | None = Omitted
    parent_workflow_run_id: str | None = Omitted
    parent_sequence: int | None = Omitted
    """The parent's step that started this child (with the two fields above), for a child."""
    execution_timeout_seconds: float | None = Omitted
    run_timeout_seconds: float | None = Omitted
    execution_deadline_at: Timestamp | None = Omitted
    run_deadline_at: Timestamp | None = Omitted
    retry_policy: RetrySpec | None = Omitted
    retry_attempt: int | None = Omitted
    """2 and up for a retry of a failed run (its predecessor is `retry_of_run_id`)."""
    retry_of_run_id: str | None = Omitted
    memo: JsonDict | None = Omitted
    search_attributes: JsonDict | None = Omitted
    """What the start gave (issue 30); a continued or retried run carries the chain's current."""


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


# -- condition waits ------------------------------------------------------------------------------


class _ConditionWait(Event):
    condition_wait_id: str
    sequence: int
    condition_key: str | None = Omitted
    condition_definition_fingerprint: str | None = Omitted
    timeout_seconds: int | None = Omitted


class ConditionWaitOpened(_ConditionWait):
    """Workflow code waits for its predicate (step `sequence`), at most `timeout_seconds`.

    The id is `run_id:step`; the timeout is a durable timer of the same step (`timer_id`).
    """

    event_type: ClassVar[str] = "ConditionWaitOpened"


class ConditionWaitSatisfied(_ConditionWait):
    """Workflow code found the predicate true and went on (its timer, if any, is cancelled).

    `workflow_signal_id` and `signal_name` name the last signal the run received before.
    """

    event_type: ClassVar[str] = "ConditionWaitSatisfied"
    timer_id: str | None = Omitted
    workflow_signal_id: str | None = Omitted
    signal_name: str | None = Omitted


class ConditionWaitTimedOut(_ConditionWait):
    """The wait's timer fired before workflow code found the predicate true."""

    event_type: ClassVar[str] = "ConditionWaitTimedOut"
    timer_id: str


CONDITION_WAIT_EVENTS = (ConditionWaitOpened, ConditionWaitSatisfied, ConditionWaitTimedOut)


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
        ChildWorkflowScheduled,
        ChildRunStarted,
        ChildRunCompleted,
        ChildRunFailed,
        ChildRunCancelled,
        ChildRunTerminated,
        ChildSignalled,
        ChildCancelRequested,
        WorkflowTimedOut,
        CooperativeCancellationRequested,
        CooperativeCancellationDelivered,
        ActivityCancelRequested,
        ConditionWaitOpened,
        ConditionWaitSatisfied,
        ConditionWaitTimedOut,
        SelectionGroupOpened,
        SelectionResolved,
        SelectionOperationCancelled,
        *CONTROL_EVENTS,
        *VISIBILITY_EVENTS,
    )
}
"""Every event type Burrow records, by catalogue name."""

STEP_EVENTS = (
    ActivityScheduled,
    TimerScheduled,
    SideEffectRecorded,
    VersionMarkerRecorded,
    ChildWorkflowScheduled,
    ChildSignalled,
    ConditionWaitOpened,
    MemoUpserted,
    SearchAttributesUpserted,
)
"""Events that record a workflow step (payload `sequence` is the step number, PROTOCOL.md 8.3)."""

TERMINAL_EVENTS = (
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    WorkflowContinuedAsNew,
    WorkflowTerminated,
    WorkflowTimedOut,
)
"""Events that close a run."""

StepEvent = (
    ActivityScheduled
    | TimerScheduled
    | SideEffectRecorded
    | VersionMarkerRecorded
    | ChildWorkflowScheduled
    | ChildSignalled
    | ConditionWaitOpened
    | MemoUpserted
    | SearchAttributesUpserted
)


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
    def workflow_time(self) -> datetime:
        """The time workflow code sees when this event wakes it (workflow.now(), D1, S12).

        `recorded_at`, but for a result written with the workflow task it woke: the code ran
        before the database stamped it, so the time it ran with is recorded in the event.
        """
        if isinstance(self.event, ActivityCompleted) and self.event.workflow_time is not None:
            return self.event.workflow_time
        return self.recorded_at

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
