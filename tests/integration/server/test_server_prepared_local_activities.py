"""Prepared local activities over the worker plane (PROTOCOL.md 5.6; SDK 2.12.0, 1.20).

The SDK's `Client.prepared_local_activity_operation` posts to
`/worker/workflow-tasks/{taskId}/local-activities/{operation}` (admission: checkpoint,
checkpoint-group, prepare, recover) and `.../local-activities/{activityAttemptId}/{operation}`
(control, heartbeat, outcome, acknowledge-cancellation), each naming the workflow task's lease.
Burrow does not install the prepared bridge: discovery does not advertise it, a stale lease is
refused as on every fenced call, and a current one is refused with 409
`worker_capability_not_supported`. Nothing is written either way.
"""

from __future__ import annotations

from typing import Any

from durable_workflow.client import _payload_completion_context

from tests.integration.server.conftest import WORKER_TOKEN, Api, fence
from tests.integration.server.test_worker_plane import history_types

ADMISSIONS = ["checkpoint", "checkpoint-group", "prepare", "recover"]
ATTEMPT_CALLS = ["control", "heartbeat", "outcome", "acknowledge-cancellation"]


def path(task_id: str, operation: str) -> str:
    """The SDK's path for the operation (an attempt call names the activity attempt)."""
    attempt = "attempt-1/" if operation in ATTEMPT_CALLS else ""
    return f"/worker/workflow-tasks/{task_id}/local-activities/{attempt}{operation}"


def body(operation: str) -> dict[str, Any]:
    """A body of the SDK's shape for the operation (the lease fence is added by the caller)."""
    match operation:
        case "checkpoint" | "checkpoint-group":
            return {"checkpoint_id": "c" * 64, "start_sequence": 1, "commands": []}
        case "prepare":
            return {"sequence": 1, "worker_attempt_id": "n" * 64, "descriptor": {}}
        case "recover":
            return {"sequence": 1, "descriptor": {}}
        case "outcome":
            return {"report": {"outcome": "completed"}}
        case "heartbeat":
            return {"progress": {}}
        case "acknowledge-cancellation":
            return {"request_id": "r1"}
        case _:
            return {"renew_lease": True}


async def leased(api: Api, workflow_id: str) -> tuple[str, dict[str, Any]]:
    await api.register()
    started = await api.start(workflow_id)
    return started["run_id"], await api.poll_workflow()


async def test_each_operation_on_a_current_lease_is_refused_unsupported(api: Api) -> None:
    """PROTOCOL 3.1, 5.6, 1.20 prepared locals: not advertised (the SDK refuses prepared locals
    unless it is); each SDK path on a current lease is 409 naming the capability; nothing
    written, the lease kept."""
    response = await api.http.get(
        "/api/cluster/info", headers={"Authorization": f"Bearer {WORKER_TOKEN}"}
    )
    capabilities = response.json()["worker_protocol"]["server_capabilities"]
    for name in ("prepared_local_activities", "prepared_local_activity_groups"):
        assert capabilities.get(name) in (None, False)
    run_id, task = await leased(api, "wf-pla")
    for operation in ADMISSIONS + ATTEMPT_CALLS:
        url = path(task["task_id"], operation)
        fenced = fence(task, **body(operation))
        if operation in {*ADMISSIONS, "outcome"}:  # the SDK's own path pattern for these
            assert _payload_completion_context(url, fenced, allow_prepared=True) is not None
        refused = await api.worker("POST", "/api" + url, json=fenced)
        answer = refused.json()
        assert (refused.status_code, answer["reason"]) == (409, "worker_capability_not_supported")
        group = operation == "checkpoint-group"
        assert answer["capability"] == (
            "prepared_local_activity_groups" if group else "prepared_local_activities"
        )
        assert (answer["operation"], answer["task_id"]) == (operation, task["task_id"])
    assert await history_types(api, run_id) == ["WorkflowStarted"]
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.attempt == task["workflow_task_attempt"]


async def test_a_stale_lease_is_refused_first_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL 5.6: wrong attempt, wrong owner, unknown task: each its lease reason."""
    run_id, task = await leased(api, "wf-pla-stale")
    for operation in ("prepare", "outcome"):
        await _refused_stale(api, task, operation)
    assert await history_types(api, run_id) == ["WorkflowStarted"]


async def _refused_stale(api: Api, task: dict[str, Any], operation: str) -> None:
    url = "/api" + path(task["task_id"], operation)
    stale = await api.worker(
        "POST", url, json={**fence(task, **body(operation)), "workflow_task_attempt": 7}
    )
    assert (stale.status_code, stale.json()["reason"]) == (409, "workflow_task_attempt_mismatch")
    other = await api.worker(
        "POST", url, json={**fence(task, **body(operation)), "lease_owner": "w2"}
    )
    assert (other.status_code, other.json()["reason"]) == (409, "lease_owner_mismatch")
    unknown = await api.worker(
        "POST",
        "/api" + path("00000000-0000-0000-0000-000000000000", operation),
        json=fence(task, **body(operation)),
    )
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "task_not_found")


async def test_bad_operation_or_fence_is_refused_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL 5.6: an operation the SDK does not define is 404; a body without the lease
    fence is 422; neither writes."""
    run_id, task = await leased(api, "wf-pla-bad")
    base = f"/api/worker/workflow-tasks/{task['task_id']}/local-activities"
    for url in (f"{base}/launch", f"{base}/attempt-1/prepare", f"{base}/attempt-1/launch"):
        wrong = await api.worker("POST", url, json=fence(task))
        assert (wrong.status_code, wrong.json()["reason"]) == (
            404,
            "unknown_local_activity_operation",
        )
    unfenced = await api.worker("POST", f"{base}/prepare", json={"sequence": 1})
    assert unfenced.status_code == 422
    assert "workflow_task_attempt" in unfenced.json()["errors"]
    assert await history_types(api, run_id) == ["WorkflowStarted"]
