"""SDK workers' sticky figures over HTTP are stored and reported as Burrow workers' are
(issue 27 item 4; SPEC S7, S10, S11; PROTOCOL.md 11).
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.integration.server.conftest import ADMIN_TOKEN, Api
from tests.integration.server.test_server_sticky import STICKY, completion, run_activity
from tests.support.store import execute

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Durable-Workflow-Control-Plane-Version": "2"}


async def operator_metrics(api: Api) -> dict[str, Any]:
    response = await api.http.get("/api/system/operator-metrics", headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["operator_metrics"]
    return body


async def worker_figures(api: Api, worker_id: str) -> dict[str, Any]:
    [figures] = [
        w
        for w in (await operator_metrics(api))["sticky_execution_workers"]
        if w["worker_id"] == worker_id
    ]
    return figures


async def heartbeat(api: Api, worker_id: str, **body: Any) -> None:
    response = await api.worker(
        "POST", "/api/worker/heartbeat", json={"worker_id": worker_id, **body}
    )
    assert response.status_code == 200, response.text


async def complete(api: Api, task: dict[str, Any], metrics: dict[str, int]) -> None:
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=completion(task, metrics=metrics),
    )
    assert done.status_code == 200, done.text


async def test_registration_stores_the_documented_cache_fields_s10(api: Api) -> None:
    """S10: `sticky_cache_enabled` and `sticky_cache_capacity` of a registration are stored."""
    await api.register("w1", sticky_cache_enabled=True, sticky_cache_capacity=64)
    figures = await worker_figures(api, "w1")
    assert (figures["capacity"], figures["size"], figures["hit_count"]) == (64, 0, 0)


async def test_registration_stores_the_sticky_cache_it_reports_s10(api: Api) -> None:
    """S10: a registration's own `sticky_cache` figures are stored over its capacity."""
    await api.register(
        "w1",
        sticky_cache_enabled=True,
        sticky_cache_capacity=64,
        sticky_cache={"size": 3, "hit_count": 2},
    )
    figures = await worker_figures(api, "w1")
    assert (figures["capacity"], figures["size"], figures["hit_count"]) == (64, 3, 2)


async def test_an_http_heartbeat_stores_its_sticky_cache_figures_s10_s11(api: Api) -> None:
    """S10, S11: the documented heartbeat `sticky_cache` object is stored and served in
    `sticky_execution_workers`, capacity pressure included."""
    await api.register("w1", capabilities=STICKY)
    figures = {
        "enabled": True,
        "capacity": 10,
        "size": 9,
        "hit_count": 7,
        "miss_count": 2,
        "forced_cold_replay_count": 1,
        "eviction_count": 3,
    }
    await heartbeat(api, "w1", sticky_cache=figures)
    stored = await worker_figures(api, "w1")
    assert {name: stored[name] for name in figures if name != "enabled"} == {
        name: value for name, value in figures.items() if name != "enabled"
    }
    assert stored["capacity_pressure"] is True
    metrics = await operator_metrics(api)
    assert metrics["sticky_execution"]["capacity_pressure_workers"] == 1


async def test_heartbeat_process_metrics_sticky_cache_in_sdk_names_s10(api: Api) -> None:
    """S10: `process_metrics.sticky_cache` in the SDK's names (`hit`, `miss`, `entries`, ...)
    is taken as well; a figure not reported keeps its last value."""
    await api.register("w1", capabilities=STICKY)
    await heartbeat(
        api,
        "w1",
        process_metrics={"process_id": 1, "sticky_cache": {"hit": 4, "miss": 1, "entries": 2}},
    )
    await heartbeat(api, "w1", process_metrics={"sticky_cache": {"eviction": 5}})
    stored = await worker_figures(api, "w1")
    assert (stored["hit_count"], stored["miss_count"], stored["size"]) == (4, 1, 2)
    assert stored["eviction_count"] == 5


async def test_a_negative_figure_is_a_422_naming_it_s10(api: Api) -> None:
    """S10: figures are counts; a negative one is refused, naming the field."""
    await api.register("w1", capabilities=STICKY)
    response = await api.worker(
        "POST", "/api/worker/heartbeat", json={"worker_id": "w1", "sticky_cache": {"size": -1}}
    )
    assert response.status_code == 422
    assert "size" in response.text


async def test_completion_metrics_are_stored_and_hit_rate_counts_real_hits_s10_s11(
    api: Api,
) -> None:
    """S10, S11: a completion's `sticky_cache.metrics` are stored as the worker's figures; the
    owner's next claim is an expected hit, but while the worker reports no hit the hit rate is
    0.0; once its counter rises, the rate counts that real hit."""
    await api.register("w1", capabilities=STICKY)
    await api.start("wf-figures")
    first = await api.poll_workflow("w1")
    await complete(api, first, {"hit": 0, "miss": 1, "eviction": 0, "forced_cold_replay": 0})
    stored = await worker_figures(api, "w1")
    assert (stored["hit_count"], stored["miss_count"]) == (0, 1)

    await run_activity(api, "w1")
    second = await api.poll_workflow("w1", timeout_seconds=0)
    assert second["sticky_replay_mode"] == "sticky_hit_expected"
    # The cache missed after all (say it was evicted): a miss, no hit.
    await complete(api, second, {"hit": 0, "miss": 2, "eviction": 1, "forced_cold_replay": 1})
    sticky = (await operator_metrics(api))["sticky_execution"]
    assert (sticky["hit_expected_last_minute"], sticky["hit_last_minute"]) == (1, 0)
    assert sticky["hit_rate_last_minute"] == 0.0

    await run_activity(api, "w1")
    third = await api.poll_workflow("w1", timeout_seconds=0)
    assert third["sticky_replay_mode"] == "sticky_hit_expected"
    await complete(api, third, {"hit": 1, "miss": 2, "eviction": 1, "forced_cold_replay": 1})
    sticky = (await operator_metrics(api))["sticky_execution"]
    assert (sticky["hit_expected_last_minute"], sticky["hit_last_minute"]) == (2, 1)
    assert sticky["hit_rate_last_minute"] == pytest.approx(0.5)
    stored = await worker_figures(api, "w1")
    assert (stored["hit_count"], stored["miss_count"], stored["eviction_count"]) == (1, 2, 1)
    assert stored["forced_cold_replay_count"] == 1


async def test_counters_count_only_what_they_rose_by_s11(api: Api) -> None:
    """S11: cumulative counters reported again add nothing; a counter lower than before (a
    process restarted under the id) counts from zero."""
    await api.register("w1", capabilities=STICKY)
    await heartbeat(api, "w1", sticky_cache={"hit_count": 3})
    await heartbeat(api, "w1", sticky_cache={"hit_count": 3})
    assert (await operator_metrics(api))["sticky_execution"]["hit_last_minute"] == 3
    await heartbeat(api, "w1", sticky_cache={"hit_count": 2})
    assert (await operator_metrics(api))["sticky_execution"]["hit_last_minute"] == 5
    await api.register("w1", capabilities=STICKY)  # keeps the counters it reported
    await heartbeat(api, "w1", sticky_cache={"hit_count": 2})
    assert (await operator_metrics(api))["sticky_execution"]["hit_last_minute"] == 5


async def test_re_registration_ends_bindings_and_forces_a_cold_replay_s7(api: Api) -> None:
    """S7, PROTOCOL.md 11: a worker id that registers again has lost its cache: its binding
    ends, and its next claim of the bound run reports `forced_cold_replay`, not an expected
    hit; another worker may take the task at once."""
    await api.register("w1", capabilities=STICKY)
    await api.register("w2", capabilities=STICKY)
    await api.start("wf-restart")
    first = await api.poll_workflow("w1")
    await complete(api, first, {"hit": 0, "miss": 1, "eviction": 0, "forced_cold_replay": 0})
    await run_activity(api, "w2")
    assert await api.poll_workflow("w2", timeout_seconds=0) is None  # held for w1

    await api.register("w1", capabilities=STICKY)
    task = await api.poll_workflow("w1", timeout_seconds=0)
    assert task["run_id"] == first["run_id"]
    assert task["sticky_replay_mode"] == "forced_cold_replay"
    assert task["sticky_execution"]["cache_directive"] == "cold_replay"
    sticky = (await operator_metrics(api))["sticky_execution"]
    assert (sticky["hit_expected_last_minute"], sticky["forced_cold_replay_last_minute"]) == (0, 1)


async def test_re_registration_frees_the_bound_task_for_another_worker_s5(api: Api) -> None:
    """S5c: after its owner registers again, the bound task goes to another worker too."""
    await api.register("w1", capabilities=STICKY)
    await api.register("w2", capabilities=STICKY)
    await api.start("wf-restart-2")
    first = await api.poll_workflow("w1")
    await complete(api, first, {"hit": 0, "miss": 1, "eviction": 0, "forced_cold_replay": 0})
    await run_activity(api, "w2")
    await api.register("w1", capabilities=STICKY)
    task = await api.poll_workflow("w2", timeout_seconds=0)
    assert (task["run_id"], task["sticky_replay_mode"]) == (first["run_id"], "forced_cold_replay")


async def test_reports_past_five_minutes_are_pruned_s11(api: Api) -> None:
    """S11: only recent reports are kept; an old one is deleted when a worker next reports a
    rise, whoever reported it."""
    await api.register("w1", capabilities=STICKY)
    await api.register("w2", capabilities=STICKY)
    await heartbeat(api, "w2", sticky_cache={"hit_count": 1})
    await execute(
        api.state.store, "UPDATE sticky_reports SET reported_at = now() - interval '6 minutes'"
    )
    await heartbeat(api, "w1", sticky_cache={"hit_count": 2})
    kept = await api.state.store.engine.connect()
    try:
        workers = (await kept.execute(sa.text("SELECT worker_id, hits FROM sticky_reports"))).all()
    finally:
        await kept.close()
    assert [tuple(row) for row in workers] == [("w1", 2)]
    assert (await operator_metrics(api))["sticky_execution"]["hit_last_minute"] == 2
