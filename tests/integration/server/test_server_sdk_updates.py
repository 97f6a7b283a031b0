"""Updates of SDK-run workflows over the worker plane (PROTOCOL.md 5.1, 7, 8.2, 17; SPEC M4b).

The test plays the SDK worker by hand: an accepted update reaches it as a workflow task that
carries `workflow_update_id`, it answers with one `complete_update` / `fail_update`, and the
server records `UpdateApplied` where the handler ran, then a follow-up workflow task.
"""

from __future__ import annotations

import asyncio
from typing import Any

from burrow import codec
from tests.integration.server.conftest import Api

COMPLETE = "/api/worker/workflow-tasks/{}/complete"


def envelope(value: Any) -> dict[str, Any]:
    return dict(codec.encode(value))


async def answer(api: Api, task: dict[str, Any], commands: list[dict[str, Any]]) -> Any:
    body = {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": commands,
    }
    return await api.worker("POST", COMPLETE.format(task["task_id"]), json=body)


async def waiting_run(api: Api, workflow_id: str) -> str:
    """A started run whose first task scheduled a long timer: it waits, with no task open."""
    await api.register()
    started = await api.start(workflow_id)
    first = await api.poll_workflow()
    assert first["workflow_update_id"] is None
    done = await answer(api, first, [{"type": "start_timer", "delay_seconds": 3600}])
    assert done.status_code == 200, done.text
    run_id: str = started["run_id"]
    return run_id


async def history(api: Api, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    events = await api.state.store.read_history(run_id=run_id)
    return [(e.event_type, e.payload) for e in events]


async def test_update_task_carries_the_update_and_records_update_applied(api: Api) -> None:
    """M4b, PROTOCOL 5.1, 8.2, 17: the task carries `workflow_update_id`; `complete_update`
    records `UpdateApplied` (name, arguments as accepted) before `UpdateCompleted`, returns the
    result to the waiting call, and leaves a follow-up task that replays the applied update."""
    run_id = await waiting_run(api, "wf-su")
    update = {
        "input": envelope(["apple"]),
        "request_id": "add-1",
        "wait_for": "completed",
        "wait_timeout_seconds": 10,
    }
    waiting = asyncio.create_task(
        api.control("POST", "/api/workflows/wf-su/update/add_item", json=update)
    )
    task = await api.poll_workflow()
    assert task["workflow_update_id"] == "add-1"
    assert [e["event_type"] for e in task["history_events"]][-1] == "UpdateAccepted"
    complete = {"type": "complete_update", "update_id": "add-1", "result": envelope(1)}
    done = await answer(api, task, [complete])
    assert done.status_code == 200, done.text

    response = await waiting
    assert response.status_code == 200, response.text
    assert response.json()["update_status"] == "completed"
    assert codec.decode(response.json()["result_envelope"]) == 1
    recorded = await history(api, run_id)
    assert [t for t, _ in recorded][-3:] == ["UpdateAccepted", "UpdateApplied", "UpdateCompleted"]
    applied = recorded[-2][1]
    assert (applied["update_id"], applied["update_name"]) == ("add-1", "add_item")
    assert applied["arguments"] == envelope(["apple"])
    assert applied["workflow_run_id"] == run_id

    follow_up = await api.poll_workflow()
    assert follow_up["run_id"] == run_id
    assert follow_up["workflow_update_id"] is None
    assert "UpdateApplied" in [e["event_type"] for e in follow_up["history_events"]]


async def test_failed_update_task_records_no_update_applied(api: Api) -> None:
    """M4b, PROTOCOL 2.4, 7: the SDK's `fail_update` (with its `exception_class`) fails the
    update, 422 `update_status: failed`; no handler effect is kept, so no `UpdateApplied`."""
    run_id = await waiting_run(api, "wf-suf")
    update = {"request_id": "bad-1", "wait_for": "completed", "wait_timeout_seconds": 10}
    waiting = asyncio.create_task(
        api.control("POST", "/api/workflows/wf-suf/update/add_item", json=update)
    )
    task = await api.poll_workflow()
    assert task["workflow_update_id"] == "bad-1"
    fail = {
        "type": "fail_update",
        "update_id": "bad-1",
        "message": "update handler failed: an item needs a name",
        "exception_type": "ValueError",
        "exception_class": "builtins.ValueError",
        "non_retryable": True,
    }
    done = await answer(api, task, [fail])
    assert done.status_code == 200, done.text

    response = await waiting
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["update_status"], body["exception_type"]) == ("failed", "ValueError")
    types = [t for t, _ in await history(api, run_id)]
    assert types[-2:] == ["UpdateAccepted", "UpdateCompleted"]
    assert "UpdateApplied" not in types
    assert (await api.poll_workflow())["workflow_update_id"] is None


async def test_accepted_updates_run_one_task_each_in_order(api: Api) -> None:
    """M4b, PROTOCOL 5.1: two accepted updates are two update tasks, oldest first; then the
    run's ordinary task follows."""
    run_id = await waiting_run(api, "wf-su2")
    for request_id in ("first", "second"):
        body = {"input": envelope([request_id]), "request_id": request_id}
        accepted = await api.control("POST", "/api/workflows/wf-su2/update/add_item", json=body)
        assert accepted.json()["update_status"] == "accepted"
    for request_id in ("first", "second"):
        task = await api.poll_workflow()
        assert task["workflow_update_id"] == request_id
        complete = {"type": "complete_update", "update_id": request_id, "result": envelope(0)}
        assert (await answer(api, task, [complete])).status_code == 200
    assert (await api.poll_workflow())["workflow_update_id"] is None
    applied = [p["update_id"] for t, p in await history(api, run_id) if t == "UpdateApplied"]
    assert applied == ["first", "second"]


async def test_update_command_for_an_unaccepted_update_writes_nothing(api: Api) -> None:
    """M4b, PROTOCOL 7: `complete_update` naming no accepted update of the run is refused as
    invalid commands and writes nothing; the task's lease stays good for the right answer."""
    run_id = await waiting_run(api, "wf-su3")
    accepted = await api.control(
        "POST", "/api/workflows/wf-su3/update/add_item", json={"request_id": "real"}
    )
    assert accepted.status_code == 200, accepted.text
    task = await api.poll_workflow()
    before = await history(api, run_id)
    wrong = {"type": "complete_update", "update_id": "nope", "result": envelope(0)}
    refused = await answer(api, task, [wrong])
    assert (refused.status_code, refused.json()["reason"]) == (409, "invalid_commands")
    assert await history(api, run_id) == before
    right = {"type": "complete_update", "update_id": "real", "result": envelope(0)}
    assert (await answer(api, task, [right])).status_code == 200
    update = await api.state.store.get_update(run_id=run_id, update_id="real")
    assert update is not None and update.state == "completed"
