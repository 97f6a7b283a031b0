"""Failure records both ways: an exception to its typed record, and a record back to errors.

A failure record is what history, a run row or a query/update row keeps of an exception::

    {"exception_type": "CardDeclined", "message": "...", "non_retryable": false,
     "details": {"codec": "avro", "blob": "..."}}          # details omitted when there are none

An ActivityError that reaches a run's end is recorded as a wrapper with the activity's ids and
the activity's own error nested under `cause`::

    {"exception_type": "ActivityError", "message": "...", "non_retryable": false,
     "activity_type": "charge", "activity_execution_id": "...", "attempt_number": 3,
     "cause": {"exception_type": "CardDeclined", "message": "...", "details": {...}}}

The activity's closing history event (ActivityFailed, ActivityTimedOut, ActivityCancelled)
carries the same fields flat; `error_from_failure(payload, event_type=...)` reads that form.

Records are `burrow.protocol.shapes.Failure` from here down to the store call; `record_of()`
gives the JSON a store column keeps. Pure: imports only burrow.errors, burrow.payloads,
burrow.codec, burrow.protocol.shapes and traceback.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence

from burrow import codec, payloads
from burrow.errors import (
    ActivityError,
    ActivityTimedOut,
    ApplicationError,
    ChildWorkflowError,
    PayloadError,
)
from burrow.protocol.shapes import Failure, JsonObject

ACTIVITY_EVENTS = frozenset({"ActivityFailed", "ActivityTimedOut", "ActivityCancelled"})
"""History events that close an activity execution without a result."""

CHILD_WORKFLOW_ERROR = "ChildWorkflowError"
_WRAPPERS: dict[str, type[ActivityError]] = {
    "ActivityError": ActivityError,
    "ActivityTimedOut": ActivityTimedOut,
}


STACK_CHARS = 8000
"""A recorded stack keeps its last this many characters (the innermost frames)."""


def storable(text: str) -> str:
    r"""`text` as the store can keep it: a NUL character becomes the four characters `\x00`.

    Postgres text and jsonb cannot hold NUL. Messages and stacks come from user exceptions, and
    a failure that could not be written would never be recorded (its task retried for ever).
    Converted where the record is built, so a warm instance and a replay read the same text.
    """
    return text.replace("\x00", "\\x00")


def failure_of(exc: BaseException) -> Failure:
    """The recorded shape of an exception (type, message, non_retryable, details, cause)."""
    if isinstance(exc, ChildWorkflowError):
        return _child_failure(exc)
    if isinstance(exc, ActivityError):
        return _activity_failure(exc)
    if isinstance(exc, ApplicationError):
        return _application_failure(exc)
    return Failure(
        exception_type=type(exc).__name__, message=storable(str(exc)), non_retryable=False
    )


def failure_with_stack(exc: BaseException, *, non_retryable: bool = False) -> Failure:
    """An unexpected exception's record: type, message and the end of its stack."""
    return Failure(
        exception_type=type(exc).__name__,
        message=storable(str(exc)),
        stack=stack_of(exc),
        non_retryable=non_retryable,
    )


def stack_of(exc: BaseException) -> str:
    """The end of an exception's formatted stack, as a record keeps it."""
    return storable("".join(traceback.format_exception(exc))[-STACK_CHARS:])


def record_of(failure: Failure) -> JsonObject:
    """The JSON a store column keeps: exactly the keys the record's builder set.

    A record built from some keys only (a shutdown's type and message) is stored with those
    keys only, as it always was; omitted fields left unset are not written as defaults.
    """
    return failure.model_dump(mode="json", exclude_unset=True)


def _application_failure(exc: ApplicationError) -> Failure:
    return Failure(
        exception_type=storable(exc.type),
        message=storable(exc.message),
        non_retryable=exc.non_retryable,
        details=_encode_details(exc.details),  # None is left out of the record
    )


def _activity_failure(exc: ActivityError) -> Failure:
    cause = exc.__cause__
    if not isinstance(cause, ApplicationError):
        # Built by hand in workflow code: its own type, message and details are the activity's.
        cause = ApplicationError(
            exc.message, *exc.details, type=exc.type, non_retryable=exc.non_retryable
        )
    return Failure(
        exception_type="ActivityTimedOut" if isinstance(exc, ActivityTimedOut) else "ActivityError",
        message=storable(exc.message),
        non_retryable=exc.non_retryable,
        activity_type=exc.activity_type,
        activity_execution_id=exc.activity_execution_id,
        attempt_number=exc.attempt_number,
        cause=record_of(_application_failure(cause)),
    )


def _child_failure(exc: ChildWorkflowError) -> Failure:
    cause = exc.__cause__
    return Failure(
        exception_type=CHILD_WORKFLOW_ERROR,
        message=storable(exc.message),
        non_retryable=exc.non_retryable,
        cause=None if cause is None else record_of(failure_of(cause)),
    )


def _encode_details(details: Sequence[object]) -> codec.Payload | None:
    if not details:
        return None
    try:
        return payloads.encode_value(details, what="failure details")
    except Exception:  # unencodable details must not hide the failure itself
        return None


def error_from_failure(
    failure: Failure | Mapping[str, object], *, event_type: str | None = None
) -> ApplicationError:
    """Rebuild the typed exception a failure record describes.

    Args:
        failure: A failure record (see the module docstring), typed or as JSON read back, or
            the payload of an activity's closing history event when `event_type` names it.
        event_type: ActivityFailed, ActivityTimedOut or ActivityCancelled for an event payload.

    Returns:
        An ActivityError (ActivityTimedOut for timeouts) chained to the activity's
        ApplicationError, or an ApplicationError with decoded details.
    """
    record = record_of(failure) if isinstance(failure, Failure) else failure
    if event_type in ACTIVITY_EVENTS:
        fallback = f"activity {record.get('activity_type')} {event_type}"
        return _activity_error(
            ActivityTimedOut if event_type == "ActivityTimedOut" else ActivityError,
            record,
            _application_error(record, default_type=event_type, default_message=fallback),
        )
    cause = record.get("cause")
    if record.get("exception_type") == CHILD_WORKFLOW_ERROR:
        child = ChildWorkflowError(
            str(record.get("message") or ""), non_retryable=bool(record.get("non_retryable"))
        )
        if isinstance(cause, Mapping):
            child.__cause__ = error_from_failure(cause)
        return child
    wrapper = _WRAPPERS.get(str(record.get("exception_type")))
    if wrapper is not None and isinstance(cause, Mapping):
        return _activity_error(wrapper, record, _application_error(cause))
    return _application_error(record)


def _application_error(
    failure: Mapping[str, object],
    *,
    default_type: str = "ApplicationError",
    default_message: str = "",
) -> ApplicationError:
    return ApplicationError(
        str(failure.get("message") or default_message),
        *_decode_details(failure.get("details")),
        type=str(failure.get("exception_type") or default_type),
        non_retryable=bool(failure.get("non_retryable")),
    )


def _activity_error(
    wrapper: type[ActivityError], failure: Mapping[str, object], cause: ApplicationError
) -> ActivityError:
    error = wrapper(
        cause.message,
        *cause.details,
        type=cause.type,
        non_retryable=cause.non_retryable,
        activity_type=str(failure.get("activity_type") or ""),
        activity_execution_id=str(failure.get("activity_execution_id") or ""),
        attempt_number=_number(failure.get("attempt_number")),
    )
    error.__cause__ = cause
    return error


def _number(value: object) -> int:
    """An attempt number as recorded (int, or its text in hand-written history); 0 if absent."""
    if isinstance(value, int | float | str) and value:
        return int(value)
    return 0


def _decode_details(details: object) -> list[object]:
    if not isinstance(details, Mapping):
        return []
    try:
        decoded = payloads.decode_value(details)
    except PayloadError:  # undecodable details must not hide the failure itself
        return []
    return list(decoded) if isinstance(decoded, list) else [decoded]
