"""The operator metrics document (PROTOCOL.md 14, 15; SPEC M8, M9), for API and CLI alike.

`GET /api/system/operator-metrics` and `burrow system operator-metrics --json` both serve it.

The matching role block says who sweeps and who owns re-poll wakes, from the settings every
process of one deployment shares (`DW_V2_MATCHING_ROLE_QUEUE_WAKE`): with queue wake enabled,
each worker sweeps and re-polls (`in_worker`); with it disabled, `burrow matching` processes do
(`dedicated`). `burrow server` runs the same repair pass in its own process either way (several
sweepers are safe: one pass at a time holds the lock).
"""

from __future__ import annotations

from datetime import timedelta

from burrow.config import Settings
from burrow.server.settings import ServerSettings
from burrow.store import Store
from burrow.store.metrics import OperatorMetrics
from burrow.supervision import Loops

PARTITION_PRIMITIVES = ("connection", "queue", "compatibility", "namespace")


def matching_role(runtime: Settings, server: ServerSettings) -> dict[str, object]:
    """`matching_role` (PROTOCOL.md 14): the same block in discovery and operator metrics."""
    queue_wake = runtime.wakes.worker_repoll
    return {
        "queue_wake_enabled": queue_wake,
        "shape": "in_worker" if queue_wake else "dedicated",
        "wake_owner": "worker_loop" if queue_wake else "dedicated_repair_pass",
        "task_dispatch_mode": "poll",
        "partition_primitives": list(PARTITION_PRIMITIVES),
        "backpressure_model": "lease_ownership",
        # Who runs the repair pass (expired leases, timers, timeouts, lost wakes).
        "repair_pass": {
            "in_worker": queue_wake and runtime.worker.repair,
            "in_server": True,
            "dedicated_matching": not queue_wake,
            "interval_seconds": runtime.worker.repair_interval_seconds,
        },
        "discovery_limits": {
            "wake_signal_ttl_seconds": runtime.wakes.ttl_seconds,
            "worker_repoll_interval_seconds": runtime.wakes.repoll_interval_seconds,
            "poll_probe_seconds": server.poll_probe_seconds,
            "workflow_task_lease_seconds": server.workflow_task_lease_seconds,
            "activity_task_lease_seconds": server.activity_task_lease_seconds,
        },
    }


async def snapshot(store: Store, runtime: Settings, namespace: str) -> OperatorMetrics:
    """The namespace's figures, with "live" meaning what it means to a claim (S5c)."""
    sticky = runtime.sticky
    return await store.operator_metrics(
        namespace=namespace,
        sticky_enabled=sticky.enabled,
        sticky_ttl_seconds=sticky.ttl_seconds,
        live_after=timedelta(seconds=sticky.owner_stale_seconds),
    )


def process_health(loops: Loops, repair_rows_isolated: int) -> dict[str, object]:
    """`process_health` (SPEC M8): this process's loops, and the namespace's isolated rows.

    The rows are those the repair pass of any process isolated and holds out (issue 25 item 1).
    """
    failing = loops.failing()
    return {
        "status": "degraded" if failing else "ok",
        "failing_loops": failing,
        "loops": loops.report(),
        "repair_rows_isolated": repair_rows_isolated,
    }


def document(
    namespace: str,
    metrics: OperatorMetrics,
    runtime: Settings,
    server: ServerSettings,
    *,
    health: dict[str, object] | None = None,
) -> dict[str, object]:
    """`{"namespace", "operator_metrics"}` with the matching role (and `health`) inside."""
    body = metrics.model_dump(mode="json")
    body["matching_role"] = matching_role(runtime, server)
    if health is not None:
        body["process_health"] = health
    return {"namespace": namespace, "operator_metrics": body}
