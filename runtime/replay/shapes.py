"""Wire shapes shared by history events and commands (PROTOCOL.md 7-8).

Every model serialises to exactly the JSON the Durable Workflow catalogue names: a field that is
`None` and marked `Omitted` is left out (the key is absent, not null), every other field is always
written. Timestamps are ISO-8601 text with the offset (`datetime.isoformat()`), as stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from burrow.codec import Payload

JsonDict = dict[str, Any]


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


class RetryPolicy(WireModel):
    """An activity's retry policy as snapped onto the execution when it is scheduled."""

    max_attempts: int | None = Omitted
    non_retryable_error_types: list[str] | None = Omitted
    initial_interval_seconds: float | None = Omitted
    backoff_coefficient: float | None = Omitted
    maximum_interval_seconds: float | None = Omitted
    backoff_seconds: list[float] | None = Omitted


class ActivityOptions(WireModel):
    """What `schedule_activity` carries; ActivityScheduled records it as `activity`."""

    activity_type: str
    queue: str
    arguments: Payload
    retry_policy: RetryPolicy = RetryPolicy()
    start_to_close_timeout: float | None = Omitted
    schedule_to_start_timeout: float | None = Omitted
    schedule_to_close_timeout: float | None = Omitted
    heartbeat_timeout: float | None = Omitted


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
    def of(cls, data: JsonDict) -> Failure:
        """The known failure keys of a mapping (extra diagnostic keys and nulls are ignored)."""
        return cls.model_validate(
            {k: v for k, v in data.items() if k in cls.model_fields and v is not None}
        )
