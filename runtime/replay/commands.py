"""Commands a workflow activation produces, one frozen model per type (PROTOCOL.md 7).

`to_json()` is the command exactly as the worker protocol sends it; `parse_command()` validates
one such object (the store and the HTTP server accept nothing else). Step commands carry their
step number in `seq` for in-process checks; it is not part of the wire form, where the store
assigns consecutive step numbers in submission order (PROTOCOL.md 8.3).

Burrow adds three commands the catalogue lacks: `cancel_timer`, `cancel_workflow` and
`skip_signal`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, Field, TypeAdapter, ValidationError, model_validator

from burrow.codec import Payload
from burrow.errors import PayloadError
from burrow.replay.shapes import (
    ActivityOptions,
    ExceptionInfo,
    Failure,
    JsonDict,
    Omitted,
    WireModel,
)

# In-process only; accepted as `sequence` too, the name older Burrow batches used.
_STEP = Field(default=None, exclude=True, validation_alias=AliasChoices("seq", "sequence"))


class ScheduleActivity(ActivityOptions):
    """Queue an activity task (A1)."""

    type: Literal["schedule_activity"] = "schedule_activity"
    seq: int | None = _STEP


class StartTimer(WireModel):
    """Start a durable timer."""

    type: Literal["start_timer"] = "start_timer"
    seq: int | None = _STEP
    delay_seconds: float


class CancelTimer(WireModel):
    """Cancel the durable timer a step started, unless it already fired."""

    type: Literal["cancel_timer"] = "cancel_timer"
    sequence: int


class RecordSideEffect(WireModel):
    """Record a non-deterministic value once (D1); `result` is the raw blob."""

    type: Literal["record_side_effect"] = "record_side_effect"
    seq: int | None = _STEP
    result: str
    codec: str = "avro"

    @model_validator(mode="before")
    @classmethod
    def _unwrap_envelope(cls, data: object) -> object:
        """Accept the result as a `{codec, blob}` envelope too, stored as blob plus codec."""
        if isinstance(data, dict) and isinstance(data.get("result"), dict):
            envelope = data["result"]
            return {**data, "result": envelope.get("blob"), "codec": envelope.get("codec")}
        return data

    @classmethod
    def of(cls, payload: Payload, *, seq: int | None = None) -> RecordSideEffect:
        """The command for an encoded value."""
        return cls(seq=seq, result=payload["blob"], codec=payload["codec"])


class RecordVersionMarker(WireModel):
    """Record which branch of a changed workflow this run takes."""

    type: Literal["record_version_marker"] = "record_version_marker"
    seq: int | None = _STEP
    change_id: str
    version: int
    min_supported: int
    max_supported: int


class CompleteUpdate(WireModel):
    """Return an update handler's result to its caller."""

    type: Literal["complete_update"] = "complete_update"
    update_id: str
    result: Payload


class FailUpdate(WireModel):
    """Report an update handler's failure to its caller."""

    type: Literal["fail_update"] = "fail_update"
    update_id: str
    message: str | None = None
    exception_type: str | None = None
    non_retryable: bool = True
    exception: ExceptionInfo | None = Omitted

    @classmethod
    def of(cls, update_id: str, failure: Failure) -> FailUpdate:
        """The command for a handler's recorded failure (always final for its caller)."""
        return cls(
            update_id=update_id,
            message=failure.message,
            exception_type=failure.exception_type,
            exception=ExceptionInfo.of(failure),
        )

    def failure(self) -> Failure:
        """The flat failure recorded on the update."""
        return Failure.joined(self.message, self.exception_type, self.non_retryable, self.exception)


class SkipSignal(WireModel):
    """Record that a signal was not applied, and why (issue 13: no input poisons a run).

    A signal with no handler, an undecodable payload or arguments that do not bind to its
    handler stays in history and is skipped; this records the decision once, so a replay finds
    it again instead of deciding anew, and `describe()` can count it.
    """

    type: Literal["skip_signal"] = "skip_signal"
    signal_id: str
    signal_name: str
    reason: str


class CompleteWorkflow(WireModel):
    """Close the run with a result."""

    type: Literal["complete_workflow"] = "complete_workflow"
    result: Payload


class FailWorkflow(WireModel):
    """Close the run as failed; `exception` carries details, stack and cause."""

    type: Literal["fail_workflow"] = "fail_workflow"
    message: str | None = None
    exception_type: str | None = None
    non_retryable: bool = False
    exception: ExceptionInfo | None = Omitted

    @classmethod
    def of(cls, failure: Failure) -> FailWorkflow:
        """The command for a recorded failure."""
        return cls(
            message=failure.message,
            exception_type=failure.exception_type,
            non_retryable=failure.non_retryable,
            exception=ExceptionInfo.of(failure),
        )

    def failure(self) -> Failure:
        """The flat failure this command records on the run."""
        return Failure.joined(self.message, self.exception_type, self.non_retryable, self.exception)


class CancelWorkflow(WireModel):
    """Close the run as cancelled (the code let the cancellation through)."""

    type: Literal["cancel_workflow"] = "cancel_workflow"
    message: str


class ContinueAsNew(WireModel):
    """Close the run and start a fresh one with new input."""

    type: Literal["continue_as_new"] = "continue_as_new"
    arguments: Payload
    workflow_type: str
    queue: str


StepCommand = ScheduleActivity | StartTimer | RecordSideEffect | RecordVersionMarker
TerminalCommand = CompleteWorkflow | FailWorkflow | CancelWorkflow | ContinueAsNew
Command = StepCommand | CancelTimer | CompleteUpdate | FailUpdate | SkipSignal | TerminalCommand

STEP_COMMANDS = (ScheduleActivity, StartTimer, RecordSideEffect, RecordVersionMarker)
TERMINAL_COMMANDS = (CompleteWorkflow, FailWorkflow, CancelWorkflow, ContinueAsNew)

_COMMAND = TypeAdapter[Command](Annotated[Command, Field(discriminator="type")])


class InvalidCommand(PayloadError):
    """A command object that is not a known, well-formed command."""


def parse_command(data: JsonDict) -> Command:
    """Validate one wire command; InvalidCommand names what is wrong."""
    try:
        return _COMMAND.validate_python(data)
    except ValidationError as exc:
        raise InvalidCommand(
            f"invalid command {data.get('type')!r}: {exc.errors(include_url=False)}",
            command_type=data.get("type"),
        ) from exc


def envelopes(command: Command) -> list[tuple[str, Payload]]:
    """The `{codec, blob}` payloads a command carries, by field name (for size limits)."""
    match command:
        case ScheduleActivity() | ContinueAsNew():
            return [("arguments", command.arguments)]
        case CompleteUpdate() | CompleteWorkflow():
            return [("result", command.result)]
    return []


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
