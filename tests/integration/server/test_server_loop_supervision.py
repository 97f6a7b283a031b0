"""`burrow server`'s repair pass is supervised and reported (issue 25 item 1; store invariant 5).

A pass is made to raise an error that is not a store error by renaming a column it reads (a
schema the code does not expect); renaming it back lets the pass succeed again.
"""

from __future__ import annotations

from typing import Any

import httpx
from structlog.testing import capture_logs

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.integration.server.conftest import ADMIN_TOKEN, Api, ApiFactory
from tests.support.store import claim_wf, execute, rows, start

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Durable-Workflow-Control-Plane-Version": "2"}
BREAK = "ALTER TABLE timers RENAME COLUMN fire_at TO fire_at_moved"
MEND = "ALTER TABLE timers RENAME COLUMN fire_at_moved TO fire_at"


async def health(api: Api) -> dict[str, Any]:
    response = await api.http.get("/api/health")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


async def process_health(api: Api) -> dict[str, Any]:
    response = await api.http.get("/api/system/operator-metrics", headers=ADMIN)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()["operator_metrics"]["process_health"]
    return body


async def restarted_twice(api: Api) -> bool:
    body = await health(api)
    return body["status"] == "degraded" and body["failing_loops"][0]["restarts"] >= 2


async def due_timer(store: Store) -> str:
    run_id = await start(store, "timer-run")
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )
    await execute(store, "UPDATE timers SET fire_at = now() WHERE run_id = :r", r=run_id)
    return run_id


async def test_a_repair_pass_that_raises_is_restarted_and_reported_in_health_and_metrics(
    make_api: ApiFactory,
) -> None:
    """Issue 25 item 1: a pass raising a non-store error keeps the loop running (restarted with
    backoff); /api/health says degraded naming the loop, the operator metrics and Prometheus
    give its failures and restarts, and a due timer fires once the pass succeeds again."""
    api = await make_api(sweep_interval_seconds=0.05)
    store = api.state.store
    timer_run = await due_timer(store)
    with capture_logs() as logs:
        await execute(store, BREAK)
        await assert_eventually(lambda: restarted_twice(api))
    failed = [e for e in logs if e["event"] == "repair_pass_failed"]
    assert failed and all(e["exc_info"] and e["loop"] == "repair_pass" for e in failed)
    [loop] = (await health(api))["failing_loops"]
    assert loop["name"] == "repair_pass" and loop["consecutive_failures"] >= 2
    assert "last_error" not in loop  # errors are for admins, not the open health check
    metrics = await process_health(api)
    assert metrics["status"] == "degraded" and metrics["failing_loops"] == ["repair_pass"]
    [reported] = metrics["loops"]
    assert reported["failures"] >= 2 and "fire_at" in reported["last_error"]
    scrape = await api.http.get("/metrics", headers=ADMIN)
    assert 'burrow_loop_restarts_total{loop="repair_pass"}' in scrape.text
    assert 'burrow_loop_consecutive_failures{loop="repair_pass"}' in scrape.text

    await execute(store, MEND)

    async def fired() -> bool:
        [timer] = await rows(store, s.timers, timer_run)
        body = await health(api)
        return bool(timer["state"] == "fired") and body["status"] == "serving"

    await assert_eventually(fired)
    recovered = (await process_health(api))["loops"][0]
    assert recovered["consecutive_failures"] == 0 and recovered["last_success_at"] is not None


async def test_server_shuts_down_cleanly_after_its_repair_pass_failed(database_url: str) -> None:
    """Issue 25 item 1: after failed passes, the app's shutdown neither raises nor logs that
    the loop ended with an error ("Application shutdown failed" under uvicorn)."""
    server = ServerSettings(admin_token=ADMIN_TOKEN, sweep_interval_seconds=0.05)
    app = create_app(server, Settings.load(database_url=database_url))
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    api = Api(
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test"),
        app.state.burrow,
    )
    with capture_logs():
        try:
            await execute(api.state.store, BREAK)
            await assert_eventually(lambda: restarted_twice(api))
        finally:
            await api.http.aclose()
    with capture_logs() as logs:
        await lifespan.__aexit__(None, None, None)
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == []
