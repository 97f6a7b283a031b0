"""Every duration has a documented maximum, in commands and in workflow code (issue 25).

Timeouts, retry intervals, backoffs and timers are at most `MAX_DURATION_SECONDS` (100 years),
worker session leases and lifetimes at most `MAX_SESSION_SECONDS`; past them a command is an
InvalidCommand (the HTTP completion's 4xx) and workflow code gets a ValueError or TypeError that
fails the workflow task. Histories recorded before the bounds stay readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from burrow import codec, workflow
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol import shapes
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import Activation, RunContext, WorkflowInstance
from burrow.workflow.definition import get_definition

MAX = shapes.MAX_DURATION_SECONDS
ARGS = dict(codec.encode([]))
SCHEDULE: dict[str, Any] = {
    "type": "schedule_activity",
    "activity_type": "nap",
    "queue": "q",
    "arguments": ARGS,
}
YEARS_200 = 200 * 365 * 24 * 3600.0


# -- the command models (what the store and the HTTP completion accept) -------------------------


HOSTILE_COMMANDS = {
    "timer-1e308": {"type": "start_timer", "delay_seconds": 1e308},
    "timer-negative": {"type": "start_timer", "delay_seconds": -1},
    "timer-nan": {"type": "start_timer", "delay_seconds": float("nan")},
    "schedule-to-close-1e12": {**SCHEDULE, "schedule_to_close_timeout": 1e12},
    "start-to-close-1e14": {**SCHEDULE, "start_to_close_timeout": 1e14, "heartbeat_timeout": 1},
    "intervals-1e12": {
        **SCHEDULE,
        "heartbeat_timeout": 1,
        "retry_policy": {"initial_interval_seconds": 1e12, "maximum_interval_seconds": 1e12},
    },
    "backoff-list-1e12": {**SCHEDULE, "retry_policy": {"backoff_seconds": [1, 1e12]}},
    "session-lease-2**31": {
        **SCHEDULE,
        "worker_session": {"session_id": "s", "lease_seconds": 2**31},
    },
    "session-ttl-10**400": {
        **SCHEDULE,
        "worker_session": {"session_id": "s", "ttl_seconds": 10**400},
    },
}


@pytest.mark.parametrize("command", list(HOSTILE_COMMANDS.values()), ids=list(HOSTILE_COMMANDS))
def test_durations_past_the_maximum_or_below_zero_are_invalid_commands(
    command: dict[str, Any],
) -> None:
    """Issue 25 items 1, 6 and 8 (A1): a typed refusal naming the field; nothing to write."""
    with pytest.raises(cmd.InvalidCommand, match=r"must be|less than or equal"):
        cmd.parse_command(command)


def test_the_maximum_itself_is_accepted() -> None:
    """Issue 25 item 1: the documented bound is inclusive."""
    timer = cmd.parse_command({"type": "start_timer", "delay_seconds": MAX})
    assert isinstance(timer, cmd.StartTimer) and timer.delay_seconds == MAX
    activity = cmd.parse_command({**SCHEDULE, "schedule_to_close_timeout": MAX})
    assert isinstance(activity, cmd.ScheduleActivity)


def test_a_local_attempt_reporting_a_huge_backoff_or_duration_is_refused() -> None:
    """Issue 25 item 1: a record_local_activity carries durations too."""
    attempt = {"attempt_id": "a", "attempt_number": 1, "outcome": "completed", "duration_ms": 1}
    record = {
        "type": "record_local_activity",
        "activity_type": "nap",
        "arguments": ARGS,
        "outcome": "completed",
        "result": ARGS,
        "attempts": [attempt],
    }
    assert isinstance(cmd.parse_command(record), cmd.RecordLocalActivity)
    for hostile in ({"duration_ms": 10**400}, {"backoff_seconds": 1e300}):
        with pytest.raises(cmd.InvalidCommand):
            cmd.parse_command({**record, "attempts": [{**attempt, **hostile}]})


def test_snapshots_recorded_before_the_bound_stay_readable() -> None:
    """Issue 25 item 1: the RECORDED context reads back what was once accepted."""
    recorded = {**SCHEDULE, "start_to_close_timeout": YEARS_200}
    del recorded["type"]
    recorded["retry_policy"] = {"initial_interval_seconds": YEARS_200, "backoff_seconds": [1e12]}
    options = shapes.ActivitySpec.model_validate(recorded, context=shapes.RECORDED)
    assert options.start_to_close_timeout == YEARS_200
    timer = cmd.StartTimer.model_validate({"delay_seconds": 1e12}, context=shapes.RECORDED)
    assert timer.delay_seconds == 1e12
    with pytest.raises(ValidationError):
        shapes.ActivitySpec.model_validate(recorded)


# -- the authoring API ----------------------------------------------------------------------


def test_retry_policy_with_huge_intervals_is_refused_where_it_is_written() -> None:
    """Issue 25 item 1: `RetryPolicy(initial_interval=1e12, maximum_interval=1e12)`."""
    with pytest.raises(ValueError, match="initial_interval_seconds must be at most 3153600000"):
        workflow.RetryPolicy(initial_interval=1e12, maximum_interval=1e12)
    with pytest.raises(ValueError, match="backoff_seconds must be at most"):
        workflow.RetryPolicy(backoff_seconds=[1, 1e12])
    with pytest.raises(ValueError, match="backoff_seconds is out of range: durations are at most"):
        workflow.RetryPolicy(backoff_seconds=[1, 10**400])


def test_a_duration_that_is_not_a_number_or_timedelta_is_a_type_error() -> None:
    """Issue 25 item 1: "5" or True is not silently read as seconds."""
    with pytest.raises(TypeError, match="initial_interval must be a timedelta or a number"):
        workflow.RetryPolicy(initial_interval="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LocalActivityOptions: heartbeat_timeout must be"):
        workflow.LocalActivityOptions(heartbeat_timeout=True)


@workflow.defn(name="Hostile")
class Hostile:
    """Makes the call its input names with the module's `VALUE`, then returns."""

    ticker: asyncio.Task[None] | None = None

    @workflow.run
    async def run(self, call: str) -> str:
        await (CALLS | ALSO_CALLS)[call](self, VALUE[0])
        return call


async def _held_background_sleep(flow: Hostile, value: Any) -> None:
    # The task is held and never awaited, so its exception alone would be lost.
    flow.ticker = asyncio.get_running_loop().create_task(asyncio.sleep(value))
    await workflow.wait_condition(lambda: flow.ticker is not None and flow.ticker.done())


async def _session_activity(flow: Hostile, value: Any) -> None:
    options = workflow.WorkerSessionOptions(lease_seconds=value, ttl_seconds=value)
    await workflow.worker_session("s", options).activity("nap")


async def _wait_for(flow: Hostile, value: Any) -> None:
    never = asyncio.get_running_loop().create_future()
    await asyncio.wait_for(never, value)


async def _late_await(flow: Hostile, value: Any) -> None:
    async def boom() -> None:
        raise KeyError("boom")

    failing = asyncio.get_running_loop().create_task(boom())
    await workflow.sleep(value)
    with contextlib.suppress(KeyError):
        await failing


CALLS: dict[str, Any] = {
    "sleep": lambda flow, v: workflow.sleep(v),
    "raw-sleep": lambda flow, v: asyncio.sleep(v),
    "wait-for": _wait_for,
    "background-sleep": _held_background_sleep,
    "wait-condition": lambda flow, v: workflow.wait_condition(lambda: False, timeout=v),
    "start-to-close": lambda flow, v: workflow.activity("nap", start_to_close_timeout=v),
    "schedule-to-close": lambda flow, v: workflow.activity("nap", schedule_to_close_timeout=v),
    "schedule-to-start": lambda flow, v: workflow.activity("nap", schedule_to_start_timeout=v),
    "heartbeat": lambda flow, v: workflow.activity("nap", heartbeat_timeout=v),
    "retry-intervals": lambda flow, v: workflow.activity(
        "nap", retry_policy=workflow.RetryPolicy(initial_interval=v, maximum_interval=v)
    ),
    "retry-backoff": lambda flow, v: workflow.activity(
        "nap", retry_policy=workflow.RetryPolicy(backoff_seconds=[v])
    ),
    "local-timeout": lambda flow, v: workflow.local_activity(
        "nap", options=workflow.LocalActivityOptions(schedule_to_close_timeout=v)
    ),
    "session": _session_activity,
}
ALSO_CALLS: dict[str, Any] = {"late-await": _late_await}
VALUE: list[Any] = [None]


def activate(call: str, value: Any) -> Activation:
    """One activation of Hostile making `call` with `value`."""
    instance, history = started(call, value)
    return instance.activate(history)


def started(call: str, value: Any) -> tuple[WorkflowInstance, list[HistoryEvent]]:
    """A fresh Hostile instance making `call` with `value`, and its WorkflowStarted history."""
    VALUE[0] = value
    run_id = str(uuid.uuid4())
    run = RunContext(
        run_id=run_id,
        workflow_id="wf-1",
        workflow_type="Hostile",
        namespace="default",
        task_queue="q",
        input=codec.encode([call]),
    )
    started = ev.WorkflowStarted(
        workflow_type="Hostile", workflow_instance_id="wf-1", workflow_run_id=run_id
    )
    at = datetime(2024, 1, 1, tzinfo=UTC)
    history = [HistoryEvent(run_id, 1, started, at, workflow_task_id="task-1")]
    return WorkflowInstance(definition=get_definition(Hostile), run=run), history


def assert_refused(activation: Activation) -> None:
    """The workflow task fails with a plain ValueError, before anything is recorded."""
    assert isinstance(activation.failure, ValueError), activation.failure
    assert not isinstance(activation.failure, ValidationError)
    assert activation.commands == [] and activation.local_activities == []


@pytest.mark.parametrize("value", [1e12, 1e300, float("inf"), 10**400])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_huge_durations_in_workflow_code_fail_the_workflow_task(call: str, value: Any) -> None:
    """Issue 25 items 1 and 5: a ValueError, never a timer nobody can store.

    `raw-sleep`, `wait-for` and a held background task reach the loop's timer directly: the
    refusal fails the task even where nobody awaits the error.
    """
    assert_refused(activate(call, value))


TAKE_TIMEDELTA = sorted(set(CALLS) - {"raw-sleep", "wait-for", "background-sleep", "session"})


@pytest.mark.parametrize("call", TAKE_TIMEDELTA)
def test_a_timedelta_over_the_maximum_names_the_bound(call: str) -> None:
    """Issue 25 item 1: `timedelta.max` (2.7 million years) is refused, naming 100 years."""
    activation = activate(call, timedelta.max)
    assert_refused(activation)
    assert "at most 3153600000 seconds (100 years)" in str(activation.failure)


def test_an_error_in_a_held_task_nobody_awaits_fails_the_workflow_task() -> None:
    """Issue 25 item 5: the run does not close over a background task's lost exception."""
    activation = activate("background-sleep", timedelta(seconds=1))  # asyncio takes no timedelta
    assert isinstance(activation.failure, TypeError), activation.failure
    assert activation.commands == []


def test_a_task_that_failed_early_may_still_be_awaited_in_a_later_activation() -> None:
    """Issue 25 item 5: only an exception nobody can retrieve any more fails the task."""
    instance, history = started("late-await", 5)
    first = instance.activate(history)
    assert first.failure is None
    assert first.commands == [cmd.StartTimer(seq=1, delay_seconds=5.0)]
    run_id, at = history[0].run_id, history[0].recorded_at
    timer: dict[str, Any] = {"timer_id": "t", "sequence": 1, "delay_seconds": 5.0}
    history += [
        HistoryEvent(run_id, 2, ev.TimerScheduled(**timer, fire_at=at), at, "task-1"),
        HistoryEvent(run_id, 3, ev.TimerFired(**timer, fired_at=at), at, "task-2"),
    ]
    second = instance.activate(history)
    assert second.failure is None
    assert [type(c) for c in second.commands] == [cmd.CompleteWorkflow]


def test_a_sleep_within_the_bound_still_starts_its_timer() -> None:
    """Issue 25 item 5: a long but valid timer is kept exactly."""
    activation = activate("sleep", timedelta(days=365 * 99))
    assert activation.failure is None
    assert activation.commands == [cmd.StartTimer(seq=1, delay_seconds=99 * 365 * 86400.0)]


# -- properties: hostile values across the float, int and str range ---------------------------

SESSION_MAX = shapes.MAX_SESSION_SECONDS
POSITIVE = math.nextafter(0.0, 1.0)
DURATIONS = st.one_of(
    st.floats(),
    st.floats(min_value=MAX - 1, max_value=MAX + 1),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.text(max_size=8),
    st.from_regex(r"\A-?[0-9]{1,400}(\.[0-9]{1,6})?(e-?[0-9]{1,3})?\Z"),
    st.sampled_from(["nan", "inf", "-Infinity", "1e308", "1e400", "3153600000", " 7 "]),
)


def _local(**fields: Any) -> dict[str, Any]:
    attempt = {"attempt_id": "a", "attempt_number": 1, "outcome": "completed", "duration_ms": 1}
    attempt |= fields.pop("attempt", {})
    return {
        "type": "record_local_activity",
        "activity_type": "nap",
        "arguments": ARGS,
        "outcome": "completed",
        "result": ARGS,
        "attempts": [attempt],
        **fields,
    }


# name: (the command carrying value v, where the parsed command keeps it, lowest, highest)
FIELDS: dict[str, tuple[Any, Any, float, float]] = {
    "start_timer": (
        lambda v: {"type": "start_timer", "delay_seconds": v},
        lambda c: c.delay_seconds,
        0.0,
        MAX,
    ),
    **{
        f"schedule_activity.{name}": (
            lambda v, name=name: {**SCHEDULE, name: v},
            lambda c, name=name: getattr(c, name),
            POSITIVE,
            MAX,
        )
        for name in shapes.ActivitySpec.model_fields
        if name.endswith("_timeout")
    },
    **{
        f"retry_policy.{name}": (
            lambda v, name=name: {**SCHEDULE, "retry_policy": {name: v}},
            lambda c, name=name: getattr(c.retry_policy, name),
            POSITIVE,
            MAX,
        )
        for name in ("initial_interval_seconds", "maximum_interval_seconds")
    },
    "retry_policy.backoff_seconds": (
        lambda v: {**SCHEDULE, "retry_policy": {"backoff_seconds": [v]}},
        lambda c: c.retry_policy.backoff_seconds[0],
        0.0,
        MAX,
    ),
    **{
        f"worker_session.{name}": (
            lambda v, name=name: {**SCHEDULE, "worker_session": {"session_id": "s", name: v}},
            lambda c, name=name: getattr(c.worker_session, name),
            1,
            SESSION_MAX,
        )
        for name in ("lease_seconds", "ttl_seconds")
    },
    "record_local_activity.schedule_to_close_timeout": (
        lambda v: _local(schedule_to_close_timeout=v),
        lambda c: c.schedule_to_close_timeout,
        POSITIVE,
        MAX,
    ),
    "local_attempt.duration_ms": (
        lambda v: _local(attempt={"duration_ms": v}),
        lambda c: c.attempts[0].duration_ms,
        0,
        MAX * 1000,
    ),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@settings(max_examples=150, deadline=None)
@given(value=DURATIONS)
def test_any_duration_in_a_command_is_refused_or_within_its_bound(field: str, value: Any) -> None:
    """Issue 25 items 1 and 8 (done-when): InvalidCommand, or a finite value within the bound."""
    build, read, lowest, highest = FIELDS[field]
    try:
        command = cmd.parse_command(build(value))
    except cmd.InvalidCommand:
        return
    kept = read(command)
    assert math.isfinite(kept) and lowest <= kept <= highest, kept


@settings(max_examples=400, deadline=None)
@given(call=st.sampled_from(sorted(CALLS)), value=st.one_of(DURATIONS, st.timedeltas()))
def test_any_duration_in_workflow_code_fails_the_task_or_yields_storable_commands(
    call: str, value: Any
) -> None:
    """Issue 25 items 1 and 5 (done-when): never an unhandled error, never an unstorable timer.

    Either the workflow task fails with the error (not pydantic's), or every duration in the
    commands the activation gives, local activities included, is within the bound.
    """
    activation = activate(call, value)
    if activation.failure is not None:
        assert isinstance(activation.failure, Exception)
        assert not isinstance(activation.failure, ValidationError), activation.failure
        assert activation.commands == []
        return
    for command in activation.commands:
        assert_storable(command.to_json())
    for request in activation.local_activities:
        assert_storable(request.options.to_json())


def assert_storable(data: Any) -> None:
    """Every `*_seconds` and `*_timeout` value in a command's JSON is finite and within 0..MAX."""
    if isinstance(data, list):
        for item in data:
            assert_storable(item)
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        if key.endswith(("_seconds", "_timeout")) and value is not None:
            for seconds in value if isinstance(value, list) else [value]:
                assert math.isfinite(seconds) and 0 <= seconds <= MAX, (key, seconds)
        assert_storable(value)
