"""Commands a workflow activation produces, one frozen model per type (PROTOCOL.md 7).

`to_json()` is the command exactly as the worker protocol sends it; `parse_command()` validates
one such object (the store and the HTTP server accept nothing else). Step commands carry their
step number in `seq` for in-process checks; it is not part of the wire form, where the store
assigns consecutive step numbers in submission order (PROTOCOL.md 8.3).

`record_local_activity` carries a whole local activity execution (A3): the store expands it into
the ordinary activity events (events.local_activity_events).

Burrow adds commands the catalogue lacks: `cancel_timer`, `cancel_workflow`, `skip_signal`,
`signal_child_workflow`, `cancel_child_workflow`, `cancel_activity`, `satisfy_condition_wait` and
`open_selection`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from burrow.codec import Payload
from burrow.errors import PayloadError
from burrow.protocol.child_events import (
    ChildCancellationPolicyName,
    ParentClosePolicyName,
    TimeoutPolicy,
)
from burrow.protocol.shapes import (
    MAX_DURATION_SECONDS,
    RECORDED,
    ActivitySpec,
    ExceptionInfo,
    Failure,
    JsonDict,
    LocalActivitySpec,
    Omitted,
    RetrySpec,
    WireModel,
    check_duration_seconds,
    check_timeouts,
    check_workflow_timeouts,
    is_recorded,
)
from burrow.protocol.stream_commands import WorkflowStreamDirective as WorkflowStreamDirective
from burrow.protocol.visibility_commands import UpsertMemo as UpsertMemo
from burrow.protocol.visibility_commands import UpsertSearchAttributes as UpsertSearchAttributes

# In-process only; accepted as `sequence` too, the name older Burrow batches used.
_STEP = Field(default=None, exclude=True, validation_alias=AliasChoices("seq", "sequence"))


class ScheduleActivity(ActivitySpec):
    """Queue an activity task (A1)."""

    type: Literal["schedule_activity"] = "schedule_activity"
    seq: int | None = _STEP


class StartTimer(WireModel):
    """Start a durable timer `delay_seconds` (0 to MAX_DURATION_SECONDS) from now."""

    type: Literal["start_timer"] = "start_timer"
    seq: int | None = _STEP
    delay_seconds: float

    @field_validator("delay_seconds")
    @classmethod
    def _delay(cls, value: float, info: ValidationInfo) -> float:
        # Issue 25 items 6 and 8: a negative delay was recorded, a huge one failed the commit.
        return value if is_recorded(info) else check_duration_seconds("delay_seconds", value)


class CancelTimer(WireModel):
    """Cancel the durable timer a step started, unless it already fired."""

    type: Literal["cancel_timer"] = "cancel_timer"
    sequence: int


class RecordSideEffect(WireModel):
    """Record a non-deterministic value once (D1); `result` is the raw blob.

    With `workflow_stream`, the same step also appends to or ends a run output stream.
    """

    type: Literal["record_side_effect"] = "record_side_effect"
    seq: int | None = _STEP
    result: str
    codec: str = "avro"
    workflow_stream: WorkflowStreamDirective | None = None

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


_PARENT_CLOSE_ALIASES = {"request_cancellation": "request_cancel"}


class StartChildWorkflow(WireModel):
    """Start a child workflow (PROTOCOL.md 7); its close comes back as a `ChildRun*` event.

    `workflow_id` (a Burrow field) names the child; without it the store derives one from the
    parent's run and step, so a retried task never starts a second child. `connection` picks
    the partition its workflow tasks go to (default: the parent's, M7).
    """

    type: Literal["start_child_workflow"] = "start_child_workflow"
    seq: int | None = _STEP
    workflow_type: str = Field(min_length=1, max_length=255)
    queue: str = Field(min_length=1, max_length=255)
    arguments: Payload
    workflow_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9._:-]+$"
    )
    connection: str | None = Omitted
    parent_close_policy: ParentClosePolicyName = "abandon"
    cancellation_policy: ChildCancellationPolicyName = "abandon"
    retry_policy: RetrySpec | None = Omitted
    execution_timeout_seconds: float | None = Omitted
    run_timeout_seconds: float | None = Omitted
    memo: JsonDict | None = Omitted
    search_attributes: JsonDict | None = Omitted  # issue 30: the child's, typed by the store

    @field_validator("parent_close_policy", mode="before")
    @classmethod
    def _legacy_policy(cls, value: object) -> object:
        return _PARENT_CLOSE_ALIASES.get(value, value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _timeouts(self, info: ValidationInfo) -> StartChildWorkflow:
        if not is_recorded(info):
            check_workflow_timeouts(self.execution_timeout_seconds, self.run_timeout_seconds)
        return self

    def timeout_policy(self) -> TimeoutPolicy | None:
        """The timeouts as `ChildWorkflowScheduled` records them, if any were given."""
        if self.execution_timeout_seconds is None and self.run_timeout_seconds is None:
            return None
        return TimeoutPolicy(
            execution_timeout_seconds=self.execution_timeout_seconds,
            run_timeout_seconds=self.run_timeout_seconds,
        )


class SignalChildWorkflow(WireModel):
    """Signal the child started at step `child_sequence` (a Burrow command; a step itself)."""

    type: Literal["signal_child_workflow"] = "signal_child_workflow"
    seq: int | None = _STEP
    child_sequence: int = Field(ge=1)
    signal_name: str = Field(min_length=1, max_length=255)
    arguments: Payload


class CancelChildWorkflow(WireModel):
    """Ask the child started at step `sequence` to cancel (a Burrow command, not a step)."""

    type: Literal["cancel_child_workflow"] = "cancel_child_workflow"
    sequence: int = Field(ge=1)


class CancelActivity(WireModel):
    """Ask the queued activity of step `sequence` to stop (a Burrow command, not a step).

    The code awaiting it was cancelled under policy `try_cancel` (the step resolves as cancelled
    now) or, with `wait`, `wait_cancellation_completed` (the activity's own end resolves it).
    """

    type: Literal["cancel_activity"] = "cancel_activity"
    sequence: int = Field(ge=1)
    wait: bool = False


LocalOutcome = Literal["completed", "failed", "timed_out", "cancelled"]
TimeoutKind = Literal["start_to_close", "schedule_to_close", "heartbeat"]
MAX_LOCAL_ATTEMPTS = 100
"""Attempts one `record_local_activity` may report (PROTOCOL.md 7): a local execution ends then."""
MAX_LOCAL_HEARTBEATS = 100
"""Heartbeats recorded per local attempt; later ones still renew the lease but replace the last."""
_MAX_DURATION_MS = MAX_DURATION_SECONDS * 1000


class LocalHeartbeat(WireModel):
    """One heartbeat of a local attempt: when, after the attempt started, and its details."""

    elapsed_ms: int = Field(ge=0, le=_MAX_DURATION_MS)
    details: Payload | None = Omitted


class LocalAttempt(WireModel):
    """One attempt of a local activity, as the workflow worker ran it."""

    attempt_id: str
    attempt_number: int = Field(ge=1)
    outcome: LocalOutcome
    duration_ms: int = Field(ge=0, le=_MAX_DURATION_MS)
    message: str | None = Omitted
    exception_type: str | None = Omitted
    non_retryable: bool | None = Omitted
    timeout_kind: TimeoutKind | None = Omitted
    retry_reason: Literal["failure", "timeout"] | None = Omitted
    backoff_seconds: float | None = Omitted
    heartbeats: list[LocalHeartbeat] = Field(default_factory=list, max_length=MAX_LOCAL_HEARTBEATS)

    @field_validator("backoff_seconds")
    @classmethod
    def _backoff(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None or is_recorded(info):
            return value
        return check_duration_seconds("backoff_seconds", value)


class RecordLocalActivity(WireModel):
    """A local activity the workflow task ran in its own process, with every attempt (A3).

    No activity task exists: the store records the execution as ActivityScheduled, one
    ActivityStarted per attempt, its heartbeats, ActivityRetryScheduled between attempts and
    one terminal event, all marked `execution_mode=local`, `local_activity=true`.
    `exception` (a Burrow addition) carries the failure's details and stack.
    """

    type: Literal["record_local_activity"] = "record_local_activity"
    seq: int | None = _STEP
    activity_type: str
    execution_mode: Literal["local"] = "local"
    arguments: Payload
    outcome: LocalOutcome
    result: Payload | None = Omitted
    message: str | None = Omitted
    exception_type: str | None = Omitted
    non_retryable: bool | None = Omitted
    timeout_kind: TimeoutKind | None = Omitted
    exception: ExceptionInfo | None = Omitted
    attempts: list[LocalAttempt] = Field(max_length=MAX_LOCAL_ATTEMPTS)
    retry_policy: RetrySpec = RetrySpec()
    start_to_close_timeout: float | None = Omitted
    schedule_to_close_timeout: float | None = Omitted
    heartbeat_timeout: float | None = Omitted

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> RecordLocalActivity:
        problem = self._problem()
        if problem is not None:
            raise ValueError(problem)
        if not is_recorded(info):
            check_timeouts(
                {
                    "start_to_close_timeout": self.start_to_close_timeout,
                    "schedule_to_close_timeout": self.schedule_to_close_timeout,
                    "heartbeat_timeout": self.heartbeat_timeout,
                }
            )
        return self

    def _problem(self) -> str | None:
        """What makes the record self-contradictory, or None."""
        if (self.outcome == "completed") != (self.result is not None):
            return "result is given exactly when the outcome is completed"
        if (self.outcome == "timed_out") != (self.timeout_kind is not None):
            return "timeout_kind is given exactly when the outcome is timed_out"
        if not self.attempts:
            # Cancelled before it ever ran (its caller went away or the run closed first).
            return None if self.outcome == "cancelled" else "a run outcome needs its attempts"
        numbers = [a.attempt_number for a in self.attempts]
        if numbers != list(range(1, len(numbers) + 1)):
            return f"attempt numbers must be 1..{len(numbers)} in order, got {numbers}"
        if len({a.attempt_id for a in self.attempts}) != len(self.attempts):
            return "attempt ids must be unique"
        if self.attempts[-1].outcome != self.outcome:
            return "the last attempt's outcome must be the execution's outcome"
        for attempt in self.attempts[:-1]:
            if attempt.outcome not in ("failed", "timed_out") or attempt.retry_reason is None:
                return f"attempt {attempt.attempt_number} is not last, so it must be a retry"
        return None

    def options(self) -> LocalActivitySpec:
        """The snapshot ActivityScheduled records as `activity`."""
        return LocalActivitySpec.model_validate(
            {
                "activity_type": self.activity_type,
                "arguments": self.arguments,
                "retry_policy": self.retry_policy,  # a validated model: taken as it is
                "start_to_close_timeout": self.start_to_close_timeout,
                "schedule_to_close_timeout": self.schedule_to_close_timeout,
                "heartbeat_timeout": self.heartbeat_timeout,
            },
            context=RECORDED,  # checked when this command was
        )

    def failure(self) -> Failure:
        """The execution's final failure (for failed, timed-out and cancelled outcomes)."""
        joined = Failure.joined(
            self.message, self.exception_type, bool(self.non_retryable), self.exception
        )
        return joined.model_copy(update={"timeout_kind": self.timeout_kind})


class OpenConditionWait(WireModel):
    """Wait until workflow code finds its predicate true, at most `timeout_seconds` (a timer).

    The store records `ConditionWaitOpened` (id `run_id:step`) and, with a timeout, a durable
    timer of the same step whose firing records `ConditionWaitTimedOut`. `supersedes` is
    Burrow's: the step of the same wait opened by an earlier task, which this one re-opens
    (workflow code woke and found its predicate still false); the timer moves to this step,
    keeping its deadline. The SDK never sends it; the server derives it from history.
    """

    type: Literal["open_condition_wait"] = "open_condition_wait"
    seq: int | None = _STEP
    condition_key: str | None = Omitted
    condition_definition_fingerprint: str | None = Omitted
    timeout_seconds: int | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)
    supersedes: int | None = Field(default=None, ge=1, exclude_if=lambda v: v is None)

    @field_validator("timeout_seconds")
    @classmethod
    def _timeout(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None or is_recorded(info):
            return value
        check_duration_seconds("timeout_seconds", value)
        return value


class SatisfyConditionWait(WireModel):
    """Record that workflow code went past the wait of step `sequence`: its predicate held.

    A Burrow command the server derives (PROTOCOL.md 7 has none: the SDK just goes on); it
    cancels the wait's timer. `workflow_signal_id`/`signal_name` name the signal that woke it.
    """

    type: Literal["satisfy_condition_wait"] = "satisfy_condition_wait"
    sequence: int = Field(ge=1)
    condition_key: str | None = Omitted
    condition_definition_fingerprint: str | None = Omitted
    timeout_seconds: int | None = Omitted
    workflow_signal_id: str | None = Omitted
    signal_name: str | None = Omitted


class OpenSelection(WireModel):
    """Record a first-completion group whose members are the batch's next steps (Burrow's).

    The server derives it from the SDK's `parallel_group_mode: "select"` metadata (PROTOCOL.md
    7): the store keeps no group metadata on step events, so SelectionGroupOpened keeps it.
    """

    type: Literal["open_selection"] = "open_selection"
    selection_group_id: str
    group_kind: str
    base_sequence: int = Field(ge=1)
    size: int = Field(ge=1)
    members: list[JsonDict] = Field(min_length=1)


class CancelSelectionOperation(WireModel):
    """Cancel a select member that has not closed (`DurableOperationHandle.cancel()`).

    The server sends the timer's or child's own cancel before it; a member already closed is
    not cancelled (the server drops the command), so its result stands.
    """

    type: Literal["cancel_selection_operation"] = "cancel_selection_operation"
    selection_group_id: str
    member_key: int | str
    member_index: int = Field(ge=0)
    member_base_sequence: int = Field(ge=1)
    member_size: int = Field(ge=1)
    operation_kind: str
    operation_identity: str


StepCommand = (
    ScheduleActivity
    | StartTimer
    | RecordSideEffect
    | RecordVersionMarker
    | RecordLocalActivity
    | StartChildWorkflow
    | SignalChildWorkflow
    | OpenConditionWait
    | UpsertMemo
    | UpsertSearchAttributes
)
TerminalCommand = CompleteWorkflow | FailWorkflow | CancelWorkflow | ContinueAsNew
Command = (
    StepCommand
    | CancelTimer
    | CancelChildWorkflow
    | CancelActivity
    | CompleteUpdate
    | FailUpdate
    | SkipSignal
    | SatisfyConditionWait
    | OpenSelection
    | CancelSelectionOperation
    | TerminalCommand
)

STEP_COMMANDS = (
    ScheduleActivity,
    StartTimer,
    RecordSideEffect,
    RecordVersionMarker,
    RecordLocalActivity,
    StartChildWorkflow,
    SignalChildWorkflow,
    OpenConditionWait,
    UpsertMemo,
    UpsertSearchAttributes,
)
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
        case ScheduleActivity() | ContinueAsNew() | StartChildWorkflow() | SignalChildWorkflow():
            return [("arguments", command.arguments)]
        case RecordLocalActivity():
            found = [("arguments", command.arguments)]
            return found if command.result is None else [*found, ("result", command.result)]
        case CompleteUpdate() | CompleteWorkflow():
            return [("result", command.result)]
        case UpsertMemo():
            return [("entries", command.entries)]
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
        case RecordLocalActivity():
            return f"local activity {command.activity_type!r}"
        case StartChildWorkflow():
            return f"child workflow {command.workflow_type!r}"
        case SignalChildWorkflow():
            return f"signal {command.signal_name!r} to child {command.child_sequence}"
        case OpenConditionWait():
            return f"condition wait {command.condition_key!r}"
        case UpsertMemo():
            return "memo upsert"
        case UpsertSearchAttributes():
            return "search attributes upsert"
