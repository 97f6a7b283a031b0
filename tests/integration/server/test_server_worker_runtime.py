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
    one = (await api.control("GET", "/api/workers/ts-worker")).json()["worker"]
    assert one["runtime"] == "typescript"

    await api.register("go-worker", runtime="python")
    again = (await api.control("GET", "/api/workers/go-worker")).json()["worker"]
    assert again["runtime"] == "python"
