"""Connections over HTTP (SPEC M7, M9, W4; PROTOCOL.md 16): a worker registers the connection
its polls serve, `schedule_activity` sends a task to one, and work on a connection no live
worker serves is counted as compatibility-blocked."""

from __future__ import annotations

from typing import Any

from burrow.store.fleet import blocked_counts
from burrow.store.operator import LIVE_AFTER
from tests.integration.server.conftest import ADMIN_TOKEN, CONTROL, GREET, QUEUE, WORLD, Api, fence

AS_ADMIN = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _schedule(api: Api, workflow_id: str, **command: Any) -> None:
    """Start a run on the default connection; its first task schedules one `greet`."""
    await api.register("scheduler", supported_activity_types=[])
    await api.start(workflow_id)
    task = await api.poll_workflow("scheduler")
    assert task["connection"] == "default"
    body = fence(task, commands=[{**GREET, **command}])
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text


async def _register(api: Api, worker_id: str, **extra: Any) -> dict[str, Any]:
    body = {
        "worker_id": worker_id,
        "task_queue": QUEUE,
        "runtime": "python",
        "supported_workflow_types": [],
        "supported_activity_types": ["greet"],
        **extra,
    }
    response = await api.worker("POST", "/api/worker/register", json=body)
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()
    return receipt


async def _poll_activity(api: Api, worker_id: str) -> dict[str, Any] | None:
    body = {"worker_id": worker_id, "task_queue": QUEUE, "timeout_seconds": 0}
    response = await api.worker("POST", "/api/worker/activity-tasks/poll", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] | None = response.json()["task"]
    return task


async def test_schedule_activity_connection_is_accepted_and_echoed_m7(api: Api) -> None:
    """M7, PROTOCOL.md 16: the top-level `connection` of `schedule_activity` queues the task on
    that connection; only a worker registered with it claims it, and the task echoes it."""
    await _schedule(api, "wf-conn", connection="gpu")
    receipt = await _register(api, "gpu-worker", connection="gpu")
    assert receipt["connection"] == "gpu"
    assert (await _register(api, "plain"))["connection"] == "default"

    assert await _poll_activity(api, "plain") is None
    task = await _poll_activity(api, "gpu-worker")
    assert task is not None
    assert (task["activity_type"], task["connection"]) == ("greet", "gpu")


async def test_session_connection_routes_its_activity_w4_m7(api: Api) -> None:
    """W4, M7: without a call connection, the session's routes the activity; the worker of
    that connection is admitted and holds a session recorded on it."""
    await _schedule(api, "wf-session", worker_session={"session_id": "render", "connection": "gpu"})
    await _register(api, "plain")
    await _register(api, "gpu-worker", connection="gpu")
    assert await _poll_activity(api, "plain") is None
    task = await _poll_activity(api, "gpu-worker")
    assert task is not None
    assert task["connection"] == "gpu"
    assert task["worker_session"]["connection"] == "gpu"


async def test_explicit_session_takes_the_workers_connection_w4_m7(api: Api) -> None:
    """W4, M7: a session created without a connection is on the creating worker's."""
    await _register(api, "gpu-worker", connection="gpu")
    created = await api.worker(
        "POST", "/api/worker/sessions", json={"worker_id": "gpu-worker", "session_id": "s1"}
    )
    assert created.status_code == 201, created.text
    assert created.json()["session"]["connection"] == "gpu"


async def test_work_on_an_unserved_connection_is_blocked_m9(api: Api) -> None:
    """M9, M7: ready work on a connection no live worker serves counts as compatibility-blocked
    in the operator metrics, the task-queue view, the queues figures and Prometheus, although
    live workers of its queue declare its type on another connection."""
    await _schedule(api, "wf-blocked", connection="gpu")
    await _register(api, "plain")  # declares `greet`, on the default connection

    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    backlog = metrics["operator_metrics"]["backlog"]
    kinds = {k["kind"]: k for k in backlog["by_kind"]}
    assert (kinds["activity"]["ready"], kinds["activity"]["compatibility_blocked"]) == (1, 1)
    view = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    assert view["backlog"]["compatibility_blocked_tasks"] == 1
    scraped = (await api.http.get("/metrics", headers=AS_ADMIN)).text
    assert 'burrow_tasks_compatibility_blocked{kind="activity",namespace="default"} 1.0' in scraped
    stats = await api.state.store.queue_stats(namespace="default")
    [gpu] = [s for s in stats if s.connection == "gpu"]
    assert (gpu.queue, gpu.kind, gpu.ready, gpu.live_workers, gpu.blocked) == (
        QUEUE,
        "activity",
        1,
        0,
        1,
    )

    await _register(api, "gpu-worker", connection="gpu")
    async with api.state.store.transactions.begin() as conn:
        assert await blocked_counts(conn, namespace="default", live_after=LIVE_AFTER) == {}
    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    assert metrics["operator_metrics"]["backlog"]["compatibility_blocked_tasks"] == 0


async def test_a_run_started_on_a_connection_goes_to_its_workers_m7_m9(api: Api) -> None:
    """M7, M9: `POST /api/workflows` with `connection` puts the run there: a worker on the default
    connection gets nothing, the run is blocked (and `describe` names the gap) until a worker
    serving that connection registers, which claims it; the task echoes the connection."""
    response = await api.control(
        "POST",
        "/api/workflows",
        json={
            "workflow_id": "wf-on-gpu",
            "workflow_type": "greeter",
            "task_queue": QUEUE,
            "input": WORLD,
            "connection": "gpu",
        },
    )
    assert response.status_code == 201, response.text
    await api.register("plain")  # declares `greeter`, on the default connection
    body = {"worker_id": "plain", "task_queue": QUEUE, "timeout_seconds": 0}
    empty = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
    assert empty.json()["task"] is None
    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    kinds = {k["kind"]: k for k in metrics["operator_metrics"]["backlog"]["by_kind"]}
    assert kinds["workflow"]["compatibility_blocked"] == 1
    described = await api.state.store.describe_workflow(
        namespace="default", workflow_id="wf-on-gpu"
    )
    assert described.compatibility_gap is not None
    assert "connection 'gpu'" in described.compatibility_gap

    await api.register("gpu-worker", connection="gpu")
    task = await api.poll_workflow("gpu-worker", timeout_seconds=0)
    assert (task["workflow_id"], task["connection"]) == ("wf-on-gpu", "gpu")
