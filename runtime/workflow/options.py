"""Options of the durable calls: retry policies, activity and local-activity options, durations.

Each validates where it is written, so a bad value fails the workflow task at the call that
holds it rather than when the engine first uses it.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import TypedDict

from pydantic import ValidationError

from burrow.protocol import shapes
from burrow.protocol.shapes import JsonObject

Duration = timedelta | float | int
"""A duration: a timedelta, or a number of seconds."""

MAX_DURATION_SECONDS = shapes.MAX_DURATION_SECONDS
"""The longest timeout, interval, delay or sleep workflow code may ask for: 100 years."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Durable retry policy of one activity call, snapped onto the execution when scheduled.

    The default retries until the activity succeeds (issue 13 item 6): `max_attempts=None`
    (sent as `max_attempts: 0`, which also means unlimited), waiting `initial_interval` (1 s)
    after the first failure, `backoff_coefficient` (2.0) times longer after each next one, at
    most `maximum_interval` (100 s). Attempts lost to a crashed worker count like failures, so
    bound the whole execution with `schedule_to_close_timeout` or set `max_attempts`; errors
    named in `non_retryable_error_types`, or raised with `non_retryable=True`, end it at once.
    `backoff_seconds` gives explicit per-attempt delays instead (the last one repeats).
    Intervals and delays are at most 100 years (`MAX_DURATION_SECONDS`). Invalid values raise
    ValueError, a duration that is not a timedelta or a number TypeError, when the policy is built
    (issue 13 item 7, issue 25 item 1).
    """

    max_attempts: int | None = None
    initial_interval: Duration = shapes.DEFAULT_INITIAL_INTERVAL_SECONDS
    backoff_coefficient: float = shapes.DEFAULT_BACKOFF_COEFFICIENT
    maximum_interval: Duration = shapes.DEFAULT_MAXIMUM_INTERVAL_SECONDS
    non_retryable_error_types: list[str] = field(default_factory=list)
    backoff_seconds: list[float] | None = None

    _spec: shapes.RetrySpec = field(init=False, repr=False, compare=False)
    _wire: JsonObject = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Refused where it is written, not when it is first used; validated once for every call.
        wire = self._build_wire()
        object.__setattr__(self, "_wire", wire)
        object.__setattr__(self, "_spec", _validated(wire))

    def to_wire(self) -> JsonObject:
        """The DW command shape: every value spelled out, so a later default never changes it."""
        return dict(self._wire)

    def to_spec(self) -> shapes.RetrySpec:
        """The policy as the command records it (an immutable model, shared by every call)."""
        return self._spec

    def _build_wire(self) -> JsonObject:
        try:
            wire: JsonObject = {
                "max_attempts": self.max_attempts or shapes.UNLIMITED_ATTEMPTS,
                "non_retryable_error_types": list(self.non_retryable_error_types),
                "initial_interval_seconds": to_seconds(self.initial_interval, "initial_interval"),
                "backoff_coefficient": self.backoff_coefficient,
                "maximum_interval_seconds": to_seconds(self.maximum_interval, "maximum_interval"),
            }
            if self.backoff_seconds is not None:
                wire["backoff_seconds"] = [
                    to_seconds(b, "backoff_seconds") for b in self.backoff_seconds
                ]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"invalid RetryPolicy: {exc}") from None
        return wire


def _validated(wire: JsonObject) -> shapes.RetrySpec:
    try:
        return shapes.RetrySpec.model_validate(wire)
    except ValidationError as exc:
        raise ValueError(f"invalid RetryPolicy: {_reasons(exc)}") from None


def _reasons(exc: ValidationError) -> str:
    """The validators' own messages, without pydantic's framing."""
    return "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())


class ActivityCancellationPolicy(StrEnum):
    """What happens to a queued activity when the code awaiting it is cancelled.

    `TRY_CANCEL` (the default) asks the activity to stop (its heartbeat reports the
    cancellation) and raises CancelledError at once; `WAIT_CANCELLATION_COMPLETED` asks and
    raises once the activity has ended; `ABANDON` leaves the activity running and raises at once.
    """

    TRY_CANCEL = "try_cancel"
    WAIT_CANCELLATION_COMPLETED = "wait_cancellation_completed"
    ABANDON = "abandon"


class ActivityOptions(TypedDict, total=False):
    """The keyword options of `workflow.activity()`, spelled once for its typed overloads."""

    queue: str | None
    connection: str | None
    retry_policy: RetryPolicy | None
    start_to_close_timeout: Duration | None
    schedule_to_close_timeout: Duration | None
    schedule_to_start_timeout: Duration | None
    heartbeat_timeout: Duration | None
    cancellation_policy: ActivityCancellationPolicy


def to_seconds(value: Duration, name: str) -> float:
    """Seconds from a timedelta or a real number (not a bool or a string: TypeError naming it)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        raise ValueError(
            f"{name} is out of range: durations are at most {MAX_DURATION_SECONDS} seconds"
            " (100 years)"
        ) from None


def timeout_seconds(owner: str, **timeouts: Duration | None) -> dict[str, float | None]:
    """The timeouts in seconds; ValueError or TypeError naming `owner` and the option."""
    try:
        found = {
            name: None if value is None else to_seconds(value, name)
            for name, value in timeouts.items()
        }
        shapes.check_timeouts(found)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{owner}: {exc}") from None
    return found


def activity_timeouts(activity_type: str, **timeouts: Duration | None) -> dict[str, float | None]:
    """The timeouts in seconds; ValueError naming the call and the option when one is invalid."""
    return timeout_seconds(f"workflow.activity({activity_type!r})", **timeouts)


@dataclass(frozen=True, slots=True)
class LocalActivityOptions:
    """Options of `workflow.local_activity()` (A3); invalid values raise ValueError when built.

    `max_attempts` bounds the attempts (None: as `retry_policy` says; the default policy retries
    without limit, but one local execution reports at most 100 attempts, so it ends there).
    `start_to_close_timeout` bounds each attempt, `schedule_to_close_timeout` all of them with
    their backoffs, `heartbeat_timeout` the silence between two heartbeats. Timeouts must be
    positive, at most 100 years, and `heartbeat <= start_to_close <= schedule_to_close`. A local
    activity has no queue, connection or schedule-to-start timeout: it never waits for a worker.
    """

    max_attempts: int | None = None
    start_to_close_timeout: Duration | None = None
    schedule_to_close_timeout: Duration | None = None
    heartbeat_timeout: Duration | None = None
    retry_policy: RetryPolicy | None = None
    # Validated once here: a workflow usually passes the same options to every step.
    _policy: shapes.RetrySpec = field(init=False, repr=False, compare=False)
    _timeouts: dict[str, float | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(
                f"LocalActivityOptions: max_attempts must be >= 1, got {self.max_attempts}"
            )
        policy_limit = None if self.retry_policy is None else self.retry_policy.max_attempts
        if None not in (self.max_attempts, policy_limit) and self.max_attempts != policy_limit:
            raise ValueError(
                f"LocalActivityOptions: max_attempts={self.max_attempts} contradicts"
                f" retry_policy.max_attempts={policy_limit}; give it once"
            )
        timeouts = timeout_seconds(
            "LocalActivityOptions",
            start_to_close_timeout=self.start_to_close_timeout,
            schedule_to_close_timeout=self.schedule_to_close_timeout,
            heartbeat_timeout=self.heartbeat_timeout,
        )
        wire = (self.retry_policy or RetryPolicy()).to_wire()
        if self.max_attempts is not None:
            wire["max_attempts"] = self.max_attempts
        object.__setattr__(self, "_timeouts", timeouts)
        object.__setattr__(self, "_policy", shapes.RetrySpec.model_validate(wire))

    def timeouts(self) -> dict[str, float | None]:
        """The timeouts in seconds, by their `record_local_activity` names."""
        return dict(self._timeouts)

    def timeout_map(self) -> Mapping[str, float | None]:
        """The timeouts in seconds, read-only and not copied (the engine reads them per step)."""
        return self._timeouts

    def retry_policy_wire(self) -> JsonObject:
        """The retry policy as recorded: the engine default unless given, `max_attempts` in it."""
        return self._policy.to_json()

    def retry_policy_model(self) -> shapes.RetrySpec:
        """The recorded retry policy, validated (an immutable model: shared by every step)."""
        return self._policy
