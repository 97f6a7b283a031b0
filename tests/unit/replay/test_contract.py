"""The typed contract between replay and the store: events and commands (PROTOCOL.md 7-8)."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.shapes import (
    ActivitySpec,
    ExceptionInfo,
    Failure,
    LocalActivitySpec,
    RetrySpec,
)
from burrow.store.sql import jsonb_object

ROOT = Path(__file__).resolve().parents[3]
HISTORIES = Path(__file__).with_name("histories")
AT = datetime(2026, 11, 30, 6, 25, 31, 944473, tzinfo=UTC)
ARGS = {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgZhZGEA"}
ATTEMPT: dict[str, Any] = {
    "activity_execution_id": "run:1",
    "activity_attempt_id": "a1",
    "activity_type": "charge",
    "sequence": 1,
    "attempt_number": 2,
}
FAILED: dict[str, Any] = {
    **ATTEMPT,
    "exception_type": "CardDeclined",
    "message": "declined",
    "non_retryable": True,
    "details": ARGS,
    "exception": ExceptionInfo(stack="Traceback ..."),
}
RUN = {"workflow_instance_id": "order-1", "workflow_run_id": "run"}
CHILD = {
    "sequence": 6,
    "child_workflow_instance_id": "child-1",
    "child_workflow_run_id": "child-run",
    "child_workflow_type": "Ship",
    "parent_close_policy": "terminate",
    "cancellation_policy": "try_cancel",
}

# PROTOCOL.md 8.2: the Durable Workflow event catalogue.
CATALOGUE = set(
    [
        "StartAccepted",
        "StartRejected",
        "WorkflowStarted",
        "WorkflowContinuedAsNew",
        "ChildWorkflowScheduled",
        "ChildRunStarted",
        "ChildRunCompleted",
        "ChildRunFailed",
        "ChildRunCancelled",
        "ChildRunTerminated",
        "ServiceCallStarted",
        "ServiceCallCompleted",
        "ServiceCallFailed",
        "ServiceCallCancelled",
        "ConditionWaitOpened",
        "ConditionWaitSatisfied",
        "ConditionWaitTimedOut",
        "SignalWaitOpened",
        "SignalReceived",
        "SignalApplied",
        "UpdateAccepted",
        "UpdateRejected",
        "UpdateApplied",
        "UpdateCompleted",
        "RepairRequested",
        "CancelRequested",
        "WorkflowCancelled",
        "TerminateRequested",
        "WorkflowTerminated",
        "ArchiveRequested",
        "WorkflowArchived",
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityHeartbeatRecorded",
        "ActivityRetryScheduled",
        "ActivityCompleted",
        "ActivityFailed",
        "ActivityCancelled",
        "ActivityTimedOut",
        "FailureHandled",
        "SideEffectRecorded",
        "VersionMarkerRecorded",
        "TimerScheduled",
        "TimerFired",
        "TimerCancelled",
        "SearchAttributesUpserted",
        "MemoUpserted",
        "WorkflowTimedOut",
        "WorkflowCompleted",
        "WorkflowFailed",
        "ParentClosePolicyApplied",
        "ParentClosePolicyFailed",
        "MessageCursorAdvanced",
    ]
)
# Burrow's additions to the event catalogue (events.py, cancellation_events.py docstrings).
BURROW_EVENTS = {
    "SignalSkipped",
    "ChildSignalled",
    "ChildCancelRequested",
    "SelectionGroupOpened",
    # Catalogue events of the SDK's durable select (PROTOCOL.md 8.2, newer SDKs).
    "SelectionResolved",
    "SelectionOperationCancelled",
    "ActivityCancelRequested",
    # control_events.py: a redrive recorded on the failed run it continued.
    "RedriveRequested",
}
# Protocol 1.20 events the newer SDK consumes (PROTOCOL.md 8.2).
PROTOCOL_1_20_EVENTS = {"CooperativeCancellationRequested", "CooperativeCancellationDelivered"}
# PROTOCOL.md 7 plus Burrow's additions (commands.py docstring).
COMMAND_TYPES = {
    "schedule_activity",
    "record_local_activity",
    "start_timer",
    "record_side_effect",
    "record_version_marker",
    "upsert_memo",
    "upsert_search_attributes",
    "complete_update",
    "fail_update",
    "complete_workflow",
    "fail_workflow",
    "continue_as_new",
    "start_child_workflow",
    "open_condition_wait",
} | {
    "cancel_timer",
    "cancel_workflow",
    "skip_signal",
    "signal_child_workflow",
    "cancel_child_workflow",
    "cancel_activity",
    "satisfy_condition_wait",
    "open_selection",
    "cancel_selection_operation",
}

EVENT_SAMPLES: list[ev.Event] = [
    ev.WorkflowStarted(workflow_type="Checkout", **RUN, continued_from_run_id=None),
    ev.WorkflowCompleted(output=ARGS["blob"], payload_codec="avro"),
    ev.WorkflowFailed(
        exception_type="Boom",
        message="boom",
        exception=ExceptionInfo(details=ARGS, cause={"message": "inner"}),
    ),
    ev.WorkflowCancelled(**RUN, message="workflow cancelled"),
    ev.WorkflowTerminated(**RUN, reason="operator"),
    ev.WorkflowContinuedAsNew(continued_to_run_id="run-2"),
    ev.CancelRequested(**RUN, reason="no longer needed"),
    ev.ActivityScheduled(
        activity_execution_id="run:1",
        activity_type="charge",
        sequence=1,
        workflow_task_id="task",
        activity=ActivitySpec(
            activity_type="charge",
            queue="shop",
            arguments=ARGS,
            retry_policy=RetrySpec(max_attempts=5, backoff_seconds=[1.0]),
            start_to_close_timeout=10.0,
        ),
    ),
    ev.ActivityScheduled(  # A3: a local execution's snapshot names its in-process routing
        activity_execution_id="run:5",
        activity_type="charge",
        sequence=5,
        execution_mode="local",
        local_activity=True,
        workflow_task_id="task",
        activity=LocalActivitySpec(activity_type="charge", arguments=ARGS),
    ),
    ev.ActivityStarted(**ATTEMPT, lease_expires_at=AT),
    ev.ActivityStarted(**ATTEMPT, execution_mode="local", local_activity=True),
    ev.ActivityHeartbeatRecorded(
        **ATTEMPT,
        workflow_task_id="task",
        activity_attempt=ev.AttemptSummary(
            attempt_id="a1", attempt_number=2, outcome="completed", duration_ms=40
        ),
        elapsed_ms=20,
        progress=ARGS,
    ),
    ev.ActivityCompleted(**ATTEMPT, result=ARGS["blob"], payload_codec="avro"),
    ev.ActivityFailed(**FAILED),
    ev.ActivityTimedOut(
        **ATTEMPT,
        exception_type="ActivityTimedOut",
        message="timed out",
        failure_category="timeout",
        timeout_kind="start_to_close",
    ),
    ev.ActivityRetryScheduled(
        **FAILED,
        retry_available_at=AT,
        retry_backoff_seconds=1.5,
        retry_after_attempt=2,
        retry_reason="failure",
        max_attempts=5,
    ),
    ev.ActivityCancelled(**ATTEMPT, cancelled_at=AT, message=None),
    ev.TimerScheduled(timer_id="run:2", sequence=2, delay_seconds=1.5, fire_at=AT),
    ev.TimerFired(timer_id="run:2", sequence=2, delay_seconds=1.5, fired_at=AT),
    ev.TimerCancelled(timer_id="run:2", sequence=2, delay_seconds=1.5, cancelled_at=AT),
    ev.ConditionWaitOpened(
        condition_wait_id="run:5", sequence=5, condition_key="ready", timeout_seconds=30
    ),
    ev.ConditionWaitSatisfied(
        condition_wait_id="run:5",
        sequence=5,
        condition_key="ready",
        timeout_seconds=30,
        timer_id="run:5",
        workflow_signal_id="s1",
        signal_name="approve",
    ),
    ev.ConditionWaitTimedOut(condition_wait_id="run:5", sequence=5, timer_id="run:5"),
    ev.SelectionGroupOpened(
        selection_group_id="select-calls:6:2",
        parallel_group_kind="mixed",
        base_sequence=6,
        size=2,
        members=[{"key": "fast", "index": 0, "base_sequence": 6, "size": 1, "kind": "timer"}],
    ),
    ev.SelectionResolved(
        selection_group_id="select-calls:6:2",
        selection_group_base_sequence=6,
        selection_group_size=2,
        member_key="fast",
        member_index=0,
        member_base_sequence=6,
        member_size=1,
        operation_kind="timer",
        operation_identity="run:6",
        outcome="completed",
        resolution_event_id="run:9",
        resolution_event_type="TimerFired",
    ),
    ev.SelectionOperationCancelled(
        selection_group_id="select-calls:6:2",
        member_key=1,
        member_index=1,
        member_base_sequence=7,
        member_size=1,
        operation_kind="activity",
        operation_identity="run:7",
    ),
    ev.SideEffectRecorded(sequence=3, result=ARGS["blob"], payload_codec="avro"),
    ev.VersionMarkerRecorded(
        sequence=4, change_id="greet-twice", version=2, min_supported=1, max_supported=2
    ),
    ev.MemoUpserted(sequence=5, entries=ARGS, merged=ARGS),
    ev.SearchAttributesUpserted(
        sequence=6,
        attributes={"CustomerId": "c-17", "Tags": None},
        merged={"CustomerId": "c-17"},
        attribute_types={"CustomerId": "keyword", "Tags": "keyword_list"},
    ),
    ev.SignalReceived(signal_id="s1", signal_name="approve", **RUN, arguments=ARGS),
    ev.SignalSkipped(signal_id="s2", signal_name="approve", reason="takes 0 argument(s)"),
    ev.UpdateAccepted(update_id="u1", update_name="rename", **RUN, arguments=ARGS),
    ev.UpdateApplied(update_id="u1", update_name="rename", **RUN, arguments=ARGS),
    ev.UpdateCompleted(
        update_id="u1", workflow_run_id="run", result=ARGS["blob"], payload_codec="avro"
    ),
    ev.ChildWorkflowScheduled(
        **CHILD,
        retry_policy=RetrySpec(max_attempts=2),
        timeout_policy=ev.TimeoutPolicy(execution_timeout_seconds=60, run_timeout_seconds=30),
    ),
    ev.ChildRunStarted(**CHILD),
    ev.ChildRunCompleted(
        **CHILD,
        child_status="completed",
        closed_reason="completed",
        closed_at=AT,
        output=ARGS["blob"],
        payload_codec="avro",
    ),
    ev.ChildRunFailed(
        **CHILD,
        child_status="failed",
        closed_reason="failed",
        exception_type="Boom",
        message="boom",
        exception=ExceptionInfo(stack="..."),
    ),
    ev.ChildRunCancelled(**CHILD, child_status="cancelled", closed_reason="cancelled"),
    ev.ChildRunTerminated(
        **CHILD, child_status="terminated", closed_reason="terminated", message="operator"
    ),
    ev.ChildSignalled(
        sequence=7,
        child_sequence=6,
        child_workflow_instance_id="child-1",
        signal_name="approve",
        signal_id="run:7",
        delivered=True,
    ),
    ev.ChildCancelRequested(sequence=6, child_workflow_instance_id="child-1", delivered=True),
    ev.WorkflowTimedOut(timeout_kind="run", message="run timed out", run_deadline_at=AT),
    ev.CooperativeCancellationRequested(
        workflow_command_id="req-1",
        **RUN,
        requested_at=AT,
        cleanup_deadline_at=AT,
        cleanup_timeout_seconds=60,
        reason="customer left",
    ),
    ev.CooperativeCancellationDelivered(
        workflow_command_id="req-1", **RUN, sequence=2, call_kind="activity"
    ),
    ev.ActivityCancelRequested(sequence=2, activity_execution_id="run:2"),
    ev.RepairRequested(
        workflow_command_id="c1",
        workflow_instance_id="wf",
        workflow_run_id="run",
        outcome="repair_dispatched",
        task_id="t1",
        task_type="workflow",
    ),
    ev.ArchiveRequested(
        workflow_command_id="c2",
        workflow_instance_id="wf",
        workflow_run_id="run",
        outcome="archived",
        reason="retention",
        request_id="r1",
    ),
    ev.WorkflowArchived(
        workflow_command_id="c2",
        workflow_instance_id="wf",
        workflow_run_id="run",
        archive_command_id="c2",
    ),
    ev.RedriveRequested(
        workflow_command_id="c3",
        workflow_instance_id="wf",
        workflow_run_id="run",
        continued_to_run_id="run-2",
        resume_step_sequence=2,
    ),
]

COMMAND_SAMPLES: list[cmd.Command] = [
    cmd.ScheduleActivity(
        activity_type="charge",
        queue="shop",
        arguments=ARGS,
        retry_policy=RetrySpec(max_attempts=3, non_retryable_error_types=["Fatal"]),
        heartbeat_timeout=5.0,
    ),
    cmd.RecordLocalActivity(
        activity_type="charge",
        arguments=ARGS,
        outcome="completed",
        result=ARGS,
        attempts=[
            cmd.LocalAttempt(
                attempt_id="a1",
                attempt_number=1,
                outcome="failed",
                duration_ms=3,
                message="boom",
                exception_type="RuntimeError",
                retry_reason="failure",
                backoff_seconds=1.0,
            ),
            cmd.LocalAttempt(
                attempt_id="a2",
                attempt_number=2,
                outcome="completed",
                duration_ms=5,
                heartbeats=[cmd.LocalHeartbeat(elapsed_ms=2, details=ARGS)],
            ),
        ],
        retry_policy=RetrySpec(max_attempts=3),
        start_to_close_timeout=10.0,
    ),
    cmd.StartTimer(delay_seconds=2.5),
    cmd.CancelTimer(sequence=2),
    cmd.OpenConditionWait(
        condition_key="ready", condition_definition_fingerprint="sha256:ab", timeout_seconds=30
    ),
    cmd.SatisfyConditionWait(sequence=2, condition_key="ready", signal_name="approve"),
    cmd.OpenSelection(
        selection_group_id="select-calls:1:2",
        group_kind="timer",
        base_sequence=1,
        size=2,
        members=[{"key": 0, "index": 0, "base_sequence": 1, "size": 1, "kind": "timer"}],
    ),
    cmd.CancelSelectionOperation(
        selection_group_id="select-calls:1:2",
        member_key=0,
        member_index=0,
        member_base_sequence=1,
        member_size=1,
        operation_kind="timer",
        operation_identity="run:1",
    ),
    cmd.RecordSideEffect(result=ARGS["blob"]),
    cmd.RecordVersionMarker(change_id="c", version=2, min_supported=1, max_supported=2),
    cmd.UpsertMemo(entries=ARGS),
    cmd.UpsertSearchAttributes(attributes={"CustomerId": "c-17", "Tags": ["a", "b"], "Gone": None}),
    cmd.CompleteUpdate(update_id="u1", result=ARGS),
    cmd.FailUpdate(update_id="u1", message="bad", exception_type="ValueError"),
    cmd.SkipSignal(signal_id="s2", signal_name="approve", reason="no signal handler"),
    cmd.CompleteWorkflow(result=ARGS),
    cmd.FailWorkflow(message="boom", exception_type="Boom", exception=ExceptionInfo(stack="...")),
    cmd.CancelWorkflow(message="workflow cancelled"),
    cmd.ContinueAsNew(arguments=ARGS, workflow_type="Checkout", queue="shop"),
    cmd.StartChildWorkflow(
        workflow_type="Ship",
        queue="shop",
        arguments=ARGS,
        workflow_id="order-1-ship",
        parent_close_policy="request_cancel",
        cancellation_policy="try_cancel",
        retry_policy=RetrySpec(max_attempts=2),
        execution_timeout_seconds=60,
        run_timeout_seconds=30,
    ),
    cmd.SignalChildWorkflow(child_sequence=6, signal_name="approve", arguments=ARGS),
    cmd.CancelChildWorkflow(sequence=6),
    cmd.CancelActivity(sequence=2, wait=True),
]


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("event", EVENT_SAMPLES, ids=lambda e: e.event_type)
def test_event_round_trips_through_its_stored_json(event: ev.Event) -> None:
    stored = json.loads(_text(event.to_json()))  # what JSONB gives back
    parsed = ev.parse(event.event_type, stored)
    assert parsed == event
    assert _text(parsed.to_json()) == _text(stored)


@pytest.mark.parametrize("command", COMMAND_SAMPLES, ids=lambda c: c.type)
def test_command_round_trips_through_its_wire_json(command: cmd.Command) -> None:
    wire = json.loads(_text(command.to_json()))
    assert wire["type"] == command.type
    assert "seq" not in wire
    if isinstance(command, cmd.STEP_COMMANDS):
        assert "sequence" not in wire  # the store numbers steps (PROTOCOL.md 8.3)
    assert cmd.parse_command(wire) == command
    assert _text(cmd.parse_command(wire).to_json()) == _text(wire)


def test_every_event_and_command_type_has_a_round_trip_sample() -> None:
    assert {e.event_type for e in EVENT_SAMPLES} == set(ev.EVENT_TYPES)
    assert {c.type for c in COMMAND_SAMPLES} == COMMAND_TYPES


def test_every_event_type_is_a_catalogue_name() -> None:
    assert set(ev.EVENT_TYPES) <= CATALOGUE | BURROW_EVENTS | PROTOCOL_1_20_EVENTS
    assert all(name == model.event_type for name, model in ev.EVENT_TYPES.items())


def _referenced_event_models(folder: str) -> set[str]:
    found: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "events"
                and node.attr[:1].isupper()
            ):
                found.add(node.attr)
    return found


def test_every_event_the_store_emits_is_a_modelled_type() -> None:
    """The store names events only through the models, and each one is in EVENT_TYPES."""
    emitted = _referenced_event_models("store")
    assert emitted, "the store builds its events from burrow.protocol.events"
    assert emitted <= set(ev.EVENT_TYPES) | {"HistoryEvent", "Event", "ChildClosed"}


def test_step_commands_keep_their_step_number_out_of_the_wire_form() -> None:
    timer = cmd.StartTimer(seq=3, delay_seconds=1.0)
    assert timer.to_json() == {"type": "start_timer", "delay_seconds": 1.0}
    assert cmd.parse_command({"type": "start_timer", "sequence": 3, "delay_seconds": 1}) == timer


def test_side_effect_given_as_an_envelope_is_recorded_as_blob_and_codec() -> None:
    parsed = cmd.parse_command({"type": "record_side_effect", "result": ARGS})
    assert parsed == cmd.RecordSideEffect(result=ARGS["blob"], codec="avro")


def test_fail_workflow_nests_details_stack_and_cause_and_flattens_back() -> None:
    failure = Failure(
        exception_type="Boom", message="boom", details=ARGS, stack="tb", cause={"message": "x"}
    )
    command = cmd.FailWorkflow.of(failure)
    assert command.to_json()["exception"] == {
        "details": ARGS,
        "stack": "tb",
        "cause": {"message": "x"},
    }
    assert command.failure() == failure


@pytest.mark.parametrize(
    ("event_type", "payload"),
    [
        ("LaunchMissiles", {}),
        ("TimerFired", {"timer_id": "t", "sequence": "two", "delay_seconds": 1, "fired_at": "x"}),
        ("SideEffectRecorded", {"sequence": 1, "result": "b", "payload_codec": "avro", "x": 1}),
    ],
    ids=["unknown-type", "wrong-field-type", "unknown-key"],
)
def test_unknown_or_malformed_stored_event_raises_history_error(
    event_type: str, payload: dict[str, Any]
) -> None:
    with pytest.raises(ev.HistoryError, match=event_type):
        ev.parse(event_type, payload)


@pytest.mark.parametrize(
    "wire",
    [
        {"type": "launch_missiles"},
        {"type": "start_timer"},
        {"type": "complete_workflow", "result": "not an envelope"},
        {
            "type": "schedule_activity",
            "activity_type": "a",
            "queue": "q",
            "arguments": ARGS,
            "x": 1,
        },
    ],
    ids=["unknown-type", "missing-field", "wrong-shape", "unknown-key"],
)
def test_malformed_command_raises_invalid_command(wire: dict[str, Any]) -> None:
    with pytest.raises(cmd.InvalidCommand):
        cmd.parse_command(wire)


@pytest.mark.parametrize("name", ["order_flow", "countdown", "demo_order"])
def test_golden_history_payloads_parse_and_serialise_byte_identical(name: str) -> None:
    doc = json.loads((HISTORIES / f"{name}.json").read_text())
    for record in doc["events"]:
        event = ev.parse(record["event_type"], record["payload"])
        assert _text(event.to_json()) == _text(record["payload"]), record["event_type"]


def test_sql_built_event_objects_name_exactly_the_models_fields() -> None:
    sql = jsonb_object(ev.SideEffectRecorded, sequence="s", result="r", payload_codec="c")
    assert sql == "jsonb_build_object('sequence', s, 'result', r, 'payload_codec', c)"
    with pytest.raises(TypeError, match="missing"):
        jsonb_object(ev.SideEffectRecorded, sequence="s", result="r")
    with pytest.raises(TypeError, match="unknown"):
        jsonb_object(ev.SideEffectRecorded, sequence="s", result="r", payload_codec="c", x="1")
