"""Counts and attempt numbers past what the store keeps are refused with 422, never a 500.

Issue 25 item 8: the store keeps these as 32-bit integers, so a larger number reached Postgres
and failed there. Each field is bounded in its wire model; nothing is written.
"""

from __future__ import annotations

import pytest

from tests.integration.server.conftest import Api

TOO_BIG = 2**31


@pytest.mark.parametrize(
    "field",
    [
        "max_concurrent_workflow_tasks",
        "max_concurrent_activity_tasks",
        "max_concurrent_worker_sessions",
        "sticky_cache_capacity",
    ],
)
async def test_a_registration_count_past_32_bits_is_refused_and_registers_nothing(
    api: Api, field: str
) -> None:
    body = {
        "worker_id": "w-big",
        "task_queue": "q1",
        "runtime": "python",
        "supported_workflow_types": ["greeter"],
        field: TOO_BIG,
    }
    response = await api.worker("POST", "/api/worker/register", json=body)
    assert response.status_code == 422, response.text
    assert field in response.text
    heartbeat = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "w-big"})
    assert heartbeat.status_code == 404, heartbeat.text


async def test_an_attempt_number_past_32_bits_is_refused_with_422(api: Api) -> None:
    await api.register()
    started = await api.start("big-attempt")
    task = await api.poll_workflow()
    body = {
        "lease_owner": "w1",
        "workflow_task_attempt": TOO_BIG,
        "commands": [{"type": "complete_workflow", "result": None}],
    }
    path = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    response = await api.worker("POST", path, json=body)
    assert response.status_code == 422, response.text
    assert started["workflow_id"] == "big-attempt"
