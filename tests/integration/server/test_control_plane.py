"""Control plane over HTTP as the SDK Client uses it (PROTOCOL.md 17; SPEC M4b)."""

from __future__ import annotations

from tests.integration.server.conftest import QUEUE, WORLD, Api

START = {"workflow_id": "wf-1", "workflow_type": "greeter", "task_queue": QUEUE, "input": WORLD}


async def test_start_duplicate_policies(api: Api) -> None:
    """PROTOCOL 17: 201 `started_new`, `pending` (reference WorkflowControlPlaneTest); `fail` is
    409; `use-existing` returns the running run with its status."""
    first = await api.control("POST", "/api/workflows", json=START)
    assert first.status_code == 201
    assert (first.json()["outcome"], first.json()["status"]) == ("started_new", "pending")
    refused = await api.control(
        "POST", "/api/workflows", json={**START, "duplicate_policy": "fail"}
    )
    assert (refused.status_code, refused.json()["reason"]) == (409, "instance_already_started")
    same = await api.control(
        "POST", "/api/workflows", json={**START, "duplicate_policy": "use-existing"}
    )
    assert same.status_code == 200
    assert (same.json()["outcome"], same.json()["status"]) == (
        "returned_existing_active",
        "pending",
    )
    assert same.json()["run_id"] == first.json()["run_id"]
    unknown = await api.control(
        "POST", "/api/workflows", json={**START, "duplicate_policy": "terminate_existing"}
    )
    assert unknown.status_code == 422
    assert "duplicate_policy" in unknown.json()["errors"]
    assert len(await api.state.store.list_workflows(namespace="default")) == 1


async def test_describe_list_and_not_found(api: Api) -> None:
    """PROTOCOL 17: describe carries status (`pending` before a workflow task ran) and the input
    envelope; unknown ids are 404."""
    started = (await api.control("POST", "/api/workflows", json=START)).json()
    described = await api.control("GET", "/api/workflows/wf-1")
    assert described.status_code == 200
    body = described.json()
    assert (body["run_id"], body["status"], body["task_queue"]) == (
        started["run_id"],
        "pending",
        QUEUE,
    )
    assert body["input_envelope"] == WORLD
    run = await api.control("GET", f"/api/workflows/wf-1/runs/{started['run_id']}")
    assert run.json()["run_id"] == started["run_id"]
    listed = await api.control("GET", "/api/workflows?workflow_type=greeter")
    assert [w["workflow_id"] for w in listed.json()["workflows"]] == ["wf-1"]
    missing = await api.control("GET", "/api/workflows/nope")
    assert (missing.status_code, missing.json()["reason"]) == (404, "instance_not_found")
    bad_run = await api.control("GET", "/api/workflows/wf-1/runs/not-a-run")
    assert bad_run.status_code == 404


async def test_text_with_a_nul_character_is_refused_as_invalid_and_writes_nothing(
    api: Api,
) -> None:
    """Bad input: a NUL in an id, a signal name or a reason is a 422, never a 500."""
    refused = await api.control("POST", "/api/workflows", json={**START, "workflow_id": "a\x00b"})
    assert (refused.status_code, refused.json()["reason"]) == (422, "validation_failed")
    assert "workflow_id" in refused.json()["errors"]
    assert await api.state.store.list_workflows(namespace="default") == []
    await api.control("POST", "/api/workflows", json=START)
    signal = await api.control("POST", "/api/workflows/wf-1/signal/ap%00prove", json={})
    assert (signal.status_code, signal.json()["reason"]) == (422, "validation_failed")
    assert "NUL" in signal.json()["message"]
    terminate = await api.control(
        "POST", "/api/workflows/wf-1/terminate", json={"reason": "o\x00ps"}
    )
    assert (terminate.status_code, terminate.json()["reason"]) == (422, "validation_failed")
    assert (await api.control("GET", "/api/workflows/wf-1")).json()["status"] == "pending"


async def test_history_pages_from_sequence_one(api: Api) -> None:
    """PROTOCOL 9: `events` from sequence 1; the token continues after the last sequence."""
    started = (await api.control("POST", "/api/workflows", json=START)).json()
    url = f"/api/workflows/wf-1/runs/{started['run_id']}/history"
    page = (await api.control("GET", f"{url}?page_size=1000")).json()
    assert [e["event_type"] for e in page["events"]] == ["WorkflowStarted"]
    assert page["events"][0]["sequence"] == 1
    assert page["next_page_token"] is None


async def test_signal_is_idempotent_by_request_id(api: Api) -> None:
    """PROTOCOL 2.4, 17, 18.10: a resent signal with the same request_id is recorded once; the
    same request_id with other arguments is 409 `request_id_conflict`."""
    started = (await api.control("POST", "/api/workflows", json=START)).json()
    body = {"input": WORLD, "request_id": "sdk-python-signal-1"}
    first = await api.control("POST", "/api/workflows/wf-1/signal/approve", json=body)
    assert first.status_code == 202
    assert first.json()["outcome"] == "signal_received"
    again = await api.control("POST", "/api/workflows/wf-1/signal/approve", json=body)
    assert again.status_code == 202
    assert again.json()["outcome"] == "deduplicated"
    other = {"input": {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgpvdGhlcgA="}}
    conflict = await api.control(
        "POST", "/api/workflows/wf-1/signal/approve", json={**body, **other}
    )
    assert (conflict.status_code, conflict.json()["reason"]) == (409, "request_id_conflict")
    await api.register()
    task = await api.poll_workflow()
    assert task["run_id"] == started["run_id"]
    types = [e["event_type"] for e in task["history_events"]]
    assert types.count("SignalReceived") == 1


async def test_terminate_closes_the_run_and_then_signals_are_refused(api: Api) -> None:
    """PROTOCOL 17: terminate closes the run; a later signal is 409 `run_not_active`."""
    started = (await api.control("POST", "/api/workflows", json=START)).json()
    done = await api.control("POST", "/api/workflows/wf-1/terminate", json={"reason": "ops"})
    assert done.status_code == 200
    assert (await api.control("GET", "/api/workflows/wf-1")).json()["status"] == "terminated"
    history = await api.control("GET", f"/api/workflows/wf-1/runs/{started['run_id']}/history")
    last = history.json()["events"][-1]
    assert last["event_type"] == "WorkflowTerminated"
    assert last["payload"]["reason"] == "ops"
    refused = await api.control("POST", "/api/workflows/wf-1/signal/approve", json={})
    assert (refused.status_code, refused.json()["reason"]) == (409, "run_not_active")


async def test_cancel_closes_the_run_at_once(api: Api) -> None:
    """PROTOCOL 17: cancel closes the run as cancelled; its open workflow task is over (a late
    completion is 409 `run_closed`); a second cancel is 409 `run_not_active`."""
    started = (await api.control("POST", "/api/workflows", json=START)).json()
    await api.register()
    task = await api.poll_workflow()
    cancelled = await api.control("POST", "/api/workflows/wf-1/cancel", json={"reason": "no"})
    assert cancelled.status_code == 200
    assert cancelled.json()["outcome"] == "cancelled"
    assert (await api.control("GET", "/api/workflows/wf-1")).json()["status"] == "cancelled"
    history = await api.control("GET", f"/api/workflows/wf-1/runs/{started['run_id']}/history")
    types = [e["event_type"] for e in history.json()["events"]]
    assert types == ["WorkflowStarted", "CancelRequested", "WorkflowCancelled"]
    late = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json={
            "lease_owner": "w1",
            "workflow_task_attempt": task["workflow_task_attempt"],
            "commands": [{"type": "start_timer", "delay_seconds": 5}],
        },
    )
    assert (late.status_code, late.json()["reason"]) == (409, "run_closed")
    again = await api.control("POST", "/api/workflows/wf-1/cancel")
    assert (again.status_code, again.json()["reason"]) == (409, "run_not_active")
