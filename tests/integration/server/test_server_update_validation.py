"""Update validators over HTTP: validation tasks on the worker plane, the update refused or
accepted on the control plane (PROTOCOL.md 6.5, 3.3, 2.4; SPEC M4b).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from durable_workflow.worker import _server_supports_update_validation_tasks

from burrow import codec
from tests.integration.server.conftest import QUEUE, Api

VALIDATIONS = "/api/worker/update-validation-tasks"
VALIDATED = {"greeter": {"update_validators": ["approve"], "updates": ["approve", "free"]}}
MULTIPLEXED = {"task_kinds": ["workflow", "update_validation"]}
ZERO_ID = "00000000-0000-0000-0000-000000000000"


def envelope(value: Any) -> dict[str, Any]:
    return dict(codec.encode(value))


def verdict_fence(task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "lease_owner": task["lease_owner"],
        "update_validation_attempt": task["update_validation_attempt"],
        **extra,
    }


async def history_of(api: Api, run_id: str) -> list[str]:
    return [e.event_type for e in await api.state.store.read_history(run_id=run_id)]


async def started_with_validator(api: Api, workflow_id: str) -> dict[str, Any]:
    """A run whose worker declares a validator for `approve`, its first task done with."""
    await api.register(workflow_command_contracts=VALIDATED)
    started = await api.start(workflow_id)
    first = await api.poll_workflow(**MULTIPLEXED)
    assert first["task_kind"] == "workflow"
    return started


def update(api: Api, workflow_id: str, name: str = "approve", **extra: Any) -> Any:
    body = {"input": envelope([True]), "request_id": f"req-{workflow_id}", **extra}
    return asyncio.create_task(
        api.control("POST", f"/api/workflows/{workflow_id}/update/{name}", json=body)
    )


async def test_discovery_advertises_what_the_sdk_checks(api: Api) -> None:
    """PROTOCOL 3.3, 6.5: the SDK 2.12.0 worker with validators registers only when
    `synchronous_update_validation` is advertised with the multiplexed poll."""
    response = await api.control("GET", "/api/cluster/info")
    assert response.status_code == 200, response.text
    assert _server_supports_update_validation_tasks(response.json())


async def test_rejected_update_writes_nothing(api: Api) -> None:
    """PROTOCOL 6.5, 2.4: the validator's rejection reaches the caller as 422
    `update_validator_rejected` with its validation errors; no update event is written."""
    started = await started_with_validator(api, "wf-uv-no")
    before = await history_of(api, started["run_id"])
    calling = update(api, "wf-uv-no")
    task = await api.poll_workflow(**MULTIPLEXED)
    assert task["task_kind"] == "update_validation"
    assert (task["update_name"], task["workflow_type"]) == ("approve", "greeter")
    assert (task["workflow_id"], task["run_id"]) == ("wf-uv-no", started["run_id"])
    assert (task["update_validation_attempt"], task["lease_owner"]) == (1, "w1")
    assert codec.decode(task["update_arguments"]) == [True]
    assert task["history_events"][0]["event_type"] == "WorkflowStarted"
    failure = {
        "message": "approval required",
        "reason": "update_validator_rejected",
        "type": "ValueError",
        "validation_errors": {"approved": ["must be true"]},
    }
    path = f"{VALIDATIONS}/{task['update_validation_task_id']}/reject"
    rejected = await api.worker("POST", path, json=verdict_fence(task, failure=failure))
    assert rejected.status_code == 200, rejected.text
    assert rejected.json()["outcome"] == "rejected"
    response = await calling
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["reason"] == "update_validator_rejected"
    assert body["message"] == "approval required"
    assert body["validation_errors"] == {"approved": ["must be true"]}
    assert body["exception_type"] == "ValueError"
    assert await history_of(api, started["run_id"]) == before
    assert (
        await api.state.store.get_update(run_id=started["run_id"], update_id="req-wf-uv-no") is None
    )
    again = await api.worker("POST", path, json=verdict_fence(task, failure=failure))
    assert (again.status_code, again.json()["reason"]) == (
        409,
        "duplicate_update_validation_completion",
    )


async def test_approved_update_is_accepted(api: Api) -> None:
    """PROTOCOL 6.5: approved on the dedicated poll, the update is accepted as without a
    validator; an update the worker declares no validator for is not validated at all."""
    started = await started_with_validator(api, "wf-uv-yes")
    calling = update(api, "wf-uv-yes")
    polled = await api.worker(
        "POST", f"{VALIDATIONS}/poll", json={"worker_id": "w1", "task_queue": QUEUE}
    )
    task = polled.json()["task"]
    approved = await api.worker(
        "POST",
        f"{VALIDATIONS}/{task['update_validation_task_id']}/approve",
        json=verdict_fence(task),
    )
    assert approved.status_code == 200, approved.text
    assert approved.json()["outcome"] == "approved"
    response = await calling
    assert response.status_code == 200, response.text
    assert response.json()["update_status"] == "accepted"
    free = await update(api, "wf-uv-yes", name="free", request_id="req-free")
    assert free.status_code == 200, free.text
    for update_id in ("req-wf-uv-yes", "req-free"):
        row = await api.state.store.get_update(run_id=started["run_id"], update_id=update_id)
        assert row is not None
    # A resent update was validated already: it is deduplicated without a second validation.
    resent = await update(api, "wf-uv-yes")
    assert (resent.status_code, resent.json()["outcome"]) == (200, "deduplicated")


async def test_unanswered_validation_refuses_the_update(api: Api) -> None:
    """PROTOCOL 6.5, 2.4: no worker takes the validation in time: 504
    `update_validation_task_not_claimed`, retryable, and nothing is written."""
    started = await started_with_validator(api, "wf-uv-late")
    before = await history_of(api, started["run_id"])
    response = await update(api, "wf-uv-late", wait_timeout_seconds=0.3)
    assert response.status_code == 504, response.text
    assert response.json()["reason"] == "update_validation_task_not_claimed"
    assert response.json()["retryable"] is True
    assert await history_of(api, started["run_id"]) == before


async def test_verdicts_are_fenced(api: Api) -> None:
    """PROTOCOL 6.5: unknown, stale and foreign task ids are refused with the reasons the SDK
    treats as final; a refused verdict leaves the task to its lease holder."""
    started = await started_with_validator(api, "wf-uv-fence")
    before = await history_of(api, started["run_id"])
    calling = update(api, "wf-uv-fence")
    task = await api.poll_workflow(**MULTIPLEXED)
    task_id = task["update_validation_task_id"]
    cases = [
        (ZERO_ID, verdict_fence(task), 404, "update_validation_task_not_found"),
        ("not-a-uuid", verdict_fence(task), 404, "update_validation_task_not_found"),
        (
            task_id,
            verdict_fence(task, update_validation_attempt=2),
            409,
            "stale_update_validation_completion",
        ),
        (task_id, verdict_fence(task, lease_owner="w2"), 409, "stale_update_validation_completion"),
    ]
    for target, body, status, reason in cases:
        refused = await api.worker("POST", f"{VALIDATIONS}/{target}/approve", json=body)
        assert (refused.status_code, refused.json()["reason"]) == (status, reason), target
    malformed = await api.worker("POST", f"{VALIDATIONS}/{task_id}/approve", json={})
    assert malformed.status_code == 422
    # A query task is not a validation task, nor the other way round.
    query_id = await api.state.store.submit_query(
        namespace=task["namespace"],
        workflow_id="wf-uv-fence",
        query_name="status",
        arguments=envelope([]),
        timeout=timedelta(seconds=5),
    )
    foreign = await api.worker(
        "POST", f"{VALIDATIONS}/{query_id}/approve", json=verdict_fence(task)
    )
    assert (foreign.status_code, foreign.json()["reason"]) == (
        404,
        "update_validation_task_not_found",
    )
    bad_kind = await api.worker(
        "POST",
        "/api/worker/workflow-tasks/poll",
        json={"worker_id": "w1", "task_queue": QUEUE, "task_kinds": ["activity"]},
    )
    assert bad_kind.status_code == 422
    assert await history_of(api, started["run_id"]) == before
    done = await api.worker("POST", f"{VALIDATIONS}/{task_id}/approve", json=verdict_fence(task))
    assert done.status_code == 200, done.text
    assert (await calling).status_code == 200
