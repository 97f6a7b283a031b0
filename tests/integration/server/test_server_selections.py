"""The SDK's durable select over HTTP (PROTOCOL.md 7 `parallel_group_mode: "select"`,
`cancel_selection_operation`; 8.2 SelectionResolved, SelectionOperationCancelled).

The batch is the one SDK 2.12.0 sends for `ctx.select({"greeting": activity, "deadline":
timer})` (built by the SDK's own replay of a fresh history).
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from durable_workflow.workflow import commands_to_server_commands, replay

from burrow import codec
from tests.apps.sdk_flows import SdkRaceWorkflow
from tests.integration.server.conftest import QUEUE, Api, fence
from tests.support.store import sweep_until

STARTED = {
    "id": "run:1",
    "sequence": 1,
    "event_type": "WorkflowStarted",
    "payload": {"workflow_type": "sdk-race"},
    "recorded_at": "2026-01-01T00:00:00+00:00",
}


def sdk_select() -> list[dict[str, Any]]:
    """The select batch exactly as the SDK sends it (steps 1 and 2)."""
    decided = replay(SdkRaceWorkflow, [STARTED], ["ada"], workflow_id="w", run_id="run")
    return commands_to_server_commands(decided.commands, QUEUE)


async def complete(api: Api, task: dict[str, Any], *commands: dict[str, Any]) -> Any:
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    return await api.worker("POST", url, json=fence(task, commands=list(commands)))


async def history(api: Api, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    url = f"/api/workflows/{workflow_id}/runs/{run_id}/history"
    events: list[dict[str, Any]] = (await api.control("GET", url)).json()["events"]
    return events


async def selecting(api: Api, workflow_id: str) -> tuple[str, dict[str, Any]]:
    run_id = (await api.start(workflow_id, "sdk-race"))["run_id"]
    await api.register(supported_workflow_types=["sdk-race"])
    task = await api.poll_workflow()
    opened = await complete(api, task, *sdk_select())
    assert opened.status_code == 200, opened.text
    return run_id, task


async def run_greeting(api: Api) -> None:
    activity = await api.poll_activity(timeout_seconds=0)
    body = {
        "activity_attempt_id": activity["activity_attempt_id"],
        "lease_owner": "w1",
        "result": dict(codec.encode("hello, ada")),
    }
    url = f"/api/worker/activity-tasks/{activity['task_id']}/complete"
    done = await api.worker("POST", url, json=body)
    assert done.status_code == 200, done.text


async def test_the_members_show_their_select_path(api: Api) -> None:
    """PROTOCOL 7, 8.2: each member step's events carry the path entry the SDK sent (mode
    `select`, member key, index, base, size, kind); the group is recorded once."""
    run_id, _ = await selecting(api, "sel-open")
    sent = {c["type"]: c["parallel_group_path"] for c in sdk_select()}

    events = await history(api, "sel-open", run_id)

    shown = {e["event_type"]: e["payload"] for e in events}
    assert shown["ActivityScheduled"]["parallel_group_path"] == sent["schedule_activity"]
    assert shown["TimerScheduled"]["parallel_group_path"] == sent["start_timer"]
    assert shown["TimerScheduled"]["selection_member_key"] == "deadline"
    assert [e["event_type"] for e in events].count("SelectionGroupOpened") == 1


async def test_the_first_member_to_close_is_resolved_when_its_task_is_claimed(api: Api) -> None:
    """PROTOCOL 8.2: the activity closes first; the task it wakes carries SelectionResolved
    after ActivityCompleted, naming the member, its execution id and that event's id."""
    run_id, _ = await selecting(api, "sel-win")
    await run_greeting(api)

    task = await api.poll_workflow()

    events = task["history_events"]
    kinds = [e["event_type"] for e in events]
    assert kinds[-2:] == ["ActivityCompleted", "SelectionResolved"]
    resolved = events[-1]["payload"]
    scheduled = next(e for e in events if e["event_type"] == "ActivityScheduled")["payload"]
    assert resolved == {
        "selection_group_id": "select-calls:1:2",
        "selection_group_base_sequence": 1,
        "selection_group_size": 2,
        "member_key": "greeting",
        "member_index": 0,
        "member_base_sequence": 1,
        "member_size": 1,
        "operation_kind": "activity",
        "operation_identity": scheduled["activity_execution_id"],
        "outcome": "completed",
        "resolution_event_id": events[-2]["id"],
        "resolution_event_type": "ActivityCompleted",
    }
    assert events[-2]["id"] == f"{run_id}:{events[-2]['sequence']}"


async def test_a_member_that_fails_first_resolves_the_select_failed(api: Api) -> None:
    """PROTOCOL 8.2: the activity fails for good first: SelectionResolved says `failed` and
    names its ActivityFailed (the SDK raises that failure from the select)."""
    await selecting(api, "sel-fail")
    attempt = await api.poll_activity(timeout_seconds=0)
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    failure = {"message": "no greeting", "type": "ValueError", "non_retryable": True}
    url = f"/api/worker/activity-tasks/{attempt['task_id']}/fail"
    failed = await api.worker("POST", url, json={**own, "failure": failure})
    assert failed.status_code == 200, failed.text

    task = await api.poll_workflow()

    events = task["history_events"]
    resolved = events[-1]["payload"]
    assert (events[-1]["event_type"], resolved["outcome"]) == ("SelectionResolved", "failed")
    assert resolved["resolution_event_type"] == "ActivityFailed"
    assert resolved["resolution_event_id"] == events[-2]["id"]


async def test_a_timer_that_fires_first_wins(api: Api) -> None:
    """PROTOCOL 8.2: the timer member fires before the activity closes: it wins, named by its
    timer id, resolved by its TimerFired."""
    run_id, _ = await selecting(api, "sel-timer")
    async with api.state.store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE timers SET fire_at = now() - interval '1 second'"))

    async def woken() -> dict[str, Any] | None:
        body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
        polled = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
        task: dict[str, Any] | None = polled.json()["task"]
        return task

    task = await sweep_until(api.state.store, woken)

    events = task["history_events"]
    resolved = events[-1]["payload"]
    assert (resolved["member_key"], resolved["operation_kind"]) == ("deadline", "timer")
    assert resolved["operation_identity"] == f"{run_id}:2"
    assert (resolved["resolution_event_type"], resolved["resolution_event_id"]) == (
        "TimerFired",
        events[-2]["id"],
    )


def _cancel(member_key: str, base: int, kind: str, identity: str) -> dict[str, Any]:
    return {
        "type": "cancel_selection_operation",
        "selection_group_id": "select-calls:1:2",
        "member_key": member_key,
        "member_index": base - 1,
        "member_base_sequence": base,
        "member_size": 1,
        "operation_kind": kind,
        "operation_identity": identity,
    }


async def test_a_cancel_of_a_closed_member_is_dropped_and_an_open_one_is_cancelled(
    api: Api,
) -> None:
    """`handle.cancel()`: the closed winner is not cancelled (its result stands: no marker),
    the open timer is (TimerCancelled, then SelectionOperationCancelled)."""
    run_id, _ = await selecting(api, "sel-cancel")
    await run_greeting(api)
    task = await api.poll_workflow()
    result = {"type": "complete_workflow", "result": dict(codec.encode("done"))}

    done = await complete(
        api,
        task,
        _cancel("greeting", 1, "activity", "x"),
        _cancel("deadline", 2, "timer", f"{run_id}:2"),
        result,
    )

    assert done.status_code == 200, done.text
    events = await history(api, "sel-cancel", run_id)
    cancelled = [e["payload"] for e in events if e["event_type"] == "SelectionOperationCancelled"]
    assert [c["member_key"] for c in cancelled] == ["deadline"]
    kinds = [e["event_type"] for e in events]
    assert kinds.index("TimerCancelled") < kinds.index("SelectionOperationCancelled")


def _broken() -> dict[str, list[dict[str, Any]]]:
    first, second = sdk_select()
    nested = second | {"parallel_group_path": [*second["parallel_group_path"]] * 2}
    return {
        "duplicate-key": [first, second | {"selection_member_key": "greeting"}],
        "empty-key": [first | {"selection_member_key": ""}, second],
        "wrong-base": [first | {"selection_member_base_sequence": 2}, second],
        "nested": [first, nested],
        "missing-member": [first],
        "condition-member": [
            first,
            {"type": "open_condition_wait"}
            | {k: v for k, v in second.items() if k not in ("type", "delay_seconds")},
        ],
        "cancel-of-no-member": [_cancel("deadline", 2, "timer", "x")],
    }


@pytest.mark.parametrize("case", list(_broken()))
async def test_a_broken_select_is_refused_and_writes_nothing(api: Api, case: str) -> None:
    """PROTOCOL 7: a select whose metadata does not name the steps the server assigns, or that
    Burrow cannot show back (nested or condition members), and a cancel naming no member,
    are 409 `invalid_commands`; history is unchanged and the lease holds."""
    run_id = (await api.start("sel-bad", "sdk-race"))["run_id"]
    await api.register(supported_workflow_types=["sdk-race"])
    task = await api.poll_workflow()
    before = await history(api, "sel-bad", run_id)

    refused = await complete(api, task, *_broken()[case])

    assert (refused.status_code, refused.json()["reason"]) == (409, "invalid_commands")
    assert await history(api, "sel-bad", run_id) == before
    retried = await complete(api, task, *sdk_select())
    assert retried.status_code == 200, retried.text
