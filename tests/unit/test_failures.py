"""Failure records both ways: failure_of() and error_from_failure() rebuild the typed chain."""

from __future__ import annotations

from burrow import payloads
from burrow.errors import ActivityError, ActivityTimedOut, ApplicationError
from burrow.failures import error_from_failure, failure_of, failure_with_stack, record_of
from burrow.protocol.shapes import Failure


def test_application_error_round_trips_with_details() -> None:
    original = ApplicationError(
        "declined", {"code": 51}, 7, type="CardDeclined", non_retryable=True
    )
    failure = failure_of(original)
    record = record_of(failure)
    assert record["exception_type"] == "CardDeclined"
    assert isinstance(record["details"], dict)
    assert set(record["details"]) == {"codec", "blob"}
    rebuilt = error_from_failure(failure)
    assert type(rebuilt) is ApplicationError
    assert (rebuilt.type, rebuilt.message, rebuilt.details, rebuilt.non_retryable) == (
        "CardDeclined",
        "declined",
        [{"code": 51}, 7],
        True,
    )


def test_a_record_without_details_omits_the_key() -> None:
    assert record_of(failure_of(ApplicationError("x"))) == {
        "exception_type": "ApplicationError",
        "message": "x",
        "non_retryable": False,
    }


def test_other_exceptions_are_recorded_by_class_name() -> None:
    assert record_of(failure_of(KeyError("k"))) == {
        "exception_type": "KeyError",
        "message": "'k'",
        "non_retryable": False,
    }


def test_an_activity_failed_event_becomes_activity_error_chained_to_its_cause() -> None:
    payload = {
        "sequence": 1,
        "activity_type": "charge",
        "activity_execution_id": "exec-1",
        "attempt_number": 3,
        "exception_type": "CardDeclined",
        "message": "declined",
        "non_retryable": True,
        "details": payloads.encode_value([{"code": 51}], what="details"),
    }
    error = error_from_failure(payload, event_type="ActivityFailed")
    assert type(error) is ActivityError
    assert (error.activity_type, error.activity_execution_id, error.attempt_number) == (
        "charge",
        "exec-1",
        3,
    )
    assert (error.type, error.details) == ("CardDeclined", [{"code": 51}])
    cause = error.cause
    assert type(cause) is ApplicationError and cause is error.__cause__
    assert (cause.type, cause.message, cause.details, cause.non_retryable) == (
        "CardDeclined",
        "declined",
        [{"code": 51}],
        True,
    )


def test_a_timeout_event_without_a_message_names_the_activity() -> None:
    error = error_from_failure(
        {"activity_type": "charge", "timeout_kind": "heartbeat"}, event_type="ActivityTimedOut"
    )
    assert type(error) is ActivityTimedOut
    assert (error.type, error.message) == ("ActivityTimedOut", "activity charge ActivityTimedOut")


def test_an_activity_error_record_nests_its_cause_and_round_trips() -> None:
    event = {
        "activity_type": "charge",
        "activity_execution_id": "exec-1",
        "attempt_number": 2,
        "exception_type": "CardDeclined",
        "message": "declined",
        "details": payloads.encode_value(["why"], what="details"),
    }
    record = record_of(failure_of(error_from_failure(event, event_type="ActivityFailed")))
    assert record["exception_type"] == "ActivityError"
    assert record["activity_type"] == "charge"
    cause = record["cause"]
    assert isinstance(cause, dict)
    assert cause["exception_type"] == "CardDeclined"
    assert "details" not in record and "details" in cause
    rebuilt = error_from_failure(record)
    assert type(rebuilt) is ActivityError
    assert (rebuilt.attempt_number, rebuilt.type, rebuilt.details) == (2, "CardDeclined", ["why"])
    assert isinstance(rebuilt.cause, ApplicationError)
    assert rebuilt.cause.details == ["why"]


def test_undecodable_details_do_not_hide_the_failure() -> None:
    record = {"exception_type": "X", "message": "m", "details": {"codec": "avro", "blob": "!!"}}
    rebuilt = error_from_failure(record)
    assert (rebuilt.type, rebuilt.message, rebuilt.details) == ("X", "m", [])


def test_a_stack_record_keeps_the_keys_it_always_stored() -> None:
    try:
        raise ValueError("bad")
    except ValueError as exc:
        record = record_of(failure_with_stack(exc, non_retryable=True))
    assert set(record) == {"exception_type", "message", "stack", "non_retryable"}
    assert (record["exception_type"], record["message"], record["non_retryable"]) == (
        "ValueError",
        "bad",
        True,
    )


def test_a_record_built_from_some_keys_stores_only_those() -> None:
    assert record_of(Failure(exception_type="WorkerShutdown", message="stopped")) == {
        "exception_type": "WorkerShutdown",
        "message": "stopped",
    }


def test_a_workflow_task_failure_stores_its_record_and_stack() -> None:
    from burrow.worker.workflow_tasks import _task_failure

    try:
        raise ApplicationError("boom", "why", type="Broken")
    except ApplicationError as exc:
        record = record_of(_task_failure(exc))
    assert set(record) == {"exception_type", "message", "non_retryable", "details", "stack"}
    assert (record["exception_type"], record["message"]) == ("Broken", "boom")
    assert isinstance(record["stack"], str) and "ApplicationError" in record["stack"]


def test_a_mark_added_to_a_record_is_stored_with_it() -> None:
    failure = Failure(exception_type="TimeoutError", message="")
    marked = failure.model_copy(update={"timeout_kind": "start_to_close"})
    assert record_of(marked) == {
        "exception_type": "TimeoutError",
        "message": "",
        "timeout_kind": "start_to_close",
    }
