"""Local activities in the replay engine (A3, D1, D3): the command, its events, live and replay.

A small in-memory recorder stands in for the store's numbering (the integration and acceptance
tests use the real one): it turns each activation's commands into the events the store writes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from burrow import ActivityError, App, RetryPolicy, activity, codec, workflow
from burrow.errors import NondeterminismError
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import (
    LocalActivityRequest,
    ReplayStateError,
    RunContext,
    WorkflowInstance,
    activations,
    is_input,
)
from burrow.workflow import LocalActivityOptions

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ARGS = dict(codec.encode([1]))
RUN_ID = str(uuid.UUID(int=7))


@activity.defn
async def charge(cents: int) -> str:
    return f"charged {cents}"


@activity.defn
async def refund(cents: int) -> str:
    return f"refunded {cents}"


@workflow.defn
class Checkout:
    """A local activity gathered with a queued one, then another local one."""

    @workflow.run
    async def run(self, cents: int) -> list[str]:
        both = await asyncio.gather(
            workflow.local_activity(charge, cents),
            workflow.activity(refund, cents),
        )
        after = await workflow.local_activity(
            charge, cents + 1, options=LocalActivityOptions(start_to_close_timeout=5)
        )
        return [*both, after]


@workflow.defn(name="Checkout")
class CheckoutAllQueued:
    """Checkout after an unguarded change: the first local activity became a queued one."""

    @workflow.run
    async def run(self, cents: int) -> list[str]:
        both = await asyncio.gather(workflow.activity(charge, cents), workflow.activity(refund, 1))
        return list(both)


@workflow.defn(name="Checkout")
class CheckoutRefundsFirst:
    """Checkout after an unguarded change: the first local activity is another type."""

    @workflow.run
    async def run(self, cents: int) -> str:
        return await workflow.local_activity(refund, cents)


@workflow.defn
class Guarded:
    """Catches a failed local activity; a cancelled one lets the run's cancellation through."""

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.local_activity(charge, 1)
        except ActivityError as exc:
            return f"failed: {exc.type}"
        return "ok"


@workflow.defn
class Abandons:
    """Starts a local activity in the background and returns without awaiting it."""

    @workflow.run
    async def run(self) -> str:
        asyncio.get_running_loop().create_task(workflow.local_activity(charge, 1))
        return "done"


APP = App(task_queue="q", workflows=[Checkout, Guarded, Abandons], activities=[charge, refund])


def _instance(name: str, app: App = APP) -> WorkflowInstance:
    run = RunContext(
        run_id=RUN_ID,
        workflow_id="wf",
        workflow_type=name,
        namespace="default",
        task_queue="q",
        input=dict(codec.encode([10] if name == "Checkout" else [])),
    )
    return WorkflowInstance(
        definition=app.workflows[name], run=run, known_activities=app.activities.keys()
    )


class Recorder:
    """Numbers events and steps like the store, one workflow task per activation."""

    def __init__(self) -> None:
        self.history: list[HistoryEvent] = []
        self.steps = 0
        self.tasks = 0

    def _append(self, event: ev.Event, task: str) -> None:
        seq = len(self.history) + 1
        self.history.append(HistoryEvent(RUN_ID, seq, event, AT, task))

    def task(self, inputs: list[ev.Event], commands: list[cmd.Command]) -> None:
        self.tasks += 1
        task = f"task-{self.tasks}"
        for event in inputs:
            self._append(event, task)
        for command in commands:
            if isinstance(command, cmd.STEP_COMMANDS):
                self.steps += 1
            step = self.steps
            match command:
                case cmd.RecordLocalActivity():
                    for event, _ in ev.local_activity_events(
                        command, run_id=RUN_ID, step=step, workflow_task_id=task, now=AT
                    ):
                        self._append(event, task)
                case cmd.ScheduleActivity():
                    self._append(
                        ev.ActivityScheduled(
                            activity_execution_id=f"{RUN_ID}:{step}",
                            activity_type=command.activity_type,
                            sequence=step,
                            workflow_task_id=task,
                            activity=command,
                        ),
                        task,
                    )
                case cmd.CompleteWorkflow():
                    result = command.result
                    done = ev.WorkflowCompleted(
                        output=result["blob"], payload_codec=result["codec"]
                    )
                    self._append(done, task)
                case cmd.CancelWorkflow():
                    self._append(
                        ev.WorkflowCancelled(
                            workflow_instance_id="wf", workflow_run_id=RUN_ID, message="cancelled"
                        ),
                        task,
                    )
                case cmd.FailWorkflow():
                    failure = command.failure()
                    self._append(
                        ev.WorkflowFailed(
                            exception_type=failure.exception_type, message=failure.message
                        ),
                        task,
                    )


Runner = Callable[[LocalActivityRequest], cmd.RecordLocalActivity]


def _completed(request: LocalActivityRequest) -> cmd.RecordLocalActivity:
    cents = codec.decode(request.options.arguments)[0]
    value = dict(codec.encode(f"charged {cents}"))
    attempt = cmd.LocalAttempt(
        attempt_id=str(uuid.uuid4()), attempt_number=1, outcome="completed", duration_ms=1
    )
    return request.record(outcome="completed", result=value, attempts=[attempt])


def _live(
    instance: WorkflowInstance, events: list[HistoryEvent], runner: Runner
) -> tuple[list[cmd.Command], list[LocalActivityRequest]]:
    """One live activation: every local activity it asks for is run by `runner`."""
    asked: list[LocalActivityRequest] = []
    activation = instance.activate(events)
    while activation.local_activities:
        asked.extend(activation.local_activities)
        activation = instance.resolve_local_activities(
            [runner(request) for request in activation.local_activities]
        )
    assert activation.failure is None, activation.failure
    return activation.commands, asked


def _started() -> ev.WorkflowStarted:
    return ev.WorkflowStarted(
        workflow_type="Checkout", workflow_instance_id="wf", workflow_run_id=RUN_ID
    )


def _record_checkout() -> Recorder:
    """Checkout run live against the recorder: task 1 starts it, task 2 gets the refund."""
    recorder = Recorder()
    live = _instance("Checkout")
    recorder.task([_started()], [])
    commands, asked = _live(live, recorder.history, _completed)
    recorder.history.clear()
    recorder.tasks = 0
    recorder.task([_started()], commands)
    assert [r.seq for r in asked] == [1]
    refunded = ev.ActivityCompleted(
        activity_execution_id=f"{RUN_ID}:2",
        activity_attempt_id="r1",
        activity_type="refund",
        sequence=2,
        attempt_number=1,
        result=codec.encode("refunded 10")["blob"],
        payload_codec="avro",
    )
    before = len(recorder.history)
    recorder.task([refunded], [])
    commands, asked = _live(live, recorder.history[before:], _completed)
    recorder.history = recorder.history[:before]
    recorder.tasks -= 1
    recorder.task([refunded], commands)
    assert [r.seq for r in asked] == [3]
    return recorder


def test_live_local_activity_becomes_one_step_in_its_place_among_the_commands() -> None:
    """A3, PROTOCOL 8.3: the record takes its step's place; a queued step keeps its number."""
    instance = _instance("Checkout")
    started = HistoryEvent(RUN_ID, 1, _started(), AT, "task-1")
    commands, asked = _live(instance, [started], _completed)
    assert [c.type for c in commands] == ["record_local_activity", "schedule_activity"]
    assert [getattr(c, "seq", None) for c in commands] == [1, 2]
    assert asked[0].activity_execution_id == f"{RUN_ID}:1"
    assert asked[0].options.execution_mode == "local"


def test_recorded_local_activity_replays_cold_and_warm_without_running_again() -> None:
    """D3, S12: replay delivers the recorded outcome where the code awaited it; nothing runs."""
    history = _record_checkout().history
    assert history[-1].event_type == "WorkflowCompleted"

    def never(request: LocalActivityRequest) -> cmd.RecordLocalActivity:
        raise AssertionError(f"local activity {request.seq} ran again")

    cold, asked = _live(_instance("Checkout"), history, never)
    assert cold == [] and asked == []
    warm = _instance("Checkout")
    for group in activations(history):
        commands, asked = _live(warm, group, never)
        assert commands == [] and asked == []
    result = next(e for e in history if e.event_type == "WorkflowCompleted")
    assert codec.decode({"codec": "avro", "blob": result.payload["output"]}) == [
        "charged 10",
        "refunded 10",
        "charged 11",
    ]


def test_local_outcomes_are_not_inputs_of_a_workflow_task() -> None:
    """A3: a local terminal event never starts an activation of its own; a queued one does."""
    history = _record_checkout().history
    local = [e for e in history if e.event_type == "ActivityCompleted" and ev.is_local(e.event)]
    queued = [
        e for e in history if e.event_type == "ActivityCompleted" and not ev.is_local(e.event)
    ]
    assert len(local) == 2 and len(queued) == 1
    assert not any(is_input(e) for e in local)
    assert all(is_input(e) for e in queued)


@pytest.mark.parametrize(
    ("changed", "expected"),
    [(CheckoutAllQueued, "activity 'charge'"), (CheckoutRefundsFirst, "local activity 'refund'")],
    ids=["now-queued", "other-type"],
)
def test_a_changed_call_at_a_local_step_is_nondeterminism(changed: type, expected: str) -> None:
    """D1, PROTOCOL 8.2: activity type and execution_mode are part of a step's identity."""
    history = _record_checkout().history
    app = App(task_queue="q", workflows=[changed], activities=[charge, refund])
    activation = _instance("Checkout", app).activate(history)
    assert isinstance(activation.failure, NondeterminismError)
    assert activation.failure.seq == 1
    assert activation.failure.expected == expected
    assert activation.failure.recorded == "local activity 'charge'"


def _failed(request: LocalActivityRequest) -> cmd.RecordLocalActivity:
    attempt = cmd.LocalAttempt(
        attempt_id="a1",
        attempt_number=1,
        outcome="failed",
        duration_ms=1,
        message="declined",
        exception_type="CardDeclined",
        non_retryable=True,
    )
    return request.record(
        outcome="failed",
        attempts=[attempt],
        message="declined",
        exception_type="CardDeclined",
        non_retryable=True,
    )


def _cancelled(request: LocalActivityRequest) -> cmd.RecordLocalActivity:
    attempt = cmd.LocalAttempt(
        attempt_id="a1", attempt_number=1, outcome="cancelled", duration_ms=1
    )
    return request.record(outcome="cancelled", attempts=[attempt], message="the run was cancelled")


@pytest.mark.parametrize(
    ("runner", "expected"),
    [(_failed, "complete_workflow"), (_cancelled, "cancel_workflow")],
    ids=["failed", "cancelled"],
)
def test_failed_local_activity_raises_and_cancelled_one_cancels_the_run(
    runner: Runner, expected: str
) -> None:
    """A3: failure reaches the code as ActivityError; cancellation as the run's cancellation,
    once: the CancelRequested recorded after it changes nothing; replay gives the same."""
    recorder = Recorder()
    started = ev.WorkflowStarted(
        workflow_type="Guarded", workflow_instance_id="wf", workflow_run_id=RUN_ID
    )
    commands, _ = _live(
        _instance("Guarded"), [HistoryEvent(RUN_ID, 1, started, AT, "task-1")], runner
    )
    assert [c.type for c in commands] == ["record_local_activity", expected]
    recorder.task([started], commands)
    if expected == "complete_workflow":
        done = commands[-1]
        assert isinstance(done, cmd.CompleteWorkflow)
        assert codec.decode(done.result) == "failed: CardDeclined"
    replayed, asked = _live(_instance("Guarded"), recorder.history, _completed)
    assert replayed == [] and asked == []


def test_local_activity_nobody_awaits_when_the_run_closes_is_recorded_cancelled_unrun() -> None:
    """A3: the run completed first: its pending local activity is recorded, never run."""
    started = ev.WorkflowStarted(
        workflow_type="Abandons", workflow_instance_id="wf", workflow_run_id=RUN_ID
    )

    def never(request: LocalActivityRequest) -> cmd.RecordLocalActivity:
        raise AssertionError("ran after the run closed")

    commands, asked = _live(
        _instance("Abandons"), [HistoryEvent(RUN_ID, 1, started, AT, "task-1")], never
    )
    assert asked == []
    record, done = commands
    assert isinstance(record, cmd.RecordLocalActivity) and isinstance(done, cmd.CompleteWorkflow)
    assert record.outcome == "cancelled" and record.attempts == []
    recorder = Recorder()
    recorder.task([started], commands)
    assert _live(_instance("Abandons"), recorder.history, never) == ([], [])


# -- the command and its events -------------------------------------------------------------------


def _attempt(number: int, outcome: str = "failed", **fields: Any) -> dict[str, Any]:
    retry = {"retry_reason": "failure", "backoff_seconds": 0.5} if outcome != "completed" else {}
    return {
        "attempt_id": f"a{number}",
        "attempt_number": number,
        "outcome": outcome,
        "duration_ms": 3,
        **retry,
        **fields,
    }


def _wire(**fields: Any) -> dict[str, Any]:
    return {
        "type": "record_local_activity",
        "activity_type": "charge",
        "execution_mode": "local",
        "arguments": ARGS,
        "outcome": "completed",
        "result": ARGS,
        "attempts": [_attempt(1), _attempt(2, "completed")],
        **fields,
    }


def test_record_local_activity_wire_form_parses() -> None:
    """PROTOCOL 7: the catalogue's record_local_activity shape is accepted as sent."""
    parsed = cmd.parse_command(_wire(start_to_close_timeout=10, retry_policy={"max_attempts": 3}))
    assert isinstance(parsed, cmd.RecordLocalActivity)
    assert [a.outcome for a in parsed.attempts] == ["failed", "completed"]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"result": None}, "result is given exactly when"),
        ({"outcome": "failed", "attempts": [_attempt(1, "failed")]}, "result is given exactly"),
        (
            {"outcome": "timed_out", "result": None, "attempts": [_attempt(1, "timed_out")]},
            "timeout_kind",
        ),
        ({"attempts": []}, "needs its attempts"),
        ({"attempts": [_attempt(2, "completed")]}, "attempt numbers"),
        ({"attempts": [_attempt(1), _attempt(1, "completed")]}, "attempt numbers"),
        (
            {"attempts": [_attempt(1, "failed", retry_reason=None), _attempt(2, "completed")]},
            "must be a retry",
        ),
        ({"attempts": [_attempt(1, "failed")]}, "last attempt's outcome"),
        (
            {"attempts": [_attempt(n) for n in range(1, 101)] + [_attempt(101, "completed")]},
            "at most 100",
        ),
        ({"queue": "shop"}, "Extra inputs"),
        ({"schedule_to_start_timeout": 5}, "Extra inputs"),
        ({"execution_mode": "queued"}, "'local'"),
        ({"start_to_close_timeout": 0}, "positive"),
        ({"heartbeat_timeout": 9, "start_to_close_timeout": 3}, "must not exceed"),
    ],
)
def test_malformed_record_local_activity_is_refused_with_its_reason(
    fields: dict[str, Any], reason: str
) -> None:
    """A3: an inconsistent record is InvalidCommand naming the problem, before any write."""
    with pytest.raises(cmd.InvalidCommand) as caught:
        cmd.parse_command(_wire(**fields))
    assert reason in str(caught.value)


def test_local_activity_events_are_ordinary_activity_history_marked_local() -> None:
    """A3: Scheduled, per attempt Started + heartbeats (+ RetryScheduled), one terminal."""
    record = cmd.parse_command(
        _wire(
            attempts=[
                _attempt(1, heartbeats=[{"elapsed_ms": 5, "details": ARGS}]),
                _attempt(2, "completed"),
            ]
        )
    )
    assert isinstance(record, cmd.RecordLocalActivity)
    recorded = ev.local_activity_events(record, run_id="run", step=4, workflow_task_id="t", now=AT)
    assert [(e.event_type, key) for e, key in recorded] == [
        ("ActivityScheduled", "step:4:scheduled"),
        ("ActivityStarted", "activity:run:4:started:1"),
        ("ActivityHeartbeatRecorded", "activity:run:4:heartbeat:1:0"),
        ("ActivityRetryScheduled", "activity:run:4:retry:1"),
        ("ActivityStarted", "activity:run:4:started:2"),
        ("ActivityCompleted", "activity:run:4:closed"),
    ]
    for event, _ in recorded:
        payload = event.to_json()
        assert payload["execution_mode"] == "local" and payload["local_activity"] is True
        assert payload["sequence"] == 4
        assert ev.parse(event.event_type, payload) == event
    snapshot = recorded[0][0].to_json()["activity"]
    assert snapshot["execution_mode"] == "local"
    assert snapshot["routing"] == "same_process_workflow_task"
    assert "queue" not in snapshot
    heartbeat = recorded[2][0].to_json()
    assert heartbeat["progress"] == ARGS and heartbeat["elapsed_ms"] == 5
    retry = recorded[3][0].to_json()
    assert retry["retry_backoff_seconds"] == 0.5 and "retry_available_at" not in retry


def test_cancelled_before_any_attempt_has_no_started_event() -> None:
    """A3: an execution that never ran is Scheduled then Cancelled, nothing in between."""
    record = cmd.parse_command(_wire(outcome="cancelled", result=None, attempts=[], message="gone"))
    assert isinstance(record, cmd.RecordLocalActivity)
    recorded = ev.local_activity_events(record, run_id="run", step=1, workflow_task_id="t", now=AT)
    assert [e.event_type for e, _ in recorded] == ["ActivityScheduled", "ActivityCancelled"]


# -- authoring options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"start_to_close_timeout": 0}, "start_to_close_timeout must be a positive"),
        ({"schedule_to_close_timeout": -1}, "schedule_to_close_timeout must be a positive"),
        ({"heartbeat_timeout": float("inf")}, "heartbeat_timeout must be a positive"),
        ({"start_to_close_timeout": 10, "schedule_to_close_timeout": 5}, "must not exceed"),
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"max_attempts": 2, "retry_policy": RetryPolicy(max_attempts=3)}, "give it once"),
    ],
)
def test_local_activity_options_refuse_bad_values_when_built(
    options: dict[str, Any], reason: str
) -> None:
    """A3, issue 13 item 7: bad options raise ValueError where they are written."""
    with pytest.raises(ValueError, match=reason):
        LocalActivityOptions(**options)


def test_local_activity_options_default_to_the_engine_retry_policy_with_max_attempts() -> None:
    """A3: the default policy is the engine's; max_attempts is recorded in it."""
    assert LocalActivityOptions().retry_policy_wire() == RetryPolicy().to_wire()
    bounded = LocalActivityOptions(max_attempts=3, schedule_to_close_timeout=30)
    assert bounded.retry_policy_wire()["max_attempts"] == 3
    assert bounded.timeouts() == {
        "start_to_close_timeout": None,
        "schedule_to_close_timeout": 30.0,
        "heartbeat_timeout": None,
    }
    with pytest.raises(ValidationError):
        ev.ActivityHeartbeatRecorded.model_validate({"elapsed_ms": 1})


def test_a_record_for_a_step_no_local_activity_awaits_fails_the_task_naming_it() -> None:
    instance = _instance("Checkout")
    activation = instance.activate([HistoryEvent(RUN_ID, 1, _started(), AT, "task-1")])
    assert activation.local_activities
    stray = _completed(activation.local_activities[0]).model_copy(update={"seq": 99})

    resolved = instance.resolve_local_activities([stray])

    assert isinstance(resolved.failure, ReplayStateError)
    assert "step 99" in str(resolved.failure)
