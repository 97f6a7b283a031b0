"""The operator API (SPEC M8, M9, W9, PROTOCOL.md 14, 15): operator metrics, task queues, the
worker fleet, worker sessions and Prometheus metrics, each matching what the CLI prints."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from burrow.cli import app as cli
from burrow.protocol.shapes import SessionSpec
from tests.integration.server.conftest import (
    ADMIN_TOKEN,
    CONTROL,
    QUEUE,
    WORKER,
    Api,
    ApiFactory,
)
from tests.support.store import execute

AS_ADMIN = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}
WIDE = {"COLUMNS": "250", "NO_COLOR": "1"}


async def _cli_json(*args: str, database_url: str) -> dict[str, Any]:
    """Run a `burrow ... --json` command (in a thread: it runs its own event loop)."""
    done = await asyncio.to_thread(
        CliRunner().invoke, cli, [*args, "--json", "--database-url", database_url], env=WIDE
    )
    assert done.exit_code == 0, done.output
    document: dict[str, Any] = json.loads(done.stdout)
    return document


async def _backlog_with_a_stale_lease(api: Api) -> None:
    """Two started runs on QUEUE: one workflow task ready, one leased whose lease ran out."""
    await api.register("w1")
    await api.start("wf-1")
    await api.start("wf-2")
    await api.poll_workflow("w1")
    await execute(
        api.state.store,
        "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 minute'"
        " WHERE state = 'leased'",
    )


def _kinds(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["kind"]: k for k in document["by_kind"]}


def _without_clock(value: Any) -> Any:
    """The document without the figures that move with the clock (ages, instants)."""
    if isinstance(value, dict):
        return {
            key: _without_clock(item)
            for key, item in value.items()
            if not key.endswith(("_at", "_age_seconds"))
        }
    if isinstance(value, list):
        return [_without_clock(item) for item in value]
    return value


async def test_operator_metrics_api_and_cli_serve_one_document_m8_m9(
    api: Api, database_url: str
) -> None:
    """M8, M9, PROTOCOL 15: `/api/system/operator-metrics` is the document
    `burrow system operator-metrics --json` prints: matching role, backlog with the oldest ready
    task's age and stale leases, workers, sessions per state and sticky execution."""
    await _backlog_with_a_stale_lease(api)

    response = await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)
    assert response.status_code == 200, response.text
    served = response.json()
    printed = await _cli_json("system", "operator-metrics", database_url=database_url)

    # The serving process's own loops (issue 25 item 1): a CLI process runs none.
    assert served["operator_metrics"].pop("process_health")["status"] == "ok"
    # Its held-poll limiter (M8 throttling): a CLI process holds no polls.
    assert served["operator_metrics"].pop("poll_throttling")["polls_held"] == 0
    assert _without_clock(served) == _without_clock(printed)
    metrics = served["operator_metrics"]
    assert set(metrics) >= {
        "generated_at",
        "matching_role",
        "backlog",
        "workers",
        "worker_sessions",
        "sticky_execution",
        "sticky_execution_workers",
    }
    workflow = _kinds(metrics["backlog"])["workflow"]
    assert (workflow["ready"], workflow["leased"], workflow["stale_leases"]) == (1, 1, 1)
    assert workflow["oldest_ready_age_seconds"] >= 0
    assert metrics["backlog"]["runnable_tasks"] == 1
    assert metrics["backlog"]["stale_leases"] == 1
    assert metrics["workers"]["active_workers"] == 1
    assert [w["worker_id"] for w in metrics["workers"]["fleet"]] == ["w1"]
    assert metrics["worker_sessions"]["total"] == 0
    assert metrics["repair"]["matching_processes"] == 0
    role = metrics["matching_role"]
    assert (role["shape"], role["wake_owner"], role["queue_wake_enabled"]) == (
        "in_worker",
        "worker_loop",
        True,
    )


async def test_matching_role_reports_the_dedicated_shape_m4c(
    make_api: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M4c, M8, PROTOCOL 14: with DW_V2_MATCHING_ROLE_QUEUE_WAKE=0 discovery and operator
    metrics report the dedicated matching shape, the same block in both."""
    monkeypatch.setenv("DW_V2_MATCHING_ROLE_QUEUE_WAKE", "0")
    api = await make_api()
    info = (await api.http.get("/api/cluster/info", headers=AS_ADMIN)).json()
    role = info["topology"]["matching_role"]
    assert (role["shape"], role["wake_owner"], role["queue_wake_enabled"]) == (
        "dedicated",
        "dedicated_repair_pass",
        False,
    )
    assert role["repair_pass"]["dedicated_matching"] is True
    assert role["repair_pass"]["in_worker"] is False
    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    assert metrics["operator_metrics"]["matching_role"] == role


async def test_task_queue_and_worker_fleet_views_m8(api: Api) -> None:
    """M8, M9: per queue the ready depth per kind, stale leases, the oldest ready task's age
    and live and stale workers; an unknown queue is described empty, an unknown worker is 404."""
    await _backlog_with_a_stale_lease(api)
    await api.register("w2")
    await execute(
        api.state.store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 hour'"
        " WHERE worker_id = 'w2'",
    )

    listed = await api.control("GET", "/api/task-queues")
    assert listed.status_code == 200, listed.text
    [view] = listed.json()["task_queues"]
    assert view["name"] == QUEUE
    one = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    burrow = ("backlog", "workers", "throttling")
    assert [_without_clock(one[key]) for key in burrow] == [
        _without_clock(view[key]) for key in burrow
    ]
    workflow = _kinds(view["backlog"])["workflow"]
    assert (workflow["ready"], workflow["stale_leases"]) == (1, 1)
    assert (view["workers"]["active_workers"], view["workers"]["stale_workers"]) == (1, 1)

    # As the reference answers it: a queue with neither tasks nor workers is described, empty.
    empty = (await api.control("GET", "/api/task-queues/nope")).json()
    assert (empty["name"], empty["stats"]["approximate_backlog_count"]) == ("nope", 0)

    workers = (await api.control("GET", "/api/workers")).json()
    assert workers["namespace"] == "default"
    assert workers["metrics"]["active_workers"] == 1
    assert workers["metrics"]["stale_workers"] == 1
    assert {w["worker_id"]: w["live"] for w in workers["workers"]} == {"w1": True, "w2": False}
    w1 = (await api.control("GET", "/api/workers/w1")).json()
    assert (w1["task_queue"], w1["status"], w1["supported_workflow_types"]) == (
        QUEUE,
        "active",
        ["greeter"],
    )
    unknown = await api.control("GET", "/api/workers/nobody")
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "worker_not_found")


async def test_worker_sessions_api_matches_the_cli_w9(api: Api, database_url: str) -> None:
    """W9, PROTOCOL 6.4: `/api/worker-sessions[/{id}]` serve what `burrow sessions list|show
    --json` print; a filter by state; unknown ids are 404 `worker_session_not_found`."""
    store = api.state.store
    await store.register_worker(
        worker_id="gpu-1",
        namespace="default",
        task_queue=QUEUE,
        workflow_types=[],
        activity_types=["render"],
        concurrency=1,
        capabilities=["gpu:nvidia-l4"],
    )
    for session_id in ("render-a", "render-b"):
        options = SessionSpec(session_id=session_id, requirements=["gpu:nvidia-l4"])
        await store.create_worker_session(worker_id="gpu-1", namespace="default", options=options)
    await store.close_worker_session(worker_id="gpu-1", namespace="default", session_id="render-b")

    listed = await api.control("GET", "/api/worker-sessions")
    assert listed.status_code == 200, listed.text
    assert listed.json() == await _cli_json("sessions", "list", database_url=database_url)
    assert listed.json()["metrics"]["active"] == 1
    closed = (await api.control("GET", "/api/worker-sessions?state=closed")).json()
    assert [s["session_id"] for s in closed["sessions"]] == ["render-b"]
    bad = await api.control("GET", "/api/worker-sessions?state=sleeping")
    assert bad.status_code == 422

    one = await api.control("GET", "/api/worker-sessions/render-a")
    assert one.json() == await _cli_json("sessions", "show", "render-a", database_url=database_url)
    assert one.json()["session"]["holder"]["worker_id"] == "gpu-1"
    missing = await api.control("GET", "/api/worker-sessions/nope")
    assert (missing.status_code, missing.json()["reason"]) == (404, "worker_session_not_found")


@pytest.mark.parametrize(
    "path", ["/api/task-queues", "/api/workers", "/api/worker-sessions", "/api/worker-sessions/x"]
)
async def test_operator_views_need_the_operator_role_and_a_served_namespace_m8(
    api: Api, path: str
) -> None:
    """M8, PROTOCOL 2.2: operator or admin role, control-plane header, a served X-Namespace."""
    as_worker = await api.http.get(path, headers={**CONTROL, **WORKER})
    assert as_worker.status_code == 401
    no_header = await api.http.get(path, headers={"Authorization": CONTROL["Authorization"]})
    assert no_header.status_code == 400
    other = await api.http.get(path, headers={**CONTROL, "X-Namespace": "elsewhere"})
    assert (other.status_code, other.json()["reason"]) == (404, "namespace_not_found")
    as_admin = await api.http.get(path, headers=AS_ADMIN)
    assert as_admin.status_code in (200, 404)
    if as_admin.status_code == 404:
        assert as_admin.json()["reason"] == "worker_session_not_found"


async def test_prometheus_metrics_m8_m9(api: Api) -> None:
    """M8, M9: `/metrics` exposes the backlog, the oldest ready task's age, stale leases, live
    workers per queue and the matching shape; scrapers need the operator or admin role."""
    await _backlog_with_a_stale_lease(api)
    assert (await api.http.get("/metrics")).status_code == 401
    assert (await api.http.get("/metrics", headers=WORKER)).status_code == 401

    response = await api.http.get("/metrics", headers={"Authorization": CONTROL["Authorization"]})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    workflow = (("kind", "workflow"), ("namespace", "default"))
    assert samples[("burrow_tasks_ready", workflow)] == 1
    assert samples[("burrow_tasks_leased", workflow)] == 1
    assert samples[("burrow_tasks_stale_leases", workflow)] == 1
    assert samples[("burrow_oldest_ready_task_age_seconds", workflow)] >= 0
    queue = (("namespace", "default"), ("queue", QUEUE))
    assert samples[("burrow_task_queue_live_workers", queue)] == 1
    assert samples[("burrow_workers", (("namespace", "default"), ("state", "live")))] == 1
    assert samples[("burrow_matching_queue_wake_enabled", ())] == 1
    assert samples[("burrow_matching_processes", ())] == 0
    alias = await api.http.get("/api/system/prometheus-metrics", headers=AS_ADMIN)
    assert alias.status_code == 200
    assert "burrow_tasks_ready" in alias.text


async def test_compatibility_gap_is_visible_m9(api: Api) -> None:
    """M9: ready work that no live worker on its queue declares is counted as blocked in the
    operator metrics, the task-queue view and Prometheus; work a live worker can take is not."""
    await api.register("w1")  # declares "greeter" only
    await api.start("wf-1")
    await api.start("wf-2", workflow_type="orphan")
    await api.register("w-gone", supported_workflow_types=["orphan"])
    await execute(
        api.state.store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 hour'"
        " WHERE worker_id = 'w-gone'",
    )  # a silent worker takes nothing

    metrics = (await api.http.get("/api/system/operator-metrics", headers=AS_ADMIN)).json()
    backlog = metrics["operator_metrics"]["backlog"]
    assert (backlog["runnable_tasks"], backlog["compatibility_blocked_tasks"]) == (2, 1)
    assert _kinds(backlog)["workflow"]["compatibility_blocked"] == 1
    view = (await api.control("GET", f"/api/task-queues/{QUEUE}")).json()
    assert view["backlog"]["compatibility_blocked_tasks"] == 1
    scraped = (await api.http.get("/metrics", headers=AS_ADMIN)).text
    assert 'burrow_tasks_compatibility_blocked{kind="workflow",namespace="default"} 1.0' in scraped
