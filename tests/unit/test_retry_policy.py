"""Activity retry policy and duration checks (issue 13 items 6 and 7; A1, A2).

The models refuse bad values with a message naming the field, the authoring API refuses them in
workflow code (failing the workflow task, not the run), and the default policy retries without
limit with 1 s x 2.0 backoff capped at 100 s.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from burrow import codec, workflow
from burrow.protocol import commands, events, shapes
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store import activities
from burrow.workflow.definition import get_definition

ARGS = codec.encode([])
TIMEOUTS = (
    "start_to_close_timeout",
    "schedule_to_start_timeout",
    "schedule_to_close_timeout",
    "heartbeat_timeout",
)


def options(**fields: Any) -> shapes.ActivitySpec:
    return shapes.ActivitySpec(activity_type="charge", queue="q", arguments=ARGS, **fields)


# -- issue 13 item 6: the default policy --------------------------------------------------------


def test_default_policy_is_unlimited_exponential_backoff_spelled_out_on_the_wire() -> None:
    """Issue 13 item 6, A2: every value is snapped, and 0 carries "unlimited" on the wire."""
    assert workflow.RetryPolicy().to_wire() == {
        "max_attempts": 0,
        "non_retryable_error_types": [],
        "initial_interval_seconds": 1.0,
        "backoff_coefficient": 2.0,
        "maximum_interval_seconds": 100.0,
    }
    assert shapes.RetrySpec.model_validate(workflow.RetryPolicy().to_wire()).max_attempts == 0


def test_explicit_max_attempts_and_intervals_are_kept() -> None:
    """Issue 13 item 6: an explicit limit is honoured; timedelta and seconds both work."""
    policy = workflow.RetryPolicy(
        max_attempts=3, initial_interval=timedelta(milliseconds=200), maximum_interval=5
    )
    wire = policy.to_wire()
    assert (wire["max_attempts"], wire["initial_interval_seconds"]) == (3, 0.2)
    assert wire["maximum_interval_seconds"] == 5.0


def test_backoff_grows_by_the_coefficient_up_to_the_cap_for_an_empty_policy() -> None:
    """Issue 13 item 6: a policy that leaves keys out gets 1, 2, 4 ... 64, 100, 100 seconds."""
    delays = [activities.backoff_seconds({}, attempt) for attempt in range(1, 10)]
    assert delays == [1, 2, 4, 8, 16, 32, 64, 100, 100]
    assert activities.max_attempts({}) == shapes.UNLIMITED_ATTEMPTS
    assert activities.max_attempts({"max_attempts": 3}) == 3


def test_backoff_after_thousands_of_attempts_stays_at_the_cap() -> None:
    """Issue 13 item 6: 2.0 ** 5000 overflows a float; unlimited attempts must not crash."""
    assert activities.backoff_seconds({}, 5_000) == 100.0
    assert activities.backoff_seconds({"maximum_interval_seconds": 7}, 10_000) == 7.0


def test_explicit_backoff_list_repeats_its_last_delay() -> None:
    policy = {"backoff_seconds": [0, 5]}
    assert [activities.backoff_seconds(policy, n) for n in (1, 2, 3)] == [0, 5, 5]


# -- issue 13 item 7: the wire models -----------------------------------------------------------


BAD_POLICIES = {
    "negative-attempts": ({"max_attempts": -1}, "max_attempts"),
    "zero-initial": ({"initial_interval_seconds": 0}, "initial_interval_seconds"),
    "negative-cap": ({"maximum_interval_seconds": -5}, "maximum_interval_seconds"),
    "shrinking": ({"backoff_coefficient": 0.5}, "backoff_coefficient"),
    "negative-delay": ({"backoff_seconds": [1, -1]}, "backoff_seconds"),
    "cap-below-start": (
        {"initial_interval_seconds": 10, "maximum_interval_seconds": 5},
        "maximum_interval_seconds",
    ),
    "infinite-initial": ({"initial_interval_seconds": float("inf")}, "initial_interval_seconds"),
}


@pytest.mark.parametrize(("policy", "field"), list(BAD_POLICIES.values()), ids=list(BAD_POLICIES))
def test_retry_policy_model_refuses_bad_values_naming_the_field(
    policy: dict[str, Any], field: str
) -> None:
    """Issue 13 item 7, A1."""
    with pytest.raises(ValidationError, match=field):
        shapes.RetrySpec.model_validate(policy)


@pytest.mark.parametrize("field", TIMEOUTS)
@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_activity_options_refuse_zero_negative_or_nan_timeouts(field: str, seconds: float) -> None:
    """Issue 13 item 7, A1: each timeout must be a positive number of seconds."""
    with pytest.raises(ValidationError, match=f"{field} must be a positive"):
        options(**{field: seconds})


INCONSISTENT = {
    "heartbeat-over-start-to-close": {"heartbeat_timeout": 30, "start_to_close_timeout": 10},
    "heartbeat-over-schedule-to-close": {"heartbeat_timeout": 30, "schedule_to_close_timeout": 10},
    "start-to-close-over-schedule-to-close": {
        "start_to_close_timeout": 60,
        "schedule_to_close_timeout": 30,
    },
    "schedule-to-start-over-schedule-to-close": {
        "schedule_to_start_timeout": 60,
        "schedule_to_close_timeout": 30,
    },
}


@pytest.mark.parametrize("timeouts", list(INCONSISTENT.values()), ids=list(INCONSISTENT))
def test_activity_options_refuse_timeouts_out_of_protocol_order(timeouts: dict[str, int]) -> None:
    """Issue 13 item 7, A1, PROTOCOL.md 8: heartbeat <= start_to_close <= schedule_to_close."""
    shorter, longer = timeouts
    with pytest.raises(ValidationError, match=f"{shorter} .* must not exceed {longer}"):
        options(**timeouts)


def test_consistent_and_equal_timeouts_are_accepted() -> None:
    chosen = options(
        heartbeat_timeout=5,
        start_to_close_timeout=30,
        schedule_to_start_timeout=30,
        schedule_to_close_timeout=30,
    )
    assert chosen.start_to_close_timeout == 30


def test_snapshots_read_back_from_history_are_not_checked_again() -> None:
    """Issue 13 item 7: a run recorded before the checks must stay readable (RECORDED context)."""
    recorded = {
        **options().to_json(),
        "heartbeat_timeout": 3600,
        "start_to_close_timeout": 60,
        "retry_policy": {"max_attempts": 3, "initial_interval_seconds": 0},
    }
    parsed = shapes.ActivitySpec.model_validate(recorded, context=shapes.RECORDED)
    assert parsed.heartbeat_timeout == 3600
    with pytest.raises(ValidationError):
        shapes.ActivitySpec.model_validate(recorded)


def test_a_worker_command_with_a_zero_timeout_is_an_invalid_command() -> None:
    """Issue 13 item 7, A1: external runtimes get the same refusal through parse_command()."""
    wire = {**options().to_json(), "type": "schedule_activity", "start_to_close_timeout": 0}
    with pytest.raises(commands.InvalidCommand, match="start_to_close_timeout must be a positive"):
        commands.parse_command(wire)


# -- issue 13 item 7: the authoring API ---------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_attempts": -1}, "max_attempts"),
        ({"initial_interval": timedelta(0)}, "initial_interval_seconds"),
        ({"backoff_coefficient": 0.0}, "backoff_coefficient"),
        ({"maximum_interval": 0.5, "initial_interval": 2}, "maximum_interval_seconds"),
    ],
)
def test_authoring_retry_policy_is_refused_where_it_is_written(
    fields: dict[str, Any], named: str
) -> None:
    """Issue 13 item 7: a plain ValueError naming the field, without pydantic's framing."""
    with pytest.raises(ValueError, match=f"^invalid RetryPolicy: .*{named}") as caught:
        workflow.RetryPolicy(**fields)
    assert "validation error" not in str(caught.value)


@workflow.defn(name="Misuse")
class Misuse:
    """Makes the call its input names, then returns: a refusal fails the activation instead."""

    @workflow.run
    async def run(self, call: str) -> str:
        match call:
            case "sleep-negative":
                await workflow.sleep(-1)
            case "sleep-nan":
                await workflow.sleep(float("nan"))
            case "sleep-zero":
                await workflow.sleep(0)
            case "wait-zero":
                await workflow.wait_condition(lambda: False, timeout=0)
            case "wait-negative":
                await workflow.wait_condition(lambda: False, timeout=timedelta(seconds=-1))
            case "activity-zero":
                await workflow.activity("charge", start_to_close_timeout=0)
            case "activity-negative-heartbeat":
                await workflow.activity("charge", heartbeat_timeout=-1)
            case "activity-out-of-order":
                await workflow.activity(
                    "charge", start_to_close_timeout=60, schedule_to_close_timeout=10
                )
        return call


def activate(call: str) -> tuple[BaseException | None, list[commands.Command]]:
    run_id = str(uuid.uuid4())
    run = RunContext(
        run_id=run_id,
        workflow_id="wf-1",
        workflow_type="Misuse",
        namespace="default",
        task_queue="q",
        input=codec.encode([call]),
    )
    started = events.WorkflowStarted(
        workflow_type="Misuse", workflow_instance_id="wf-1", workflow_run_id=run_id
    )
    at = datetime(2024, 1, 1, tzinfo=UTC)
    history = [HistoryEvent(run_id, 1, started, at, workflow_task_id="task-1")]
    instance = WorkflowInstance(definition=get_definition(Misuse), run=run)
    activation = instance.activate(history)
    return activation.failure, list(activation.commands)


REFUSED = {
    "sleep-negative": "workflow.sleep.. needs a finite duration >= 0, got -1",
    "sleep-nan": "workflow.sleep.. needs a finite duration >= 0, got nan",
    "wait-zero": "workflow.wait_condition.. timeout must be a positive",
    "wait-negative": "workflow.wait_condition.. timeout must be a positive",
    "activity-zero": "workflow.activity.'charge'.: start_to_close_timeout must be a positive",
    "activity-negative-heartbeat": "heartbeat_timeout must be a positive",
    "activity-out-of-order": "start_to_close_timeout .60s. must not exceed schedule_to_close",
}


@pytest.mark.parametrize(("call", "message"), list(REFUSED.items()), ids=list(REFUSED))
def test_bad_durations_in_workflow_code_fail_the_workflow_task(call: str, message: str) -> None:
    """Issue 13 item 7, A1: a ValueError like any bug, before any command is recorded."""
    failure, produced = activate(call)
    assert isinstance(failure, ValueError)
    assert re.search(message, str(failure)), str(failure)
    assert produced == []


def test_sleep_zero_only_yields_and_records_no_timer() -> None:
    """Issue 13 item 7: `sleep(0)` keeps its asyncio meaning, a scheduling point."""
    failure, produced = activate("sleep-zero")
    assert failure is None
    assert [c.type for c in produced] == ["complete_workflow"]
