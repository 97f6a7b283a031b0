"""The SDK's condition waits over HTTP (PROTOCOL.md 7 `open_condition_wait`, 8.2 ConditionWait*).

As the Durable Workflow server's `WorkflowWorkerProtocolTest::
test_completion_accepts_open_condition_wait_command_and_marks_run_waiting` and
`WorkerProtocolSuccessContractTest::test_signal_resume_completion_records_condition_wait_
satisfied_event`: the open is recorded with its timer, the completion of the task a signal
woke records `ConditionWaitSatisfied` naming the signal and cancels the timer.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from durable_workflow.workflow import WaitCondition

from burrow.server.condition_waits import KnownWaits
from tests.integration.server.conftest import WORLD, Api, fence
from tests.support.store import sweep_until

RESULT = {"type": "complete_workflow", "result": WORLD}


def sdk_wait(timeout: int | None = 60) -> dict[str, Any]:
    """`ctx.wait_condition(..., key="approval", timeout=...)` as SDK 2.12.0 sends it."""
    wait = WaitCondition(
        predicate=lambda: False,
        condition_key="approval",
        condition_definition_fingerprint="sha256:approval",
        timeout_seconds=timeout,
    )
    return wait.to_server_command("q1")


async def complete(api: Api, task: dict[str, Any], *commands: dict[str, Any]) -> Any:
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    return await api.worker("POST", url, json=fence(task, commands=list(commands)))


async def history(api: Api, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    url = f"/api/workflows/{workflow_id}/runs/{run_id}/history"
    events: list[dict[str, Any]] = (await api.control("GET", url)).json()["events"]
    return events


def of_type(events: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in events if e["event_type"] == event_type]


async def timers(api: Api, run_id: str) -> list[tuple[int, str, Any]]:
    async with api.state.store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT step_seq, state, fire_at FROM timers WHERE run_id = :r ORDER BY 1"),
            {"r": run_id},
        )
        return [(row.step_seq, row.state, row.fire_at) for row in rows]


async def waiting(api: Api, workflow_id: str, **wait: Any) -> tuple[str, dict[str, Any]]:
    run_id = (await api.start(workflow_id))["run_id"]
    await api.register()
    task = await api.poll_workflow()
    opened = await complete(api, task, sdk_wait(**wait))
    assert opened.status_code == 200, opened.text
    assert opened.json()["run_status"] == "waiting"
    return run_id, task


async def signal(api: Api, workflow_id: str) -> None:
    sent = await api.control("POST", f"/api/workflows/{workflow_id}/signal/approve", json={})
    assert sent.status_code == 202, sent.text


async def test_discovery_advertises_condition_waits(api: Api) -> None:
    """PROTOCOL 3.3, 7: `open_condition_wait` is a supported workflow task command."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    commands = info["worker_protocol"]["server_capabilities"]["supported_workflow_task_commands"]
    assert "open_condition_wait" in commands


async def test_the_open_is_recorded_with_a_durable_timer(api: Api) -> None:
    """PROTOCOL 8.2: ConditionWaitOpened carries the wait's id, key, fingerprint, step and
    timeout; the timeout is a pending timer of the same step."""
    run_id, _ = await waiting(api, "cw-open")

    [opened] = of_type(await history(api, "cw-open", run_id), "ConditionWaitOpened")
    assert opened == {
        "condition_wait_id": f"{run_id}:1",
        "sequence": 1,
        "condition_key": "approval",
        "condition_definition_fingerprint": "sha256:approval",
        "timeout_seconds": 60,
    }
    assert [(step, state) for step, state, _ in await timers(api, run_id)] == [(1, "pending")]


@pytest.mark.parametrize("claimed_here", [True, False], ids=["claimed-here", "claimed-elsewhere"])
async def test_a_signal_woken_completion_records_the_wait_satisfied(
    api: Api, claimed_here: bool
) -> None:
    """The SDK sends nothing for a wait it found true: the completion of the task the signal
    woke records ConditionWaitSatisfied (timer id, signal id and name) before its own events,
    and cancels the timer. The same when another server process claimed the task (the waits
    are read from the store, not known from the claim)."""
    run_id, _ = await waiting(api, "cw-signal")
    await signal(api, "cw-signal")
    task = await api.poll_workflow()
    if not claimed_here:
        api.state.waits = KnownWaits()
    [received] = [e for e in task["history_events"] if e["event_type"] == "SignalReceived"]

    done = await complete(api, task, RESULT)

    assert (done.status_code, done.json()["run_status"]) == (200, "completed")
    events = await history(api, "cw-signal", run_id)
    [satisfied] = of_type(events, "ConditionWaitSatisfied")
    assert satisfied == {
        "condition_wait_id": f"{run_id}:1",
        "sequence": 1,
        "condition_key": "approval",
        "condition_definition_fingerprint": "sha256:approval",
        "timeout_seconds": 60,
        "timer_id": f"{run_id}:1",
        "workflow_signal_id": received["payload"]["signal_id"],
        "signal_name": "approve",
    }
    kinds = [e["event_type"] for e in events]
    assert kinds.index("ConditionWaitSatisfied") < kinds.index("WorkflowCompleted")
    assert [(step, state) for step, state, _ in await timers(api, run_id)] == [(1, "cancelled")]


@pytest.mark.parametrize("claimed_here", [True, False], ids=["claimed-here", "claimed-elsewhere"])
async def test_a_wait_found_still_false_is_reopened_with_its_deadline(
    api: Api, claimed_here: bool
) -> None:
    """Woken with its predicate still false, the SDK sends the same wait again: a new
    ConditionWaitOpened at the next step (the SDK's replay takes both as one wait), no
    Satisfied, and the timer moves to the new step keeping its deadline."""
    run_id, _ = await waiting(api, "cw-reopen")
    [(_, _, deadline)] = await timers(api, run_id)
    await signal(api, "cw-reopen")
    task = await api.poll_workflow()
    if not claimed_here:
        api.state.waits = KnownWaits()

    reopened = await complete(api, task, sdk_wait())

    assert reopened.status_code == 200, reopened.text
    events = await history(api, "cw-reopen", run_id)
    assert [o["sequence"] for o in of_type(events, "ConditionWaitOpened")] == [1, 2]
    assert of_type(events, "ConditionWaitSatisfied") == []
    assert await timers(api, run_id) == [(2, "pending", deadline)]


async def test_a_fired_timeout_records_the_wait_timed_out(api: Api) -> None:
    """The timer of a wait records ConditionWaitTimedOut (not TimerFired) and wakes the run;
    the next completion does not mark the wait satisfied."""
    run_id, _ = await waiting(api, "cw-timeout", timeout=3600)
    async with api.state.store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE timers SET fire_at = now() - interval '1 second'"))

    async def fired() -> bool:
        return [state for _, state, _ in await timers(api, run_id)] == ["fired"]

    await sweep_until(api.state.store, fired)
    task = await api.poll_workflow()
    kinds = [e["event_type"] for e in task["history_events"]]
    assert "ConditionWaitTimedOut" in kinds and "TimerFired" not in kinds

    done = await complete(api, task, RESULT)

    assert done.status_code == 200, done.text
    events = await history(api, "cw-timeout", run_id)
    [timed_out] = of_type(events, "ConditionWaitTimedOut")
    assert (timed_out["condition_wait_id"], timed_out["timer_id"]) == ((f"{run_id}:1",) * 2)
    assert of_type(events, "ConditionWaitSatisfied") == []


async def fire_timers_now(api: Api, run_id: str) -> None:
    async with api.state.store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE timers SET fire_at = now() - interval '1 second'"))

    async def fired() -> bool:
        return "fired" in [state for _, state, _ in await timers(api, run_id)]

    await sweep_until(api.state.store, fired)


async def inbox(api: Api, run_id: str) -> list[tuple[str, str, bool]]:
    async with api.state.store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT event_type, idempotency_key, applied FROM inbox_events"
                " WHERE run_id = :r ORDER BY id"
            ),
            {"r": run_id},
        )
        return [(row.event_type, row.idempotency_key, row.applied) for row in rows]


async def test_a_timeout_fired_while_the_code_found_the_wait_true_is_dropped(api: Api) -> None:
    """The timer fires while the task the signal woke runs: its ConditionWaitTimedOut waits in
    the inbox, unseen by the code, which found the predicate true. The completion records the
    wait satisfied and drops the unseen timeout, so history says what the code saw."""
    run_id, _ = await waiting(api, "cw-race")
    await signal(api, "cw-race")
    task = await api.poll_workflow()
    await fire_timers_now(api, run_id)
    assert [kind for kind, _, applied in await inbox(api, run_id) if not applied] == [
        "ConditionWaitTimedOut"
    ]

    done = await complete(api, task, RESULT)

    assert done.status_code == 200, done.text
    events = await history(api, "cw-race", run_id)
    assert of_type(events, "ConditionWaitTimedOut") == []
    assert len(of_type(events, "ConditionWaitSatisfied")) == 1
    assert [kind for kind, _, applied in await inbox(api, run_id) if not applied] == []


async def test_a_timeout_fired_while_the_code_reopened_the_wait_times_out_the_new_open(
    api: Api,
) -> None:
    """The same race when the code found the predicate still false: the re-open takes the
    unseen timeout with it, so the next task sees the re-opened wait timed out (the SDK takes
    the opens as one wait, timed out)."""
    run_id, _ = await waiting(api, "cw-race-reopen")
    await signal(api, "cw-race-reopen")
    task = await api.poll_workflow()
    await fire_timers_now(api, run_id)

    reopened = await complete(api, task, sdk_wait())

    assert reopened.status_code == 200, reopened.text
    woken = await api.poll_workflow()
    [timed_out] = [
        e["payload"] for e in woken["history_events"] if e["event_type"] == "ConditionWaitTimedOut"
    ]
    assert (timed_out["condition_wait_id"], timed_out["sequence"]) == (f"{run_id}:2", 2)
    kinds = [e["event_type"] for e in woken["history_events"]]
    assert kinds.index("ConditionWaitTimedOut") > max(
        i for i, kind in enumerate(kinds) if kind == "ConditionWaitOpened"
    )


@pytest.mark.parametrize(
    ("command", "status", "reason"),
    [
        ({"type": "open_condition_wait", "timeout_seconds": -1}, 422, "validation_failed"),
        ({"type": "open_condition_wait", "timeout_seconds": "soon"}, 422, "validation_failed"),
        ({"type": "open_condition_wait", "timeout_seconds": 1.5}, 422, "validation_failed"),
        ({"type": "open_condition_wait", "condition_key": 7}, 422, "validation_failed"),
        ({"type": "open_condition_wait", "timeout_seconds": 10**12}, 409, "invalid_commands"),
        ({"type": "open_condition_wait", "supersedes": 1}, 409, "invalid_commands"),
        ({"type": "open_condition_wait", "unknown": 1}, 409, "invalid_commands"),
        ({"type": "satisfy_condition_wait", "sequence": 1}, 409, "invalid_commands"),
    ],
    ids=[
        "negative",
        "text",
        "fraction",
        "key-not-text",
        "past-maximum",
        "derived-field",
        "unknown-field",
        "derived-command",
    ],
)
async def test_bad_waits_are_refused_and_write_nothing(
    api: Api, command: dict[str, Any], status: int, reason: str
) -> None:
    """Field errors are the reference's 422 `validation_failed` (`commands.0.field`); what
    only the server derives, and what the store refuses, is 409 `invalid_commands`. The task
    stays leased and the run's history is unchanged."""
    run_id = (await api.start("cw-bad"))["run_id"]
    await api.register()
    task = await api.poll_workflow()
    before = await history(api, "cw-bad", run_id)

    refused = await complete(api, task, command)

    assert (refused.status_code, refused.json()["reason"]) == (status, reason), refused.text
    if status == 422:
        assert list(refused.json()["errors"]) == [
            f"commands.0.{next(iter(command.keys() - {'type'}))}"
        ]
    assert await history(api, "cw-bad", run_id) == before
    assert await timers(api, run_id) == []
    retried = await complete(api, task, RESULT)  # the lease still holds
    assert retried.status_code == 200, retried.text
