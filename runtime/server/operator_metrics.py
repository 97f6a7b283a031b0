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
from burrow.server.polls import HeldPolls
from burrow.server.settings import ServerSettings
from burrow.store import Store
from burrow.store.fleet import TaskQueueView
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


def with_polls(views: list[TaskQueueView], held: HeldPolls, namespace: str) -> list[TaskQueueView]:
    """The views with this process's held-poll figures filled into their throttling (M8)."""
    filled = []
    for view in views:
        polls = held.of(namespace, view.name)
        throttling = view.throttling.model_copy(
            update={
                "polls_held": polls.held,
                "held_poll_capacity": held.limit,
                "polls_refused": polls.refused,
            }
        )
        filled.append(view.model_copy(update={"throttling": throttling}))
    return filled


def poll_throttling(held: HeldPolls, namespace: str) -> dict[str, object]:
    """`poll_throttling` (SPEC M8): the serving process's held-poll limiter (PROTOCOL.md 2.4).

    Only a server has one, so `burrow system operator-metrics` (no server) leaves it out.
    `polls_held` counts every namespace's held polls against the one cap; `polls_refused` and
    `by_queue` this namespace's, refusals since the process started.
    """
    queues = held.queues(namespace)
    return {
        "held_poll_capacity": held.limit,
        "polls_held": held.held,
        "polls_refused": sum(q.refused for q in queues.values()),
        "by_queue": {
            name: {"polls_held": q.held, "polls_refused": q.refused} for name, q in queues.items()
        },
    }


def document(
    namespace: str,
    metrics: OperatorMetrics,
    runtime: Settings,
    server: ServerSettings,
    *,
    health: dict[str, object] | None = None,
    polls: dict[str, object] | None = None,
) -> dict[str, object]:
    """`{"namespace", "operator_metrics"}` with the matching role (`health`, `polls`) inside."""
    body = metrics.model_dump(mode="json")
    body["matching_role"] = matching_role(runtime, server)
    if health is not None:
        body["process_health"] = health
    if polls is not None:
        body["poll_throttling"] = polls
    return {"namespace": namespace, "operator_metrics": body}
