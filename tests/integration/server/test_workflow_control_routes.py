"""The workflow control-plane routes the SDK 2.12.0 `Client` calls, through the real `Client`
on the in-process app (PROTOCOL.md 17; the Durable Workflow server's WorkflowController and
HistoryController shapes, paging and error bodies)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest
from durable_workflow import Client, Worker, activity, workflow
from durable_workflow.errors import ServerError, WorkflowNotFound
from durable_workflow.workflow import ActivityRetryPolicy, CompleteWorkflow, FailWorkflow, replay

from burrow import codec
from burrow.store.models import IdReusePolicy
from tests.integration.server.conftest import (
    GREET,
    OPERATOR_TOKEN,
    QUEUE,
    WORKER_TOKEN,
    WORLD,
    Api,
    fence,
)

HELLO = {"codec": "avro", "blob": "wwHioz3/VYAiNwoYaGVsbG8sIHdvcmxk"}  # "hello, world"


@pytest.fixture
async def client(api: Api) -> AsyncIterator[Client]:
    """The SDK's Client, its HTTP calls served by the in-process app."""
    sdk = Client("http://test", token=OPERATOR_TOKEN)
    await sdk._http.aclose()
    sdk._http = api.http  # the app's ASGI transport; the SDK adds its own headers
    yield sdk


async def _history(api: Api, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    response = await api.control("GET", f"/api/workflows/{workflow_id}/runs/{run_id}/history")
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [e["event_type"] for e in events]


async def _run_rows(api: Api, workflow_id: str) -> list[tuple[str, str, object]]:
    runs = await api.state.store.workflow_runs(namespace="default", workflow_id=workflow_id)
    return [(r.run.run_id, r.run.status.value, r.run.continued_to_run_id) for r in runs]


async def _start_again(api: Api, workflow_id: str) -> str:
    """A new run of a closed workflow id (the HTTP start never reuses one; the store may)."""
    run = await api.state.store.start_workflow(
        namespace="default",
        workflow_id=workflow_id,
        workflow_type="greeter",
        task_queue=QUEUE,
        input=WORLD,
        id_reuse_policy=IdReusePolicy.ALLOW_DUPLICATE,
    )
    return run.run_id


async def _complete(api: Api, *commands: dict[str, Any]) -> None:
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=list(commands)))
    assert done.status_code == 200, done.text


async def _activity(api: Api, *, fail: bool = False) -> None:
    attempt = await api.poll_activity()
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    base = f"/api/worker/activity-tasks/{attempt['task_id']}"
    if fail:
        failure = {"message": "card declined", "type": "ValueError", "non_retryable": True}
        body: dict[str, Any] = {**own, "failure": failure}
        response = await api.worker("POST", f"{base}/fail", json=body)
    else:
        response = await api.worker("POST", f"{base}/complete", json={**own, "result": HELLO})
    assert response.status_code == 200, response.text


FAIL = {"type": "fail_workflow", "message": "card declined", "exception_type": "ValueError"}


async def _failed_after_one_step(api: Api, workflow_id: str) -> str:
    """A run whose step 1 completed and whose step 2 failed it; its run id."""
    await api.register()
    started = await api.start(workflow_id)
    await _complete(api, GREET)
    await _activity(api)
    await _complete(api, GREET)
    await _activity(api, fail=True)
    await _complete(api, FAIL)
    run_id: str = started["run_id"]
    return run_id


async def test_describe_has_the_reference_shape_and_the_sdk_decodes_it(
    api: Api, client: Client
) -> None:
    """PROTOCOL 17 (`describe_workflow`, `describe_workflow_run`; reference `formatRun`): the
    decoded input beside its envelope, run_number, run_count, is_current_run, timeouts and
    deadlines, actions; unknown ids are 404 `instance_not_found` / `run_not_found`."""
    body = {"workflow_id": "wf-d", "workflow_type": "greeter", "task_queue": QUEUE}
    timeouts = {"execution_timeout_seconds": 3600, "run_timeout_seconds": 600}
    started = await api.control("POST", "/api/workflows", json={**body, "input": WORLD, **timeouts})
    run_id = started.json()["run_id"]
    raw = (await api.control("GET", "/api/workflows/wf-d")).json()
    assert (raw["input"], raw["input_envelope"], raw["output"]) == (["world"], WORLD, None)
    assert (raw["run_number"], raw["run_count"], raw["is_current_run"]) == (1, 1, True)
    assert (raw["status"], raw["status_bucket"], raw["is_terminal"]) == (
        "pending",
        "running",
        False,
    )
    assert raw["actions"]["can_signal"] and not raw["actions"]["can_archive"]
    assert raw["execution_deadline_at"] is not None and raw["run_deadline_at"] is not None
    assert (raw["execution_timeout_seconds"], raw["run_timeout_seconds"]) == (3600, 600)
    assert isinstance(raw["execution_timeout_seconds"], int)

    described = await client.describe_workflow("wf-d")
    assert (described.run_id, described.input, described.status) == (run_id, ["world"], "pending")
    run = await client.describe_workflow_run("wf-d", run_id)
    assert (run.run_number, run.run_count, run.is_current_run) == (1, 1, True)
    assert (run.input, run.execution_timeout_seconds, run.run_timeout_seconds) == (
        ["world"],
        3600,
        600,
    )
    assert run.execution_deadline_at is not None and run.run_deadline_at is not None
    assert run.actions is not None and run.actions["can_terminate"] is True

    with pytest.raises(WorkflowNotFound):
        await client.describe_workflow("nope")
    missing = await api.control("GET", "/api/workflows/nope")
    assert (missing.status_code, missing.json()["reason"]) == (404, "instance_not_found")
    for bad in ("not-a-run", "00000000-0000-0000-0000-000000000000"):
        gone = await api.control("GET", f"/api/workflows/wf-d/runs/{bad}")
        assert (gone.status_code, gone.json()["reason"]) == (404, "run_not_found")
        assert (gone.json()["workflow_id"], gone.json()["run_id"]) == ("wf-d", bad)


async def test_list_workflow_runs_numbers_a_chain_oldest_first(api: Api, client: Client) -> None:
    """PROTOCOL 17 (`list_workflow_runs`; reference `runs`): every run of the id, oldest first,
    `run_count`; describe numbers each run and marks the current one; unknown id is 404."""
    first = await api.start("wf-r")
    await api.control("POST", "/api/workflows/wf-r/terminate", json={})
    second = {"run_id": await _start_again(api, "wf-r")}
    listed = await client.list_workflow_runs("wf-r")
    assert listed.run_count == 2
    assert [(r.run_id, r.run_number, r.status) for r in listed.runs] == [
        (first["run_id"], 1, "terminated"),
        (second["run_id"], 2, "pending"),
    ]
    assert [r.is_current_run for r in listed.runs] == [False, True]
    old = await client.describe_workflow_run("wf-r", first["run_id"])
    assert (old.run_number, old.run_count, old.is_current_run) == (1, 2, False)
    with pytest.raises(WorkflowNotFound):
        await client.list_workflow_runs("nope")
    missing = await api.control("GET", "/api/workflows/nope/runs")
    assert (missing.status_code, missing.json()["reason"]) == (404, "instance_not_found")


async def test_list_workflows_status_names_query_and_paging(api: Api, client: Client) -> None:
    """PROTOCOL 17 (`list_workflows`): `pending` (not yet past its start), `waiting` (no workflow
    task open), `running` (every open run), `canceled`/`cancelled`; `failed` and `completed`
    are the reference's status buckets (a cancelled run is `failed`); `query` matches the
    workflow id; `next_page_token` pages; an unknown status is 422 and nothing is written."""
    await api.register()
    await api.start("wait-1")
    await _complete(api, GREET)  # wait-1 now waits on its activity
    await api.start("pend-1")
    await api.start("pend-2")
    await api.start("gone-1")
    await api.control("POST", "/api/workflows/gone-1/cancel", json={})

    async def ids(**filters: Any) -> list[str]:
        page = await client.list_workflows(**filters)
        return [w.workflow_id for w in page.executions]

    waiting = (await api.control("GET", "/api/workflows/wait-1")).json()
    assert (waiting["wait_kind"], waiting["wait_reason"]) == ("activity", "waiting for an activity")
    assert waiting["last_progress_at"] is not None
    assert (await api.control("GET", "/api/workflows/pend-1")).json()["wait_kind"] is None
    assert await ids(status="pending") == ["pend-2", "pend-1"]
    assert await ids(status="waiting") == ["wait-1"]
    assert await ids(status="running") == ["pend-2", "pend-1", "wait-1"]
    listed = await client.list_workflows(status="running")
    assert [w.status for w in listed.executions] == ["pending", "pending", "waiting"]
    assert await ids(status="canceled") == await ids(status="cancelled") == ["gone-1"]
    assert await ids(status="failed") == ["gone-1"]  # the reference's bucket
    assert await ids(status="completed") == []
    assert await ids(query="pend") == ["pend-2", "pend-1"]
    assert await ids(query="%") == []

    seen: list[str] = []
    token: str | None = None
    while True:
        page = await client.list_workflows(page_size=3, next_page_token=token)
        assert len(page.executions) <= 3
        seen += [w.workflow_id for w in page.executions]
        token = page.next_page_token
        if token is None:
            break
    assert seen == ["gone-1", "pend-2", "pend-1", "wait-1"]
    raw = (await api.control("GET", "/api/workflows", params={"page_size": "2"})).json()
    assert raw["workflow_count"] == 2
    assert {"status_bucket", "is_terminal", "started_at", "search_attributes"} <= set(
        raw["workflows"][0]
    )

    before = await api.state.store.list_workflows(namespace="default")
    bad = await api.control("GET", "/api/workflows", params={"status": "sleeping"})
    assert (bad.status_code, bad.json()["reason"]) == (422, "validation_failed")
    assert "status" in bad.json()["errors"]
    assert await api.state.store.list_workflows(namespace="default") == before


async def test_export_history_is_served_at_the_sdk_path(api: Api, client: Client) -> None:
    """PROTOCOL 17 (`export_history`; reference HistoryController::export): the run's replay
    bundle at `.../history/export`; an unknown run is 404 `run_not_found`."""
    started = await api.start("wf-x")
    bundle = await client.export_history("wf-x", started["run_id"])
    assert bundle["workflow"]["run_id"] == started["run_id"]
    assert [e["event_type"] for e in bundle["history_events"]] == ["WorkflowStarted"]
    assert bundle["integrity"]["checksum"]
    gone = await api.control(
        "GET", "/api/workflows/wf-x/runs/00000000-0000-0000-0000-000000000000/history/export"
    )
    assert (gone.status_code, gone.json()["reason"]) == (404, "run_not_found")


async def test_repair_re_readies_a_lost_task_and_republishes_its_wake(
    api: Api, client: Client
) -> None:
    """D3, PROTOCOL 14, 17 (`repair_workflow`): an expired workflow-task lease is handed back as
    the next attempt and announced (`repair_dispatched`); a run with nothing to repair is
    `repair_not_needed`; each repair records RepairRequested (the reference's event) under its
    command id, which the next workflow task sees and completes past; a closed run is 409
    `run_not_active` and nothing is written; an unknown id is 404."""
    await api.register()
    await api.start("wf-p")
    task = await api.poll_workflow()
    await api.state.store.transactions.run(
        lambda txn: txn.conn.exec_driver_sql(
            "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 second'"
            f" WHERE task_id = '{task['task_id']}'"
        )
    )
    run_id = task["run_id"]
    assert _types(await _history(api, "wf-p", run_id)) == ["WorkflowStarted"]
    repaired = await client.repair_workflow("wf-p")
    assert (repaired.outcome, repaired.command_status) == ("repair_dispatched", "accepted")
    assert repaired.raw is not None and repaired.raw["repair"]["leases_expired"] == 1
    [_, recorded] = await _history(api, "wf-p", run_id)
    assert recorded["event_type"] == "RepairRequested"  # D3: who did what, in history
    assert recorded["workflow_task_id"] is None
    assert recorded["payload"] == {
        "workflow_command_id": repaired.command_id,
        "workflow_instance_id": "wf-p",
        "workflow_run_id": run_id,
        "command_type": "repair",
        "outcome": "repair_dispatched",
        "task_id": task["task_id"],
        "task_type": "workflow",
    }
    again = await api.poll_workflow()
    assert again["task_id"] == task["task_id"]
    assert again["workflow_task_attempt"] == task["workflow_task_attempt"] + 1
    assert _types(again["history_events"]) == ["WorkflowStarted", "RepairRequested"]
    url = f"/api/worker/workflow-tasks/{again['task_id']}/complete"
    timer = await api.worker(
        "POST", url, json=fence(again, commands=[{"type": "start_timer", "delay_seconds": 600}])
    )
    assert timer.status_code == 200, timer.text
    idle = await api.control("POST", "/api/workflows/wf-p/repair", json={"request_id": "r-2"})
    assert idle.json()["outcome"] == "repair_not_needed"
    last = (await _history(api, "wf-p", run_id))[-1]
    assert (last["event_type"], last["payload"]["workflow_command_id"]) == (
        "RepairRequested",
        idle.json()["command_id"],
    )
    assert (last["payload"]["outcome"], last["payload"]["wait_kind"]) == (
        "repair_not_needed",
        "timer",
    )
    assert last["payload"]["request_id"] == "r-2"

    await api.control("POST", "/api/workflows/wf-p/terminate", json={})
    before = await _history(api, "wf-p", run_id)
    refused = await api.control("POST", "/api/workflows/wf-p/repair", json={})
    assert (refused.status_code, refused.json()["reason"]) == (409, "run_not_active")
    assert refused.json()["control_plane"]["operation"] == "repair"
    assert await _history(api, "wf-p", run_id) == before
    with pytest.raises(WorkflowNotFound):
        await client.repair_workflow("nope")


async def test_archive_a_closed_run_once(api: Api, client: Client) -> None:
    """D3, PROTOCOL 17 (`archive_workflow`; reference `archived` with the reason): an open run
    is 409 `run_not_closed` and nothing is written; the archive records ArchiveRequested and
    WorkflowArchived; a resend is `archive_not_needed` and records only ArchiveRequested;
    describe shows the archive and no longer offers it; a bad body writes nothing."""
    started = await api.start("wf-a")
    run_id = started["run_id"]
    refused = await api.control("POST", "/api/workflows/wf-a/archive", json={"reason": "x"})
    assert (refused.status_code, refused.json()["reason"]) == (409, "run_not_closed")
    assert refused.json()["control_plane"]["operation"] == "archive"
    assert _types(await _history(api, "wf-a", run_id)) == ["WorkflowStarted"]  # nothing written
    assert (await api.control("GET", "/api/workflows/wf-a")).json()["archived"] is False
    await api.control("POST", "/api/workflows/wf-a/cancel", json={})
    closed = _types(await _history(api, "wf-a", run_id))
    archived = await client.archive_workflow("wf-a", reason="done with it")
    assert (archived.outcome, archived.run_id) == ("archived", started["run_id"])
    assert archived.raw is not None and archived.raw["reason"] == "done with it"
    # D3, reference WorkflowControlPlaneTest: ArchiveRequested, then WorkflowArchived, with the
    # reason and the command that archived it.
    requested, marked = (await _history(api, "wf-a", run_id))[len(closed) :]
    command = archived.command_id
    assert requested["payload"] == {
        "workflow_command_id": command,
        "workflow_instance_id": "wf-a",
        "workflow_run_id": run_id,
        "command_type": "archive",
        "outcome": "archived",
        "reason": "done with it",
    }
    assert (marked["event_type"], marked["payload"]["archive_command_id"]) == (
        "WorkflowArchived",
        command,
    )
    assert marked["payload"]["reason"] == "done with it"
    resent = await client.archive_workflow("wf-a", reason="done with it")
    assert resent.outcome == "archive_not_needed"
    events = await _history(api, "wf-a", run_id)
    assert _types(events) == [*closed, "ArchiveRequested", "WorkflowArchived", "ArchiveRequested"]
    assert events[-1]["payload"]["outcome"] == "archive_not_needed"
    shown = (await api.control("GET", "/api/workflows/wf-a")).json()
    assert (shown["archived"], shown["archive_reason"]) == (True, "done with it")
    assert shown["actions"]["can_archive"] is False
    too_long = await api.control("POST", "/api/workflows/wf-a/archive", json={"reason": "r" * 1001})
    assert (too_long.status_code, too_long.json()["reason"]) == (422, "validation_failed")
    assert await _history(api, "wf-a", run_id) == events
    with pytest.raises(WorkflowNotFound):
        await client.archive_workflow("nope")


async def test_redrive_continues_a_failed_run_reusing_its_completed_steps(
    api: Api, client: Client
) -> None:
    """D3, PROTOCOL 17 (`redrive_workflow`; the reference's FailedRunRedrivePlan): a new run of
    the same id whose history holds the failed run's completed step 1, so its first workflow
    task schedules step 2 again; the failed run points at it and records RedriveRequested; a
    resend finds the same run (200) and records nothing."""
    failed_run = await _failed_after_one_step(api, "wf-rd")
    result = await client.redrive_workflow("wf-rd", failed_run, request_id="redrive-1")
    assert (result.outcome, result.command_status) == ("redriven", "accepted")
    assert result.raw is not None
    assert (result.raw["continued_from_run_id"], result.raw["resume_step_sequence"]) == (
        failed_run,
        2,
    )
    new_run = result.run_id or ""
    assert new_run != failed_run
    recorded = (await _history(api, "wf-rd", failed_run))[-2:]
    assert _types(recorded) == ["WorkflowFailed", "RedriveRequested"]  # D3
    assert recorded[1]["payload"] == {
        "workflow_command_id": result.command_id,
        "workflow_instance_id": "wf-rd",
        "workflow_run_id": failed_run,
        "request_id": "redrive-1",
        "command_type": "redrive",
        "outcome": "redriven",
        "continued_to_run_id": new_run,
        "resume_step_sequence": 2,
    }
    before = await _history(api, "wf-rd", failed_run)
    resent = await api.control("POST", f"/api/workflows/wf-rd/runs/{failed_run}/redrive", json={})
    assert (resent.status_code, resent.json()["run_id"]) == (200, new_run)
    assert resent.json()["resume_step_sequence"] == 2
    assert await _history(api, "wf-rd", failed_run) == before  # a resend records nothing
    shown = (await api.control("GET", "/api/workflows/wf-rd")).json()
    assert (shown["run_id"], shown["continued_from_run_id"]) == (new_run, failed_run)

    task = await api.poll_workflow()
    assert task["run_id"] == new_run
    reused = [(e["event_type"], e["payload"].get("sequence")) for e in task["history_events"]]
    assert reused == [("WorkflowStarted", None), ("ActivityScheduled", 1), ("ActivityCompleted", 1)]
    completed = task["history_events"][2]["payload"]
    assert codec.decode({"codec": "avro", "blob": completed["result"]}) == "hello, world"
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=[GREET]))
    assert done.status_code == 200, done.text
    scheduled = [
        e for e in await _history(api, "wf-rd", new_run) if e["event_type"] == "ActivityScheduled"
    ]
    assert [e["payload"]["sequence"] for e in scheduled] == [1, 2]
    assert await _run_rows(api, "wf-rd") == [
        (failed_run, "failed", new_run),
        (new_run, "running", None),
    ]
    runs = await client.list_workflow_runs("wf-rd")
    assert [r.run_number for r in runs.runs] == [1, 2]


async def test_redrive_refusals_write_nothing(api: Api, client: Client) -> None:
    """PROTOCOL 17 (`redrive_workflow`): a run that did not fail is 409 `run_not_failed`, a run
    that is not the current one 409 `source_run_not_current`, a failure with no failed activity
    step 409 `unrecorded_failure_boundary`; an unknown run is 404 `run_not_found`; nothing is
    written by any of them."""
    await api.register()
    early = (await api.start("wf-early"))["run_id"]
    await _complete(api, FAIL)  # it failed before any step
    cases = [("wf-early", early, "unrecorded_failure_boundary")]
    late_run = (await api.start("wf-late"))["run_id"]
    cases.append(("wf-late", late_run, "run_not_failed"))
    older = (await api.start("wf-old"))["run_id"]
    await api.control("POST", "/api/workflows/wf-old/terminate", json={})
    await _start_again(api, "wf-old")
    cases.append(("wf-old", older, "source_run_not_current"))
    for workflow_id, run_id, reason in cases:
        before = (await _run_rows(api, workflow_id), await _history(api, workflow_id, run_id))
        refused = await api.control(
            "POST", f"/api/workflows/{workflow_id}/runs/{run_id}/redrive", json={}
        )
        assert (refused.status_code, refused.json()["reason"]) == (409, reason), workflow_id
        assert refused.json()["control_plane"]["operation"] == "redrive"
        after = (await _run_rows(api, workflow_id), await _history(api, workflow_id, run_id))
        assert after == before
    with pytest.raises(ServerError) as missing:
        await client.redrive_workflow("wf-late", "00000000-0000-0000-0000-000000000000")
    assert (missing.value.status, missing.value.reason()) == (404, "run_not_found")


SHIPPING: dict[str, Any] = {"charges": 0, "courier": False}


@activity.defn(name="redrive-charge")
def charge(order: str) -> str:
    SHIPPING["charges"] += 1
    return f"charged {order}"


@activity.defn(name="redrive-ship")
def ship(receipt: str) -> str:
    if not SHIPPING["courier"]:
        raise ValueError("no courier")
    return f"shipped after {receipt}"


@workflow.defn(name="redrive-order")
class OrderWorkflow:
    """Charge, then ship; shipping is tried once."""

    def run(self, ctx: Any, order: str) -> Generator[Any, Any, Any]:
        receipt = yield ctx.schedule_activity("redrive-charge", [order])
        once = ActivityRetryPolicy(max_attempts=1)
        shipped = yield ctx.schedule_activity("redrive-ship", [receipt], retry_policy=once)
        return shipped


async def test_an_sdk_worker_finishes_a_redriven_run_without_charging_again(api: Api) -> None:
    """D1, D3, PROTOCOL 17 (`redrive_workflow`), with the real SDK worker: the failed run's
    completed charge is reused by the redriven run, which ships and completes after a repair;
    the charge ran once; the SDK's replay() of both runs' histories, with the repair, archive
    and redrive events in them, gives the commands the runs closed with."""
    SHIPPING.update(charges=0, courier=False)
    sdk = Client("http://test", control_token=OPERATOR_TOKEN, worker_token=WORKER_TOKEN)
    await sdk._http.aclose()
    sdk._http = api.http
    handle = await sdk.start_workflow(
        workflow_type="redrive-order", workflow_id="order-1", task_queue=QUEUE, input=["A"]
    )
    runner = Worker(
        sdk, task_queue=QUEUE, workflows=[OrderWorkflow], activities=[charge, ship], poll_timeout=2
    )
    failed = await runner.run_until(workflow_id="order-1", timeout=30)
    assert failed.status == "failed"
    SHIPPING["courier"] = True
    redriven = await sdk.redrive_workflow("order-1", handle.run_id or "")
    assert (await sdk.repair_workflow("order-1")).outcome == "repair_dispatched"
    runner = Worker(
        sdk, task_queue=QUEUE, workflows=[OrderWorkflow], activities=[charge, ship], poll_timeout=2
    )
    done = await runner.run_until(workflow_id="order-1", timeout=30)
    assert (done.status, done.run_id) == ("completed", redriven.run_id)
    assert done.output == "shipped after charged A"
    assert SHIPPING["charges"] == 1
    await sdk.archive_workflow("order-1", reason="shipped")

    # D1: the SDK's replay() passes over the repair, archive and redrive the runs recorded.
    new_run = redriven.run_id or ""
    events = (await sdk.get_history("order-1", new_run))["events"]
    assert {"RepairRequested", "ArchiveRequested", "WorkflowArchived"} <= set(_types(events))
    replayed = replay(OrderWorkflow, events, ["A"], workflow_id="order-1", run_id=new_run)
    assert replayed.commands[-1] == CompleteWorkflow(result="shipped after charged A")
    failed_run = handle.run_id or ""
    events = (await sdk.get_history("order-1", failed_run))["events"]
    assert _types(events)[-1] == "RedriveRequested"
    replayed = replay(OrderWorkflow, events, ["A"], workflow_id="order-1", run_id=failed_run)
    assert isinstance(replayed.commands[-1], FailWorkflow)
