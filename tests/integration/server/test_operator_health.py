"""Operator health diagnostics and task-queue throttling (SPEC M8, PROTOCOL.md 2.4, 15).

Unhealthy tasks (open tasks whose earlier attempt failed), slot capacity and use per queue, and
the serving process's held-poll limiter: held polls, its cap, and the polls it refused with 429.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from burrow.cli import app as cli
from burrow.testing import assert_eventually
from tests.integration.server.conftest import (
    ADMIN_TOKEN,
    CONTROL,
    GREET,
    QUEUE,
    Api,
    ApiFactory,
    fence,
)

AS_ADMIN = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}
WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


def _kinds(backlog: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["kind"]: k for k in backlog["by_kind"]}


async def _scrape(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await api.http.get("/metrics", headers=AS_ADMIN)
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def _failing_tasks(api: Api) -> None:
    """On QUEUE: a workflow task failed once, an activity failed once, one healthy task."""
    await api.register()
    await api.start("wf-flaky")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/fail"
    failed = await api.worker("POST", url, json=fence(task, failure={"message": "boom"}))
    assert failed.json()["outcome"] == "failed"  # back to ready, attempt 2 (after a backoff)

    await api.start("wf-act")
    task = await api.poll_workflow()
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=fence(task, commands=[GREET]),
    )
    assert done.status_code == 200, done.text
    attempt = await api.poll_activity()
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    retried = await api.worker(
        "POST",
        f"/api/worker/activity-tasks/{attempt['task_id']}/fail",
        json={**own, "failure": {"message": "flaky", "type": "IOError"}},
    )
    assert retried.json()["outcome"] == "retry_scheduled"

    await api.start("wf-healthy")  # attempt 1: not unhealthy


async def test_unhealthy_tasks_in_health_diagnostics_m8(api: Api, database_url: str) -> None:
    """M8: tasks failing repeatedly (open, attempt > 1 with a recorded failure) are counted per
    kind and in total in operator metrics, per queue in the task-queue view, in Prometheus and
    in `burrow system operator-metrics`; a first attempt is not unhealthy."""
    await _failing_tasks(api)

    served = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    backlog = served["operator_metrics"]["backlog"]
    assert backlog["unhealthy_tasks"] == 2
    kinds = _kinds(backlog)
    assert (kinds["workflow"]["unhealthy"], kinds["activity"]["unhealthy"]) == (1, 1)
    assert kinds["query"]["unhealthy"] == 0

    view = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    assert view["backlog"]["unhealthy_tasks"] == 2
    assert _kinds(view["backlog"])["activity"]["unhealthy"] == 1

    samples = await _scrape(api)
    workflow = (("kind", "workflow"), ("namespace", "default"))
    assert samples[("burrow_tasks_unhealthy", workflow)] == 1
    per_queue = (("kind", "activity"), ("namespace", "default"), ("queue", QUEUE))
    assert samples[("burrow_task_queue_unhealthy", per_queue)] == 1

    args = ["system", "operator-metrics", "--database-url", database_url]
    printed = await asyncio.to_thread(CliRunner().invoke, cli, [*args, "--json"], env=WIDE)
    assert json.loads(printed.stdout)["operator_metrics"]["backlog"]["unhealthy_tasks"] == 2
    table = await asyncio.to_thread(CliRunner().invoke, cli, args, env=WIDE)
    assert table.exit_code == 0, table.output
    assert "unhealthy" in table.stdout


async def test_task_queue_throttling_m8(make_api: ApiFactory) -> None:
    """M8, PROTOCOL 2.4: per queue the slots in use (leased tasks) against the live workers'
    declared capacity, the polls held, the held-poll cap and the polls refused with 429
    `long_poll_capacity_exhausted`; in the task-queue view, operator metrics and Prometheus."""
    api = await make_api(max_held_polls=1)
    await api.register(max_concurrent_workflow_tasks=3, max_concurrent_activity_tasks=2)
    await api.start("wf-1")
    await api.poll_workflow()  # one slot in use

    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 60}
    held = asyncio.create_task(api.worker("POST", "/api/worker/workflow-tasks/poll", json=body))

    async def holding() -> bool:
        return api.state.held.held == 1

    await assert_eventually(holding)
    refused = await api.worker("POST", "/api/worker/activity-tasks/poll", json=body)
    assert (refused.status_code, refused.json()["reason"]) == (429, "long_poll_capacity_exhausted")

    view = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    assert view["throttling"] == {
        "slots_in_use": 1,
        "slot_capacity": 5,
        "polls_held": 1,
        "held_poll_capacity": 1,
        "polls_refused": 1,
    }
    assert view["workers"]["slot_capacity"] == 5
    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    polls = metrics["operator_metrics"]["poll_throttling"]
    assert (polls["held_poll_capacity"], polls["polls_held"], polls["polls_refused"]) == (1, 1, 1)
    assert polls["by_queue"] == {QUEUE: {"polls_held": 1, "polls_refused": 1}}
    assert metrics["operator_metrics"]["workers"]["slot_capacity"] == 5

    samples = await _scrape(api)
    scope = (("namespace", "default"), ("queue", QUEUE))
    assert samples[("burrow_task_queue_polls_held", scope)] == 1
    assert samples[("burrow_task_queue_polls_refused_total", scope)] == 1
    assert samples[("burrow_task_queue_slots_in_use", scope)] == 1
    assert samples[("burrow_task_queue_slot_capacity", scope)] == 5
    assert samples[("burrow_held_poll_capacity", ())] == 1

    await api.start("wf-2")  # wakes the held poll, which leases it
    assert (await held).json()["task"] is not None
    after = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    throttling = after["throttling"]
    assert (throttling["polls_held"], throttling["polls_refused"]) == (0, 1)
    assert throttling["slots_in_use"] == 2
