"""Wire shapes shared by history events and commands (PROTOCOL.md 7-8).

Every model serialises to exactly the JSON the Durable Workflow catalogue names: a field that is
`None` and marked `Omitted` is left out (the key is absent, not null), every other field is always
written. Timestamps are ISO-8601 text with the offset (`datetime.isoformat()`), as stored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import JsonValue as JsonValue  # re-exported: the one JSON value alias

from burrow.codec import Payload

JsonDict = dict[str, Any]
"""A JSON object whose values the caller reads without narrowing (being replaced by JsonObject)."""

JsonObject = dict[str, JsonValue]
"""A JSON object: what a payload envelope, a failure record or a jsonb column holds."""


def _is_none(value: object) -> bool:
    return value is None


Omitted = Field(default=None, exclude_if=_is_none)
"""A field written only when it has a value."""

Timestamp = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str)]
"""A datetime carried as `isoformat()` text."""


class WireModel(BaseModel):
    """A frozen, closed JSON object: unknown keys are refused, not dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> JsonDict:
        """The JSON object, as stored and sent."""
        return self.model_dump(mode="json")

    @classmethod
    def from_json(cls, data: JsonDict) -> Self:
        """Parse and validate a JSON object (pydantic.ValidationError when malformed)."""
        return cls.model_validate(data)


UNLIMITED_ATTEMPTS = 0
"""`max_attempts` for "retry until it succeeds" (an absent key means the same, as in Temporal)."""

DEFAULT_INITIAL_INTERVAL_SECONDS = 1.0
DEFAULT_BACKOFF_COEFFICIENT = 2.0
DEFAULT_MAXIMUM_INTERVAL_SECONDS = 100.0

# PROTOCOL.md 8 (command validation): heartbeat <= start_to_close <= schedule_to_close and
# schedule_to_start <= schedule_to_close; each pair is (shorter, longer).
_TIMEOUT_ORDER = (
    ("heartbeat_timeout", "start_to_close_timeout"),
    ("heartbeat_timeout", "schedule_to_close_timeout"),
    ("start_to_close_timeout", "schedule_to_close_timeout"),
    ("schedule_to_start_timeout", "schedule_to_close_timeout"),
)


RECORDED: dict[str, bool] = {"recorded": True}
"""Validation context for shapes read back from history: what was once accepted still parses.

The duration checks below apply to new commands; a snapshot recorded before they existed (say a
heartbeat timeout above its start-to-close timeout) must not make its run unreadable. Pass it as
`model_validate(payload, context=RECORDED)`.
"""


def is_recorded(info: ValidationInfo) -> bool:
    """Whether the shape is being read back from history (validated with RECORDED)."""
    return bool(isinstance(info.context, dict) and info.context.get("recorded"))


MAX_DURATION_SECONDS = 100 * 365 * 24 * 3600
"""The longest timeout, retry interval, backoff or timer accepted anywhere: 100 years.

Refused above it at the authoring API, in commands and on the wire (issue 25 item 1): longer
values overflow Python's dates and Postgres intervals when deadlines are computed.
"""

MAX_SESSION_SECONDS = 2**31 - 1
"""The longest worker session lease or lifetime (about 68 years): the store keeps 32-bit seconds."""


def check_duration_seconds(name: str, seconds: float) -> float:
    """`seconds` when it is finite, >= 0 and at most MAX_DURATION_SECONDS; ValueError otherwise."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {seconds!r}")
    return _at_most_max(name, seconds)


def check_positive_seconds(name: str, seconds: float) -> float:
    """`seconds` when it is finite, above zero and at most MAX_DURATION_SECONDS; ValueError else."""
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {seconds!r}")
    return _at_most_max(name, seconds)


def _at_most_max(name: str, seconds: float) -> float:
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(
            f"{name} must be at most {MAX_DURATION_SECONDS} seconds (100 years), got {seconds!r}"
        )
    return seconds


def check_timeouts(timeouts: Mapping[str, float | None]) -> None:
    """Refuse zero, negative or inconsistent activity timeouts (issue 13 item 7, A1).

    `timeouts` maps the `schedule_activity` names to seconds; absent or None means not set.
    """
    for name, seconds in timeouts.items():
        if seconds is not None:
            check_positive_seconds(name, seconds)
    for shorter, longer in _TIMEOUT_ORDER:
        low, high = timeouts.get(shorter), timeouts.get(longer)
        if low is not None and high is not None and low > high:
            raise ValueError(
                f"{shorter} ({low:g}s) must not exceed {longer} ({high:g}s):"
                f" the longer timeout would always fire first"
            )


def check_workflow_timeouts(execution: float | None, run: float | None) -> None:
    """Workflow timeouts: each positive and at most MAX_DURATION_SECONDS, run <= execution.

    Raises:
        ValueError: naming the timeout at fault.
    """
    for name, value in (("execution_timeout", execution), ("run_timeout", run)):
        if value is not None:
            check_positive_seconds(name, value)
    if execution is not None and run is not None and run > execution:
        raise ValueError(
            f"run_timeout ({run:g}s) must not exceed execution_timeout ({execution:g}s)"
        )


class RetrySpec(WireModel):
    """An activity's retry policy as snapped onto the execution when it is scheduled.

    An absent key takes the default: unlimited attempts (`max_attempts` 0 or absent) with
    exponential backoff from `initial_interval_seconds` (1 s), times `backoff_coefficient` (2.0)
    per attempt, capped at `maximum_interval_seconds` (100 s); `backoff_seconds` lists explicit
    per-attempt delays instead (the last repeats). `schedule_to_close_timeout` bounds it all.
    """

    max_attempts: int | None = Omitted
    non_retryable_error_types: list[str] | None = Omitted
    initial_interval_seconds: float | None = Omitted
    backoff_coefficient: float | None = Omitted
    maximum_interval_seconds: float | None = Omitted
    backoff_seconds: list[float] | None = Omitted

    @field_validator("max_attempts")
    @classmethod
    def _attempts(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value < 0 and not is_recorded(info):
            raise ValueError(f"max_attempts must be >= 0 (0 means unlimited), got {value}")
        return value

    @field_validator("initial_interval_seconds", "maximum_interval_seconds")
    @classmethod
    def _interval(cls, value: float | None, info: ValidationInfo) -> float | None:
        if value is None or is_recorded(info):
            return value
        return check_positive_seconds(str(info.field_name), value)

    @field_validator("backoff_coefficient")
    @classmethod
    def _coefficient(cls, value: float | None, info: ValidationInfo) -> float | None:
        if is_recorded(info):
            return value
        if value is not None and not (math.isfinite(value) and value >= 1):
            raise ValueError(f"backoff_coefficient must be a finite number >= 1, got {value!r}")
        return value

    @field_validator("backoff_seconds")
    @classmethod
    def _explicit(cls, value: list[float] | None, info: ValidationInfo) -> list[float] | None:
        # An explicit 0 is allowed here: "retry at once" is a deliberate per-attempt choice.
        for seconds in [] if is_recorded(info) else value or []:
            check_duration_seconds("backoff_seconds", seconds)
        return value

    @model_validator(mode="after")
    def _cap_above_start(self, info: ValidationInfo) -> Self:
        start, cap = self.initial_interval_seconds, self.maximum_interval_seconds
        if start is not None and cap is not None and cap < start and not is_recorded(info):
            raise ValueError(
                f"maximum_interval_seconds ({cap:g}) must not be below"
                f" initial_interval_seconds ({start:g})"
            )
        return self


class SessionSpec(WireModel):
    """The `worker_session` object of `schedule_activity` (W4, PROTOCOL.md 12).

    Stored as `activity_options.worker_session`: the session the activity runs in, and the
    options its first admitted activity creates (or reacquires) it with.
    """

    session_id: str = Field(min_length=1, max_length=255)
    connection: str | None = Omitted
    queue: str | None = Omitted
    requirements: list[str] = Field(default_factory=list)
    lease_seconds: int = Field(default=120, ge=1, le=MAX_SESSION_SECONDS)
    ttl_seconds: int = Field(default=1800, ge=1, le=MAX_SESSION_SECONDS)
    # Stored as a 32-bit integer too.
    max_concurrent_activities: int = Field(default=1, ge=1, le=2**31 - 1)
    create_if_missing: bool = True
    allow_reacquire_after_failure: bool = True

    @field_validator("requirements")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for requirement in value:
            if not requirement.strip():
                raise ValueError("a session requirement must be a non-empty capability string")
        return value


ActivityCancellationPolicyName = Literal["try_cancel", "wait_cancellation_completed", "abandon"]
"""What a workflow does for a queued activity when the code awaiting it is cancelled.

`try_cancel` (the default, as in the catalogue) asks the activity to stop and resolves the step
as cancelled at once; `wait_cancellation_completed` asks and resolves when the activity ends;
`abandon` leaves the activity running and resolves at once.
"""


class ActivitySpec(WireModel):
    """What `schedule_activity` carries; ActivityScheduled records it as `activity`.

    Timeouts are positive seconds up to MAX_DURATION_SECONDS, ordered as PROTOCOL.md 8 requires
    (`check_timeouts`).
    """

    activity_type: str
    queue: str
    # M7 (PROTOCOL.md 16): the partition the task goes to; `activity_connection` resolves it.
    connection: str | None = Omitted
    arguments: Payload
    retry_policy: RetrySpec = RetrySpec()
    start_to_close_timeout: float | None = Omitted
    schedule_to_start_timeout: float | None = Omitted
    schedule_to_close_timeout: float | None = Omitted
    heartbeat_timeout: float | None = Omitted
    worker_session: SessionSpec | None = Omitted
    cancellation_policy: ActivityCancellationPolicyName | None = Omitted

    @model_validator(mode="after")
    def _timeouts(self, info: ValidationInfo) -> Self:
        if is_recorded(info):
            return self
        check_timeouts(
            {
                "start_to_close_timeout": self.start_to_close_timeout,
                "schedule_to_start_timeout": self.schedule_to_start_timeout,
                "schedule_to_close_timeout": self.schedule_to_close_timeout,
                "heartbeat_timeout": self.heartbeat_timeout,
            }
        )
        return self


def activity_connection(spec: ActivitySpec, run_connection: str) -> str:
    """The connection an activity task goes to (M7, W4): the call's, its session's, the run's.

    The one resolution for every path that queues an activity, so a worker serving that
    connection (and only such a worker) claims it.
    """
    session = spec.worker_session
    return spec.connection or (session.connection if session else None) or run_connection


class ExceptionInfo(WireModel):
    """The `exception` object of a failure: details, stack, cause chain and activity identity."""

    details: Payload | None = Omitted
    stack: str | None = Omitted
    cause: JsonDict | None = Omitted
    activity_type: str | None = Omitted
    activity_execution_id: str | None = Omitted
    attempt_number: int | None = Omitted

    @classmethod
    def of(cls, failure: Failure) -> ExceptionInfo | None:
        """The nested part of a flat failure, or None when it has none."""
        nested = failure.model_dump(include=set(cls.model_fields), exclude_none=True)
        return cls.model_validate(nested) if nested else None


class Failure(WireModel):
    """How an error is recorded: type, message, retryability and optional details/stack/cause.

    This is the flat shape runs, tasks and activity failures store (`failure` columns); events
    nest `details`/`stack` the way the catalogue names them.
    """

    exception_type: str | None = None
    message: str | None = None
    non_retryable: bool = False
    failure_category: str | None = Omitted
    timeout_kind: str | None = Omitted
    details: Payload | None = Omitted
    stack: str | None = Omitted
    cause: JsonDict | None = Omitted
    activity_type: str | None = Omitted
    activity_execution_id: str | None = Omitted
    attempt_number: int | None = Omitted
    reason: str | None = Omitted
    """A machine-readable reason code, as an SDK worker reports it (PROTOCOL.md 5.5, 6.3)."""

    @classmethod
    def joined(
        cls,
        message: str | None,
        exception_type: str | None,
        non_retryable: bool,
        exception: ExceptionInfo | None,
    ) -> Failure:
        """The flat failure of a command's top-level fields and its nested `exception`."""
        nested = {} if exception is None else exception.model_dump(exclude_none=True)
        return cls(
            message=message, exception_type=exception_type, non_retryable=non_retryable, **nested
        )

    @classmethod
    def of(cls, data: JsonDict | Failure) -> Failure:
        """The known failure keys of a mapping (extra diagnostic keys and nulls are ignored).

        A typed record (what `burrow.failures.failure_of` builds) is taken as it is.
        """
        if isinstance(data, Failure):
            return data
        return cls.model_validate(
            {k: v for k, v in data.items() if k in cls.model_fields and v is not None}
        )


class LocalActivitySpec(WireModel):
    """What ActivityScheduled records as `activity` for a local activity (A3, PROTOCOL.md 13).

    A local activity bypasses the queues: it runs in the process of the workflow task that
    owns it, so the snapshot names that routing and has no queue, connection, worker session
    or schedule-to-start timeout (an unknown key is refused).
    """

    activity_type: str
    arguments: Payload
    execution_mode: Literal["local"] = "local"
    queue_bypassed: Literal[True] = True
    routing: Literal["same_process_workflow_task"] = "same_process_workflow_task"
    retry_policy: RetrySpec = RetrySpec()
    start_to_close_timeout: float | None = Omitted
    schedule_to_close_timeout: float | None = Omitted
    heartbeat_timeout: float | None = Omitted

    @model_validator(mode="after")
    def _timeouts(self, info: ValidationInfo) -> Self:
        if is_recorded(info):
            return self
        check_timeouts(
            {
                "start_to_close_timeout": self.start_to_close_timeout,
                "schedule_to_close_timeout": self.schedule_to_close_timeout,
                "heartbeat_timeout": self.heartbeat_timeout,
            }
        )
        return self


def activity_execution_id(run_id: str, step: int) -> str:
    """The execution id of the activity a run's step schedules (A2: the idempotency key)."""
    return f"{run_id}:{step}"
