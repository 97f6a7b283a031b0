"""`POST /api/workflows` honours `execution_timeout_seconds` / `run_timeout_seconds` (issue 28).

Validated at the door (positive, run <= execution; 422 `validation_failed`, nothing written),
recorded on the run, reported by describe; a timed-out run reads as the SDK expects it.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.integration.server.conftest import QUEUE, WORLD, Api
from tests.support.store import sweep_until


def start_body(workflow_id: str, **timeouts: Any) -> dict[str, Any]:
    return {
        "workflow_id": workflow_id,
        "workflow_type": "greeter",
        "task_queue": QUEUE,
        "input": WORLD,
        **timeouts,
    }


@pytest.mark.parametrize(
    "timeouts",
    [
        {"execution_timeout_seconds": 10, "run_timeout_seconds": 20},
        {"execution_timeout_seconds": 0},
        {"run_timeout_seconds": -1},
        {"execution_timeout_seconds": 1e300},
        {"run_timeout_seconds": "soon"},
    ],
    ids=["run-above-execution", "zero", "negative", "past-maximum", "not-a-number"],
)
async def test_bad_timeouts_are_a_422_and_write_nothing(api: Api, timeouts: dict[str, Any]) -> None:
    """Issue 28: a bad timeout is refused in the server's validation shape; no run exists."""
    refused = await api.control("POST", "/api/workflows", json=start_body("bad-1", **timeouts))

    assert refused.status_code == 422, refused.text
    assert refused.json()["reason"] == "validation_failed"
    missing = await api.control("GET", "/api/workflows/bad-1")
    assert missing.status_code == 404


async def test_timeouts_are_recorded_and_described(api: Api) -> None:
    """Issue 28, PROTOCOL 17: the SDK's defaults (3600 / 600) set the run's deadlines."""
    body = start_body("timed-1", execution_timeout_seconds=3600, run_timeout_seconds=600)
    started = await api.control("POST", "/api/workflows", json=body)
    assert started.status_code == 201, started.text

    described = (await api.control("GET", "/api/workflows/timed-1")).json()

    assert (described["execution_timeout_seconds"], described["run_timeout_seconds"]) == (
        3600,
        600,
    )
    assert described["run_deadline_at"] < described["execution_deadline_at"]
    assert (described["retry_attempt"], described["retry_of_run_id"]) == (1, None)
    history = await api.control(
        "GET", f"/api/workflows/timed-1/runs/{started.json()['run_id']}/history"
    )
    [workflow_started] = history.json()["events"]
    assert workflow_started["payload"]["run_timeout_seconds"] == 600
    assert workflow_started["payload"]["run_deadline_at"] is not None


async def test_a_timed_out_run_reads_failed_with_its_reason(api: Api) -> None:
    """Issue 28: the SDK waits for a status it knows; history says WorkflowTimedOut."""
    body = start_body("timed-2", execution_timeout_seconds=3600, run_timeout_seconds=600)
    run_id = (await api.control("POST", "/api/workflows", json=body)).json()["run_id"]
    async with api.state.store.engine.begin() as conn:
        await conn.execute(sa.text("UPDATE runs SET run_deadline_at = now() - interval '1 second'"))

    async def closed() -> dict[str, Any] | None:
        found: dict[str, Any] = (await api.control("GET", "/api/workflows/timed-2")).json()
        return found if found["is_terminal"] else None

    described = await sweep_until(api.state.store, closed)  # the server's sweeper may beat it
    assert (described["status"], described["closed_reason"]) == ("failed", "timed_out")
    assert described["is_terminal"] is True
    history = await api.control("GET", f"/api/workflows/timed-2/runs/{run_id}/history")
    assert history.json()["events"][-1]["event_type"] == "WorkflowTimedOut"
