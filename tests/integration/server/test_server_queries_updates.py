"""Queries and updates over HTTP: the control-plane calls and worker-routed query tasks
(PROTOCOL.md 6.3, 17, 2.4; SPEC M4b).
"""

from __future__ import annotations

import asyncio
from typing import Any

from burrow import codec
from tests.integration.server.conftest import QUEUE, WORLD, Api

QUERY_TASKS = "/api/worker/query-tasks"


def envelope(value: Any) -> dict[str, Any]:
    return dict(codec.encode(value))


async def poll_query(api: Api, worker_id: str = "w1") -> dict[str, Any]:
    body = {"worker_id": worker_id, "task_queue": QUEUE, "timeout_seconds": 5}
    response = await api.worker("POST", f"{QUERY_TASKS}/poll", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    assert task is not None
    return task


def query_fence(task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "lease_owner": task["lease_owner"],
        "query_task_attempt": task["query_task_attempt"],
        **extra,
    }


async def test_query_is_answered_by_a_polling_worker(api: Api) -> None:
    """PROTOCOL 6.3, 17: the query blocks until a worker answers its query task; the task
    carries what the SDK replays (history from sequence 1, workflow and query arguments)."""
    await api.register()
    started = await api.start("wf-q")
    asking = asyncio.create_task(
        api.control("POST", "/api/workflows/wf-q/query/status", json={"input": envelope([7])})
    )
    task = await poll_query(api)
    assert task["workflow_id"] == "wf-q"
    assert task["run_id"] == started["run_id"]
    assert (task["query_name"], task["workflow_type"]) == ("status", "greeter")
    assert (task["lease_owner"], task["task_queue"]) == ("w1", QUEUE)
    assert task["query_task_attempt"] == 1
    assert task["workflow_arguments"] == WORLD
    assert codec.decode(task["query_arguments"]) == [7]
    assert task["history_events"][0]["sequence"] == 1
    assert task["history_events"][0]["event_type"] == "WorkflowStarted"
    answer = {"result": "ok", "result_envelope": envelope("ok")}
    done = await api.worker(
        "POST", f"{QUERY_TASKS}/{task['query_task_id']}/complete", json=query_fence(task, **answer)
    )
    assert done.status_code == 200, done.text
    response = await asking
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["result"] is None
    assert codec.decode(body["result_envelope"]) == "ok"
    assert body["run_id"] == started["run_id"]
    again = await api.worker(
        "POST", f"{QUERY_TASKS}/{task['query_task_id']}/complete", json=query_fence(task, **answer)
    )
    assert (again.status_code, again.json()["reason"]) == (409, "query_task_not_leased")
    types = [e.event_type for e in await api.state.store.read_history(run_id=started["run_id"])]
    assert types == ["WorkflowStarted"]  # queries never append history


async def test_query_failures_map_to_the_sdk_reasons(api: Api) -> None:
    """PROTOCOL 2.4: a rejected query is 409 `query_rejected`, an unknown one 404
    `rejected_unknown_query`, an unanswered one 504 `query_task_not_claimed`."""
    await api.register()
    await api.start("wf-qf")
    for reason, status in (("query_rejected", 409), ("rejected_unknown_query", 404)):
        asking = asyncio.create_task(api.control("POST", "/api/workflows/wf-qf/query/nope"))
        task = await poll_query(api)
        wrong = await api.worker(
            "POST",
            f"{QUERY_TASKS}/{task['query_task_id']}/fail",
            json={**query_fence(task), "lease_owner": "w2", "failure": {"message": "x"}},
        )
        assert (wrong.status_code, wrong.json()["reason"]) == (409, "lease_owner_mismatch")
        failure = {"message": "handler raised", "reason": reason, "type": "ValueError"}
        failed = await api.worker(
            "POST",
            f"{QUERY_TASKS}/{task['query_task_id']}/fail",
            json=query_fence(task, failure=failure),
        )
        assert failed.status_code == 200, failed.text
        response = await asking
        assert (response.status_code, response.json()["reason"]) == (status, reason)
        assert response.json()["message"] == "handler raised"
    unanswered = await api.control(
        "POST", "/api/workflows/wf-qf/query/nope", json={"timeout_seconds": 0.3}
    )
    assert (unanswered.status_code, unanswered.json()["reason"]) == (504, "query_task_not_claimed")
    unknown = await api.worker(
        "POST",
        f"{QUERY_TASKS}/00000000-0000-0000-0000-000000000000/complete",
        json={"lease_owner": "w1", "query_task_attempt": 1, "result_envelope": envelope(1)},
    )
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "query_task_not_found")
    missing = await api.control("POST", "/api/workflows/nobody/query/status")
    assert (missing.status_code, missing.json()["reason"]) == (404, "workflow_not_found")


async def complete_with(api: Api, task: dict[str, Any], commands: list[dict[str, Any]]) -> None:
    body = {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": commands,
    }
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text


async def test_update_is_accepted_once_then_completed(api: Api) -> None:
    """PROTOCOL 17: an update is accepted into history once per `request_id`; with
    `wait_for: completed` the call returns the result the worker recorded."""
    await api.register()
    await api.start("wf-u")
    first = await api.poll_workflow()
    await complete_with(api, first, [{"type": "start_timer", "delay_seconds": 3600}])
    update = {"input": envelope(["apple"]), "request_id": "add-1"}
    accepted = await api.control("POST", "/api/workflows/wf-u/update/add_item", json=update)
    assert accepted.status_code == 200, accepted.text
    body = accepted.json()
    assert (body["update_status"], body["outcome"]) == ("accepted", "accepted")
    assert (body["update_id"], body["request_id"]) == ("add-1", "add-1")
    resent = await api.control("POST", "/api/workflows/wf-u/update/add_item", json=update)
    assert resent.json()["outcome"] == "deduplicated"
    conflict = await api.control("POST", "/api/workflows/wf-u/update/other", json=update)
    assert (conflict.status_code, conflict.json()["reason"]) == (409, "request_id_conflict")

    waiting = asyncio.create_task(
        api.control(
            "POST",
            "/api/workflows/wf-u/update/add_item",
            json={**update, "wait_for": "completed", "wait_timeout_seconds": 10},
        )
    )
    task = await api.poll_workflow()
    types = [e["event_type"] for e in task["history_events"]]
    assert types.count("UpdateAccepted") == 1  # the resend added nothing
    await complete_with(
        api, task, [{"type": "complete_update", "update_id": "add-1", "result": envelope(1)}]
    )
    response = await waiting
    assert response.status_code == 200, response.text
    assert response.json()["update_status"] == "completed"
    assert codec.decode(response.json()["result_envelope"]) == 1


async def test_failed_update_is_422_update_status_failed(api: Api) -> None:
    """PROTOCOL 2.4: a failed update answers 422 with `update_status: failed` (UpdateFailed)."""
    await api.register()
    await api.start("wf-uf")
    first = await api.poll_workflow()
    await complete_with(api, first, [{"type": "start_timer", "delay_seconds": 3600}])
    update = {"request_id": "bad-1", "wait_for": "completed", "wait_timeout_seconds": 10}
    waiting = asyncio.create_task(
        api.control("POST", "/api/workflows/wf-uf/update/add_item", json=update)
    )
    task = await api.poll_workflow()
    fail = {"type": "fail_update", "update_id": "bad-1", "message": "empty item"}
    await complete_with(api, task, [fail])
    response = await waiting
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["update_status"], body["failure_message"]) == ("failed", "empty item")


async def test_update_on_a_closed_run_is_run_not_active(api: Api) -> None:
    """PROTOCOL 17: an update for a run that is no longer running is refused, nothing written."""
    await api.register()
    started = await api.start("wf-closed")
    await api.control("POST", "/api/workflows/wf-closed/terminate", json={})
    refused = await api.control("POST", "/api/workflows/wf-closed/update/add_item", json={})
    assert (refused.status_code, refused.json()["reason"]) == (409, "run_not_active")
    events = await api.state.store.read_history(run_id=started["run_id"])
    assert "UpdateAccepted" not in [e.event_type for e in events]


async def test_discovery_advertises_queries_and_update_wait_stages(api: Api) -> None:
    """PROTOCOL 3.1: `query_tasks: true` and the update `wait_for` stages the SDK requires."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    assert info["worker_protocol"]["server_capabilities"]["query_tasks"] is True
    update = info["control_plane"]["request_contract"]["operations"]["update"]
    assert update["fields"]["wait_for"]["canonical_values"] == ["accepted", "completed"]


async def test_query_poll_is_idempotent_by_poll_request_id(api: Api) -> None:
    """PROTOCOL 2.5, 6.3: a resent query poll gets the query task it leased, not another."""
    await api.register()
    await api.start("wf-qi")
    asking = [
        asyncio.create_task(
            api.control("POST", "/api/workflows/wf-qi/query/status", json={"timeout_seconds": 5})
        )
        for _ in range(2)
    ]
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
    first = await api.worker(
        "POST", f"{QUERY_TASKS}/poll", json={**body, "poll_request_id": "query-poll-1"}
    )
    again = await api.worker(
        "POST", f"{QUERY_TASKS}/poll", json={**body, "poll_request_id": "query-poll-1"}
    )
    other = await api.worker(
        "POST", f"{QUERY_TASKS}/poll", json={**body, "poll_request_id": "query-poll-2"}
    )
    tasks = [r.json()["task"] for r in (first, again, other)]
    assert tasks[1]["query_task_id"] == tasks[0]["query_task_id"]
    assert tasks[2]["query_task_id"] != tasks[0]["query_task_id"]
    for task in (tasks[0], tasks[2]):
        answer = query_fence(task, result_envelope=envelope("ok"))
        done = await api.worker(
            "POST", f"{QUERY_TASKS}/{task['query_task_id']}/complete", json=answer
        )
        assert done.status_code == 200, done.text
    for call in asking:
        assert (await call).status_code == 200
