"""The operator surfaces (PROTOCOL.md 15, SPEC M8, M9): health, metrics and read-only views.

The views (task queues, workers, worker sessions, Prometheus metrics) live in `operator_*`
modules, build-id rollouts and system maintenance in their own; their routers are included
here, so the app includes this one router.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from burrow.server import (
    build_rollout_routes,
    operator_fleet_routes,
    operator_metrics,
    operator_prometheus_routes,
    operator_session_routes,
    system_routes,
)
from burrow.server.deps import AdminCaller, State
from burrow.server.routing import ResponseBody

router = APIRouter()


@router.get("/api/health")
async def health(state: State) -> JSONResponse:
    """Liveness as the reference server answers it (no credentials needed).

    `{"status": "serving", "timestamp", "checks": {"database": "ok"}}`; when the database does
    not answer a `SELECT 1`, 503 with status `degraded` and `checks.database` `unavailable`.
    While a background loop (the repair pass) keeps failing, the status is `degraded` too and
    the failing loops are named, but it stays 200: the process restarts its loops itself, and a
    restart of the process would not mend what fails them. Errors are in the operator metrics
    (admin only), not here.
    """
    database = await state.store.reachable()
    failing = [loop for loop in state.loops if loop.failing]
    body: dict[str, object] = {
        "status": "serving" if database and not failing else "degraded",
        "timestamp": datetime.now(UTC).isoformat(),
        "checks": {"database": "ok" if database else "unavailable"},
    }
    if failing:
        body["failing_loops"] = [
            {
                key: value
                for key, value in loop.report().items()
                if key not in ("last_error", "rows_isolated")
            }
            for loop in failing
        ]
    return JSONResponse(body, status_code=200 if database else 503)


@router.get("/api/system/operator-metrics")
async def get_operator_metrics(state: State, caller: AdminCaller) -> ResponseBody:
    """`{"namespace", "operator_metrics"}`, as `burrow system operator-metrics --json` prints.

    Backlog, workers, sticky execution, worker sessions, the matching role, process health and
    this process's poll throttling.
    """
    metrics = await operator_metrics.snapshot(state.store, state.runtime, caller.namespace)
    isolated = await state.store.repair_failures(namespace=caller.namespace)
    health = operator_metrics.process_health(state.loops, isolated)
    polls = operator_metrics.poll_throttling(state.held, caller.namespace)
    return operator_metrics.document(
        caller.namespace, metrics, state.runtime, state.settings, health=health, polls=polls
    )


for _module in (
    operator_fleet_routes,
    build_rollout_routes,
    operator_session_routes,
    operator_prometheus_routes,
    system_routes,
):
    router.include_router(_module.router)
