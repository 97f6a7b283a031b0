"""Commands a workflow activation produces: frozen values with their wire form (PROTOCOL.md 7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from burrow.codec import Payload

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ScheduleActivity:
    """Queue an activity task (A1)."""

    seq: int
    activity_type: str
    arguments: Payload
    queue: str
    retry_policy: JsonDict
    timeouts: JsonDict = field(default_factory=dict)

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {
            "type": "schedule_activity",
            "sequence": self.seq,
            "activity_type": self.activity_type,
            "queue": self.queue,
            "arguments": dict(self.arguments),
            "retry_policy": self.retry_policy,
            **{k: v for k, v in self.timeouts.items() if v is not None},
        }


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Start a durable timer."""

    seq: int
    delay_seconds: float

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {"type": "start_timer", "sequence": self.seq, "delay_seconds": self.delay_seconds}


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Cancel a durable timer that has not fired."""

    seq: int

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {"type": "cancel_timer", "sequence": self.seq}


@dataclass(frozen=True, slots=True)
class RecordSideEffect:
    """Record a non-deterministic value once (D1)."""

    seq: int
    result: Payload

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {
            "type": "record_side_effect",
            "sequence": self.seq,
            "result": self.result["blob"],
            "codec": self.result["codec"],
        }


@dataclass(frozen=True, slots=True)
class RecordVersionMarker:
    """Record which branch of a changed workflow this run takes."""

    seq: int
    change_id: str
    version: int
    min_supported: int
    max_supported: int

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {
            "type": "record_version_marker",
            "sequence": self.seq,
            "change_id": self.change_id,
            "version": self.version,
            "min_supported": self.min_supported,
            "max_supported": self.max_supported,
        }


@dataclass(frozen=True, slots=True)
class CompleteUpdate:
    """Return an update handler's result (or failure) to its caller."""

    update_id: str
    result: Payload | None = None
    failure: JsonDict | None = None

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        if self.failure is not None:
            return {"type": "fail_update", "update_id": self.update_id, **self.failure}
        return {"type": "complete_update", "update_id": self.update_id, "result": self.result}


@dataclass(frozen=True, slots=True)
class CompleteWorkflow:
    """Close the run with a result."""

    result: Payload

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {"type": "complete_workflow", "result": dict(self.result)}


@dataclass(frozen=True, slots=True)
class FailWorkflow:
    """Close the run as failed."""

    failure: JsonDict

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {"type": "fail_workflow", **self.failure}


@dataclass(frozen=True, slots=True)
class CancelWorkflow:
    """Close the run as cancelled (the code let the cancellation through)."""

    message: str

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {"type": "cancel_workflow", "message": self.message}


@dataclass(frozen=True, slots=True)
class ContinueAsNew:
    """Close the run and start a fresh one with new input."""

    arguments: Payload
    workflow_type: str
    queue: str

    def to_wire(self) -> JsonDict:
        """The command as sent to the store."""
        return {
            "type": "continue_as_new",
            "arguments": dict(self.arguments),
            "workflow_type": self.workflow_type,
            "queue": self.queue,
        }


StepCommand = ScheduleActivity | StartTimer | RecordSideEffect | RecordVersionMarker
Command = (
    StepCommand
    | CancelTimer
    | CompleteUpdate
    | CompleteWorkflow
    | FailWorkflow
    | CancelWorkflow
    | ContinueAsNew
)
TERMINAL = (CompleteWorkflow, FailWorkflow, CancelWorkflow, ContinueAsNew)

STEP_EVENT = {
    "ActivityScheduled": "activity",
    "TimerScheduled": "timer",
    "SideEffectRecorded": "side effect",
    "VersionMarkerRecorded": "version marker",
}


def describe_step(command: StepCommand) -> str:
    """A short human form for non-determinism messages."""
    match command:
        case ScheduleActivity():
            return f"activity {command.activity_type!r}"
        case StartTimer():
            return f"timer {command.delay_seconds:g}s"
        case RecordSideEffect():
            return "side effect"
        case RecordVersionMarker():
            return f"version marker {command.change_id!r}"
    raise TypeError(command)


def describe_event(event_type: str, payload: JsonDict) -> str:
    """The same short form for a recorded step event."""
    kind = STEP_EVENT.get(event_type, event_type)
    if event_type == "ActivityScheduled":
        return f"activity {payload.get('activity_type')!r}"
    if event_type == "TimerScheduled":
        return f"timer {float(payload.get('delay_seconds', 0)):g}s"
    if event_type == "VersionMarkerRecorded":
        return f"version marker {payload.get('change_id')!r}"
    return kind
