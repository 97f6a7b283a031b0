"""`POST /api/workflows` takes a `retry_policy` (issue 28 workflow retries, PROTOCOL.md 17).

The policy has the shape of the child command's and the standalone activity's (`max_attempts`,
`backoff_seconds`, `non_retryable_error_types`, plus the activity policy's intervals) and is the
run's workflow retry policy, as the native client's `retry_policy` is: a failed run is retried
as a new run of the id. A bad policy is a 422 `validation_failed` naming the field (the
reference's validation shape), and nothing is written. The Durable Workflow server itself
refuses the field on start (`start.unsupported_fields`); Burrow accepts it.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.integration.server.conftest import QUEUE, WORLD, Api, fence

FAIL = {"type": "fail_workflow", "message": "card declined", "exception_type": "ValueError"}


def start_body(workflow_id: str, retry_policy: Any) -> dict[str, Any]:
    return {
        "workflow_id": workflow_id,
        "workflow_type": "greeter",
        "task_queue": QUEUE,
        "input": WORLD,
        "retry_policy": retry_policy,
    }


async def _rows(api: Api) -> tuple[int, int]:
    async with api.state.store.engine.connect() as conn:
        runs = (await conn.execute(sa.text("SELECT count(*) FROM runs"))).scalar_one()
        events = (await conn.execute(sa.text("SELECT count(*) FROM history_events"))).scalar_one()
    return runs, events


@pytest.mark.parametrize(
    "policy",
    [
        {"max_attempts": -1},
        {"backoff_seconds": [-1]},
        {"initial_interval_seconds": 0},
        {"backoff_coefficient": 0.5},
        {"max_attempts": 2, "retry_forever": True},
        "three times",
    ],
    ids=["negative-attempts", "negative-backoff", "zero-interval", "shrinking", "unknown", "text"],
)
async def test_a_bad_retry_policy_is_a_422_and_writes_nothing(api: Api, policy: Any) -> None:
    """Issue 28: refused in the validation shape, naming `retry_policy`; no run, no event."""
    before = await _rows(api)

    refused = await api.control("POST", "/api/workflows", json=start_body("bad-retry", policy))

    assert refused.status_code == 422, refused.text
    assert refused.json()["reason"] == "validation_failed"
    assert any(field.startswith("retry_policy") for field in refused.json()["errors"])
    assert await _rows(api) == before
    assert (await api.control("GET", "/api/workflows/bad-retry")).status_code == 404


async def test_a_failed_run_is_retried_under_the_policy_then_fails_for_good(api: Api) -> None:
    """Issue 28: recorded on WorkflowStarted; the first failure makes run 2 of the id (backoff
    0), whose failure is final at `max_attempts` 2."""
    policy = {"max_attempts": 2, "backoff_seconds": [0], "non_retryable_error_types": ["Fatal"]}
    started = await api.control("POST", "/api/workflows", json=start_body("retried", policy))
    assert started.status_code == 201, started.text
    first_run = started.json()["run_id"]
    [event] = await api.state.store.read_history(run_id=first_run)
    assert event.payload["retry_policy"] == policy
    await api.register()

    for attempt in (1, 2):
        task = await api.poll_workflow()
        url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
        done = await api.worker("POST", url, json=fence(task, commands=[FAIL]))
        assert done.status_code == 200, done.text
        described = (await api.control("GET", "/api/workflows/retried")).json()
        if attempt == 1:
            assert (described["retry_attempt"], described["retry_of_run_id"]) == (2, first_run)
            assert not described["is_terminal"]
        else:
            assert described["retry_attempt"] == 2 and described["status"] == "failed"
