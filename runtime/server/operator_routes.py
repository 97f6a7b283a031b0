"""The operator surfaces (PROTOCOL.md 15, SPEC M8, M9): health, metrics and read-only views.

The views (task queues, workers, worker sessions, Prometheus metrics) live in `operator_*`
modules; their routers are included here, so the app includes this one router.
"""

from __future__ import annotations

from fastapi import APIRouter

from burrow.server import (
    operator_fleet_routes,
    operator_metrics,
    operator_prometheus_routes,
    operator_session_routes,
)
from burrow.server.deps import AdminCaller, State
from burrow.server.routing import ResponseBody

router = APIRouter()


@router.get("/api/health")
async def health(state: State) -> ResponseBody:
    """Liveness: the process answers (no credentials needed, nothing read).

    While a background loop (the repair pass) keeps failing, the status is `degraded` and the
    failing loops are named. It stays 200: the process restarts its loops itself, and a
    restart of the process would not mend what fails them. Errors are in the operator metrics
    (admin only), not here.
    """
    failing = [loop for loop in state.loops if loop.failing]
    if not failing:
        return {"status": "ok"}
    return {
        "status": "degraded",
        "failing_loops": [
            {
                key: value
                for key, value in loop.report().items()
                if key not in ("last_error", "rows_isolated")
            }
            for loop in failing
        ],
    }


@router.get("/api/system/operator-metrics")
async def get_operator_metrics(state: State, caller: AdminCaller) -> ResponseBody:
    """`{"namespace", "operator_metrics"}`, as `burrow system operator-metrics --json` prints.

    Backlog, workers, sticky execution, worker sessions, the matching role and process health.
    """
    metrics = await operator_metrics.snapshot(state.store, state.runtime, caller.namespace)
    isolated = await state.store.repair_failures(namespace=caller.namespace)
    health = operator_metrics.process_health(state.loops, isolated)
    return operator_metrics.document(
        caller.namespace, metrics, state.runtime, state.settings, health=health
    )


for _module in (operator_fleet_routes, operator_session_routes, operator_prometheus_routes):
    router.include_router(_module.router)
