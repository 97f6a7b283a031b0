"""The trivial operator surfaces (PROTOCOL.md 15, SPEC M8): health and operator metrics."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter

from burrow.server.deps import AdminCaller, State
from burrow.server.discovery import matching_role

router = APIRouter(prefix="/api")


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness: the process answers (no credentials needed, nothing read)."""
    return {"status": "ok"}


@router.get("/system/operator-metrics")
async def operator_metrics(state: State, caller: AdminCaller) -> dict[str, Any]:
    """`{"namespace", "operator_metrics"}`: sticky execution figures plus the matching role."""
    sticky = state.runtime.sticky
    snapshot = await state.store.operator_metrics(
        namespace=caller.namespace,
        sticky_enabled=sticky.enabled,
        sticky_ttl_seconds=sticky.ttl_seconds,
        live_after=timedelta(seconds=sticky.owner_stale_seconds),
    )
    document = snapshot.model_dump(mode="json")
    document["matching_role"] = matching_role(state)
    return {"namespace": caller.namespace, "operator_metrics": document}
