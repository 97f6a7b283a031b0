"""A draining worker finishes what it holds and takes nothing new (SPEC S8, PROTOCOL.md 5.1, 16)."""

from __future__ import annotations

from typing import Any

from tests.integration.server.conftest import GREET, QUEUE, Api, fence


async def _poll(api: Api, kind: str, **extra: Any) -> Any:
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0, **extra}
    return await api.worker("POST", f"/api/worker/{kind}-tasks/poll", json=body)


async def test_draining_worker_polls_are_refused_s8(api: Api) -> None:
    """S8, PROTOCOL 16: a draining worker's workflow and activity polls get 409
    `worker_draining` (`poll_status` "draining", no task) although work is ready; its heartbeat
    and the completion of the task it holds are still accepted, and a resent poll still gets
    the task it already leased."""
    await api.register()
    await api.start("wf-held")
    await api.start("wf-waiting")
    held = await api.poll_workflow(poll_request_id="first")
    await api.state.store.drain_worker(worker_id="w1")

    for kind in ("workflow", "activity"):
        refused = await _poll(api, kind)
        assert refused.status_code == 409, refused.text
        answer = refused.json()
        assert (answer["reason"], answer["poll_status"], answer["task"]) == (
            "worker_draining",
            "draining",
            None,
        )
    resent = await _poll(api, "workflow", poll_request_id="first")
    assert resent.status_code == 200 and resent.json()["task"]["task_id"] == held["task_id"]

    beat = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "w1"})
    assert beat.status_code == 200, beat.text
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{held['task_id']}/complete",
        json=fence(held, commands=[GREET]),
    )
    assert done.status_code == 200, done.text
    reg = await api.state.store.worker_registration(worker_id="w1")
    assert reg is not None and reg.state == "draining"
    # The other run's task and the new activity stay for a worker that is not draining.
    await api.register("w2")
    assert (await api.poll_workflow("w2"))["run_id"] != held["run_id"]
    assert (await api.poll_activity("w2"))["activity_type"] == "greet"
