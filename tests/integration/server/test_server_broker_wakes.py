"""Held polls woken through RabbitMQ by work other processes make ready (SPEC M5, C1;
PROTOCOL.md 2.5, 14).

The server's Postgres re-probe is set far beyond the test's patience, so only a wake can hand
the held poll its task in time; the work is committed by a Burrow client on its own store, so
the server's own after-commit hook never sees it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from burrow import Client, codec
from burrow.config import Settings
from burrow.testing import assert_eventually
from tests.integration.server.conftest import QUEUE, Api, ApiFactory

NEVER_PROBE = 3600.0
PATIENCE = 30.0  # far less than the poll's 60 s window, far more than a wake needs


async def api_without_probes(make_api: ApiFactory) -> Api:
    api = await make_api()
    # The re-probe only: every other setting as configured.
    api.state.settings = api.state.settings.model_copy(update={"poll_probe_seconds": NEVER_PROBE})
    return api


async def held(api: Api) -> bool:
    return api.state.held.held == 1


async def test_a_burrow_client_start_wakes_a_held_poll_m5(
    make_api: ApiFactory, database_url: str
) -> None:
    """M5: a workflow started by a Burrow client reaches the server's held workflow-task poll
    through RabbitMQ, not the Postgres re-probe."""
    api = await api_without_probes(make_api)
    await api.register()
    polling = asyncio.create_task(api.poll_workflow(timeout_seconds=60))
    await assert_eventually(lambda: held(api))
    client = await Client.connect(settings=Settings.load(database_url=database_url))
    try:
        handle = await client.start_workflow("greeter", "world", id="wf-native", task_queue=QUEUE)
    finally:
        await client.close()
    task: dict[str, Any] = await asyncio.wait_for(polling, PATIENCE)
    assert task["workflow_id"] == "wf-native"
    assert task["run_id"] == handle.run_id


async def test_a_query_answered_elsewhere_wakes_the_waiting_call_m5(
    make_api: ApiFactory, database_url: str
) -> None:
    """M5: a query answered by another process (here, another server on the same store and
    broker) reaches the control-plane call waiting on it through a run-change wake."""
    asking_api = await api_without_probes(make_api)
    answering_api = await make_api()
    await answering_api.register()
    await answering_api.start("wf-q-elsewhere")
    asking = asyncio.create_task(
        asking_api.control(
            "POST", "/api/workflows/wf-q-elsewhere/query/status", json={"timeout_seconds": 60}
        )
    )
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 10}
    polled = await answering_api.worker("POST", "/api/worker/query-tasks/poll", json=body)
    task = polled.json()["task"]
    answer = {
        "lease_owner": "w1",
        "query_task_attempt": task["query_task_attempt"],
        "result_envelope": dict(codec.encode("ok")),
    }
    done = await answering_api.worker(
        "POST", f"/api/worker/query-tasks/{task['query_task_id']}/complete", json=answer
    )
    assert done.status_code == 200, done.text
    response = await asyncio.wait_for(asking, PATIENCE)
    assert response.status_code == 200, response.text
    assert response.json()["result_envelope"] == answer["result_envelope"]
