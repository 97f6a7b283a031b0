"""Completions whose commands name updates, signals or timers the run does not have (issue 25).

Each refusal is a 409 `invalid_commands` naming the command and the missing reference; it
writes nothing, and the task's lease stays good for a correct answer.
"""

from __future__ import annotations

from typing import Any

from burrow import codec
from tests.integration.server.conftest import Api

COMPLETE = "/api/worker/workflow-tasks/{}/complete"


async def answer(api: Api, task: dict[str, Any], commands: list[dict[str, Any]]) -> Any:
    body = {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": commands,
    }
    return await api.worker("POST", COMPLETE.format(task["task_id"]), json=body)


async def leased_task(api: Api, workflow_id: str) -> tuple[str, dict[str, Any]]:
    """A started run and its first workflow task, leased."""
    await api.register()
    started = await api.start(workflow_id)
    return str(started["run_id"]), await api.poll_workflow()


async def waiting_run(api: Api, workflow_id: str) -> str:
    """A run whose first task started timer step 1: it waits, with no task open."""
    run_id, first = await leased_task(api, workflow_id)
    done = await answer(api, first, [{"type": "start_timer", "delay_seconds": 3600}])
    assert done.status_code == 200, done.text
    return run_id


async def events_of(api: Api, run_id: str) -> list[str]:
    return [e.event_type for e in await api.state.store.read_history(run_id=run_id)]


def assert_refused(response: Any, command: str, field: str, value: object) -> None:
    assert response.status_code == 409, response.text
    body = response.json()
    assert (body["reason"], body["command"]) == ("invalid_commands", command)
    assert body["missing_reference"] == {field: value}
    assert command in body["message"] and str(value) in body["message"]


async def test_fail_update_naming_an_unknown_update_is_refused_and_writes_nothing(
    api: Api,
) -> None:
    """Issue 25 item 6: `fail_update` for an update the run never accepted is a 409 naming
    the update id; no `UpdateCompleted` is written and the lease still takes a good answer."""
    run_id, task = await leased_task(api, "wf-fu")
    before = await events_of(api, run_id)
    fail = {"type": "fail_update", "update_id": "nope", "message": "made up"}
    refused = await answer(api, task, [fail])
    assert_refused(refused, "fail_update", "update_id", "nope")
    assert await events_of(api, run_id) == before
    assert await api.state.store.get_update(run_id=run_id, update_id="nope") is None
    good = await answer(api, task, [{"type": "start_timer", "delay_seconds": 3600}])
    assert good.status_code == 200, good.text


async def test_complete_update_naming_an_unknown_update_is_refused_in_a_mixed_batch(
    api: Api,
) -> None:
    """Issue 25 item 6: `complete_update` with an unknown id is refused even beside a
    `start_timer` (before, only an update-only batch was checked); the timer is not written."""
    run_id, task = await leased_task(api, "wf-cu")
    before = await events_of(api, run_id)
    commands = [
        {"type": "start_timer", "delay_seconds": 3600},
        {"type": "complete_update", "update_id": "nope", "result": dict(codec.encode(1))},
    ]
    refused = await answer(api, task, commands)
    assert_refused(refused, "complete_update", "update_id", "nope")
    assert await events_of(api, run_id) == before
    again = await answer(api, task, commands[:1])
    assert again.status_code == 200, again.text


async def test_update_command_for_an_update_already_completed_is_refused(api: Api) -> None:
    """Issue 25 item 6: an update id must name an accepted update not yet completed; a second
    `fail_update` for a completed one is refused and its result is left as it was."""
    run_id = await waiting_run(api, "wf-done")
    accepted = await api.control(
        "POST", "/api/workflows/wf-done/update/add_item", json={"request_id": "real"}
    )
    assert accepted.status_code == 200, accepted.text
    task = await api.poll_workflow()
    done = {"type": "complete_update", "update_id": "real", "result": dict(codec.encode(1))}
    finished = await answer(api, task, [done, {"type": "start_timer", "delay_seconds": 60}])
    assert finished.status_code == 200, finished.text
    await api.control("POST", "/api/workflows/wf-done/signal/poke", json={"request_id": "p1"})
    task = await api.poll_workflow()
    before = await events_of(api, run_id)
    fail = {"type": "fail_update", "update_id": "real", "message": "again"}
    refused = await answer(api, task, [fail])
    assert_refused(refused, "fail_update", "update_id", "real")
    assert await events_of(api, run_id) == before
    update = await api.state.store.get_update(run_id=run_id, update_id="real")
    assert update is not None and (update.state, update.failure) == ("completed", None)


async def test_skip_signal_naming_an_unknown_signal_is_refused_and_writes_nothing(
    api: Api,
) -> None:
    """Issue 25 item 6: `skip_signal` for a signal the run never received is a 409 naming the
    signal id; no `SignalSkipped` is written."""
    run_id, task = await leased_task(api, "wf-ss")
    before = await events_of(api, run_id)
    skip = {"type": "skip_signal", "signal_id": "ghost", "signal_name": "poke", "reason": "x"}
    refused = await answer(api, task, [skip])
    assert_refused(refused, "skip_signal", "signal_id", "ghost")
    assert await events_of(api, run_id) == before


async def test_skip_signal_of_a_received_signal_is_recorded_once(api: Api) -> None:
    """Issue 25 item 6: a received signal may be skipped once, under the name it was sent
    with; a second skip, or a skip under another name, is refused."""
    run_id = await waiting_run(api, "wf-ok")
    sent = await api.control("POST", "/api/workflows/wf-ok/signal/poke", json={"request_id": "s1"})
    assert sent.status_code == 202, sent.text
    task = await api.poll_workflow()
    renamed = {"type": "skip_signal", "signal_id": "s1", "signal_name": "other", "reason": "x"}
    assert_refused(await answer(api, task, [renamed]), "skip_signal", "signal_id", "s1")
    skip = {**renamed, "signal_name": "poke", "reason": "no handler"}
    done = await answer(api, task, [skip, {"type": "start_timer", "delay_seconds": 60}])
    assert done.status_code == 200, done.text
    assert (await events_of(api, run_id)).count("SignalSkipped") == 1

    await api.control("POST", "/api/workflows/wf-ok/signal/poke", json={"request_id": "s2"})
    task = await api.poll_workflow()
    before = await events_of(api, run_id)
    assert_refused(await answer(api, task, [skip]), "skip_signal", "signal_id", "s1")
    assert await events_of(api, run_id) == before


async def test_cancel_timer_naming_no_timer_of_the_run_is_refused_and_keeps_the_task(
    api: Api,
) -> None:
    """Issue 25 item 6: `cancel_timer` for a step that started no timer is a 409 naming the
    sequence; the task is not consumed (before, it was completed with nothing written)."""
    run_id = await waiting_run(api, "wf-ct")
    await api.control("POST", "/api/workflows/wf-ct/signal/poke", json={"request_id": "s1"})
    task = await api.poll_workflow()
    before = await events_of(api, run_id)
    refused = await answer(api, task, [{"type": "cancel_timer", "sequence": 999}])
    assert_refused(refused, "cancel_timer", "sequence", 999)
    assert await events_of(api, run_id) == before
    cancelled = await answer(api, task, [{"type": "cancel_timer", "sequence": 1}])
    assert cancelled.status_code == 200, cancelled.text
    assert (await events_of(api, run_id))[-1] == "TimerCancelled"
