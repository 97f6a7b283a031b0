"""The operator surfaces (PROTOCOL.md 15, SPEC M8, M9): health, metrics and read-only views.

The views (task queues, workers, worker sessions, Prometheus metrics) live in `operator_*`
modules; their routers are included here, so the app includes this one router.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from burrow.server import operator_fleet, operator_metrics, operator_prometheus, operator_sessions
from burrow.server.deps import AdminCaller, State

router = APIRouter()


@router.get("/api/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers (no credentials needed, nothing read)."""
    return {"status": "ok"}


@router.get("/api/system/operator-metrics")
async def get_operator_metrics(state: State, caller: AdminCaller) -> dict[str, Any]:
    """`{"namespace", "operator_metrics"}`, as `burrow system operator-metrics --json` prints.

    Backlog, workers, sticky execution, worker sessions and the matching role.
    """
    metrics = await operator_metrics.snapshot(state.store, state.runtime, caller.namespace)
    return operator_metrics.document(caller.namespace, metrics, state.runtime, state.settings)


for _module in (operator_fleet, operator_sessions, operator_prometheus):
    router.include_router(_module.router)
