"""A worker id belongs to the namespace it registered in (issue 25 item 7; PROTOCOL.md 4.1)."""

from __future__ import annotations

from typing import Any

from tests.integration.server.conftest import QUEUE, WORKER, ApiFactory

OTHER = {**WORKER, "X-Namespace": "other"}
REGISTER = {
    "worker_id": "w1",
    "task_queue": QUEUE,
    "runtime": "python",
    "supported_workflow_types": ["greeter"],
    "supported_activity_types": ["greet"],
}


def fence(task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        **extra,
    }


async def test_registering_a_worker_id_from_another_namespace_is_refused_and_moves_nothing(
    make_api: ApiFactory,
) -> None:
    """Issue 25 item 7: `register` with another namespace and a live worker's id is a 409
    `worker_id_conflict`; the worker keeps its registration and its lease, so its heartbeat,
    poll and completion go on working (before: 404, 412 and 409)."""
    api = await make_api(namespaces=("default", "other"))
    await api.register()
    await api.start("wf-1")
    task = await api.poll_workflow()

    hijack = await api.http.post("/api/worker/register", json=REGISTER, headers=OTHER)
    assert (hijack.status_code, hijack.json()["reason"]) == (409, "worker_id_conflict")
    assert hijack.json()["worker_id"] == "w1"
    assert "'other'" in hijack.json()["message"]

    registration = await api.state.store.worker_registration(worker_id="w1")
    assert registration is not None and registration.namespace == "default"
    beat = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "w1"})
    assert beat.status_code == 200, beat.text
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    commands = [{"type": "start_timer", "delay_seconds": 3600}]
    done = await api.worker("POST", url, json=fence(task, commands=commands))
    assert done.status_code == 200, done.text
    await api.poll_workflow(timeout_seconds=0)  # still registered here: 200, no 412


async def test_a_worker_id_registered_in_another_namespace_cannot_be_polled_from_it(
    make_api: ApiFactory,
) -> None:
    """Issue 25 item 7: after the refused registration the other namespace holds no claim on
    the id: its poll is 412 `worker_not_registered`, as for any unknown worker."""
    api = await make_api(namespaces=("default", "other"))
    await api.register()
    await api.http.post("/api/worker/register", json=REGISTER, headers=OTHER)
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
    poll = await api.http.post("/api/worker/workflow-tasks/poll", json=body, headers=OTHER)
    assert (poll.status_code, poll.json()["reason"]) == (412, "worker_not_registered")
