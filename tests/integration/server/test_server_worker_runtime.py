"""The runtime an HTTP worker registers with (SPEC S10, PROTOCOL.md 4.1)."""

from __future__ import annotations

from tests.integration.server.conftest import Api


async def test_s10_the_registered_runtime_is_what_the_fleet_reports(api: Api) -> None:
    """S10: a worker registering with runtime `typescript` is listed as typescript by
    `/api/workers` and `/api/workers/{id}`; registering again with another runtime replaces it,
    and one that names none is python."""
    await api.register("ts-worker", runtime="typescript")
    await api.register("go-worker", runtime="go")
    body = {"worker_id": "plain", "task_queue": "q1", "supported_workflow_types": ["greeter"]}
    response = await api.worker("POST", "/api/worker/register", json=body)
    assert response.status_code == 201, response.text

    listed = (await api.control("GET", "/api/workers")).json()["workers"]
    assert {w["worker_id"]: w["runtime"] for w in listed} == {
        "ts-worker": "typescript",
        "go-worker": "go",
        "plain": "python",
    }
    one = (await api.control("GET", "/api/workers/ts-worker")).json()
    assert one["runtime"] == "typescript"

    await api.register("go-worker", runtime="python")
    again = (await api.control("GET", "/api/workers/go-worker")).json()
    assert again["runtime"] == "python"


async def test_s10_an_oversized_runtime_is_refused_and_nothing_registered(api: Api) -> None:
    """S10: the runtime is bounded like the task queue; a longer one is a 422 and no row."""
    body = {
        "worker_id": "long",
        "task_queue": "q1",
        "runtime": "x" * 65,
        "supported_workflow_types": ["greeter"],
    }
    response = await api.worker("POST", "/api/worker/register", json=body)
    assert response.status_code == 422, response.text
    listed = (await api.control("GET", "/api/workers")).json()["workers"]
    assert [w for w in listed if w["worker_id"] == "long"] == []
