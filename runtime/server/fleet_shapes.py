"""The reference server's shapes of workers and task queues (SPEC M8; SDK 2.12.0 `Client`).

`worker_body` is one item of `GET /api/workers` (and `GET /api/workers/{id}` with `detail`);
`queue_body` is `GET /api/task-queues/{name}` (and, without pollers and leases, an item of
`GET /api/task-queues`). Burrow has no server-side lease or dispatch budgets, so the admission's
`server_*` limits are None and its `server_budget_source` is `none`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from burrow.store.fleet_details import CurrentLease, KindCounts, QueueDetail, RegisteredWorker
from burrow.store.models import WorkerState

KINDS = ("workflow", "activity")
NO_SERVER_BUDGET = "none"
HEARTBEAT_INTERVAL_SECONDS = 10


def status_of(worker: RegisteredWorker) -> str:
    """`stale` when silent past the window, else its stored state (`active`, `draining`)."""
    return "stale" if worker.stale else worker.state.value


def _slots(worker: RegisteredWorker, kind: str) -> int:
    """The slots the worker declared for a kind; a Burrow worker's concurrency if it serves it."""
    declared = worker.max_workflow_tasks if kind == "workflow" else worker.max_activity_tasks
    if declared is not None:
        return declared
    serves = worker.workflow_types if kind == "workflow" else worker.activity_types
    return worker.concurrency if serves else 0


def worker_body(worker: RegisteredWorker, *, detail: bool = False) -> dict[str, object]:
    """One worker as the reference's WorkerManagementController reports it, plus Burrow's own."""
    body: dict[str, object] = {
        "worker_id": worker.worker_id,
        "namespace": worker.namespace,
        "task_queue": worker.task_queue,
        "runtime": worker.runtime,
        "sdk_version": worker.sdk_version,
        "build_id": worker.build_id,
        "supported_workflow_types": worker.workflow_types,
        "workflow_definition_fingerprints": worker.workflow_fingerprints,
        "supported_activity_types": worker.activity_types,
        "max_concurrent_workflow_tasks": _slots(worker, "workflow"),
        "max_concurrent_activity_tasks": _slots(worker, "activity"),
        "status": status_of(worker),
        "last_heartbeat_at": worker.heartbeat_at.isoformat(),
        "registered_at": worker.registered_at.isoformat(),
        # Burrow's own: the connection its polls serve (M7), its session capabilities (W3).
        "connection": worker.connection,
        "capabilities": worker.capabilities,
        "live": not worker.stale,
    }
    if detail:
        # The row changes on every registration and heartbeat, which also set `heartbeat_at`.
        body["updated_at"] = worker.heartbeat_at.isoformat()
        body["heartbeat_interval_seconds"] = HEARTBEAT_INTERVAL_SECONDS
    return body


def worker_counts(workers: list[RegisteredWorker]) -> dict[str, int]:
    """Burrow's counts over a roster: live, stale and draining workers, and live slots."""
    active = [w for w in workers if w.state == WorkerState.ACTIVE]
    return {
        "active_workers": sum(not w.stale for w in active),
        "stale_workers": sum(w.stale for w in active),
        "draining_workers": sum(w.state == WorkerState.DRAINING for w in workers),
        "slot_capacity": sum(w.concurrency for w in active if not w.stale),
    }


def _poller(worker: RegisteredWorker, stale_after: timedelta) -> dict[str, object]:
    return {
        "worker_id": worker.worker_id,
        "runtime": worker.runtime,
        "sdk_version": worker.sdk_version,
        "build_id": worker.build_id,
        "last_heartbeat_at": worker.heartbeat_at.isoformat(),
        "heartbeat_expires_at": (worker.heartbeat_at + stale_after).isoformat(),
        "status": status_of(worker),
        "is_stale": worker.stale,
        "supported_workflow_types": worker.workflow_types,
        "supported_activity_types": worker.activity_types,
        "max_concurrent_workflow_tasks": _slots(worker, "workflow"),
        "max_concurrent_activity_tasks": _slots(worker, "activity"),
    }


def _age_label(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def _age_ms(since: datetime | None, now: datetime) -> int:
    return 0 if since is None else max(0, int((now - since).total_seconds() * 1000))


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _stats(
    detail: QueueDetail, kinds: dict[str, KindCounts], pollers: list[dict[str, object]], stale: int
) -> dict[str, object]:
    oldest = detail.oldest_ready
    age = (
        None if oldest is None else max(0, int((detail.now - oldest.available_at).total_seconds()))
    )
    active = sum(not p["is_stale"] for p in pollers)
    return {
        "approximate_backlog_count": sum(kinds[k].ready for k in KINDS),
        "approximate_backlog_age": _age_label(age),
        "approximate_backlog_age_seconds": age,
        "oldest_ready_task": None
        if oldest is None
        else {
            "task_id": oldest.task_id,
            "task_type": oldest.task_type,
            "workflow_id": oldest.workflow_id,
            "run_id": oldest.run_id,
            "available_at": oldest.available_at.isoformat(),
            "age_seconds": age,
        },
        **{
            f"{kind}_tasks": {
                "ready_count": kinds[kind].ready,
                "leased_count": kinds[kind].leased,
                "expired_lease_count": kinds[kind].expired_leases,
            }
            for kind in KINDS
        },
        "pollers": {
            "active_count": active,
            "stale_count": len(pollers) - active,
            "stale_after_seconds": stale,
        },
        "tasks_added_last_minute": sum(kinds[k].added_last_minute for k in KINDS),
        "tasks_dispatched_last_minute": sum(kinds[k].dispatched_last_minute for k in KINDS),
    }


def _repair(detail: QueueDetail, kinds: dict[str, KindCounts], overdue: int) -> dict[str, object]:
    """The reference's per-queue repair view: Burrow dispatches nothing, so none failed."""
    expired = sum(kinds[k].expired_leases for k in KINDS)
    late = sum(kinds[k].overdue for k in KINDS)
    expired_at = min(
        (at for k in KINDS if (at := kinds[k].oldest_lease_expired_at) is not None), default=None
    )
    late_since = min(
        (at for k in KINDS if (at := kinds[k].oldest_overdue_since) is not None), default=None
    )
    return {
        "candidates": expired + late,
        "dispatch_failed": 0,
        "oldest_dispatch_failed_at": None,
        "max_dispatch_failed_age_ms": 0,
        "expired_leases": expired,
        "oldest_lease_expired_at": _iso(expired_at),
        "max_lease_expired_age_ms": _age_ms(expired_at, detail.now),
        "dispatch_overdue": late,
        "oldest_dispatch_overdue_since": _iso(late_since),
        "max_dispatch_overdue_age_ms": _age_ms(late_since, detail.now),
        "needs_attention": expired + late > 0,
        "policy": {"redispatch_after_seconds": overdue},
    }


def _task_admission(
    kind: str, counts: KindCounts, pollers: list[dict[str, object]]
) -> dict[str, object]:
    field = f"max_concurrent_{kind}_tasks"
    active = [p for p in pollers if not p["is_stale"] and p["status"] == "active"]
    slots = sum(int(str(p[field])) for p in active)
    if not active:
        status = "no_active_workers"
    elif slots <= 0:
        status = "no_slots"
    else:
        status = "saturated" if counts.leased >= slots else "accepting"
    return {
        "budget_source": f"worker_registration.{field}",
        "server_budget_source": NO_SERVER_BUDGET,
        "active_worker_count": len(active),
        "configured_slot_count": slots,
        "leased_count": counts.leased,
        "ready_count": counts.ready,
        "available_slot_count": max(0, slots - counts.leased),
        "server_max_active_leases_per_queue": None,
        "server_active_lease_count": counts.leased,
        "server_remaining_active_lease_capacity": None,
        "server_max_active_leases_per_namespace": None,
        "server_namespace_active_lease_count": None,
        "server_remaining_namespace_active_lease_capacity": None,
        "server_max_dispatches_per_minute": None,
        "server_dispatch_count_this_minute": counts.dispatched_last_minute,
        "server_remaining_dispatch_capacity": None,
        "server_max_dispatches_per_minute_per_namespace": None,
        "server_namespace_dispatch_count_this_minute": None,
        "server_remaining_namespace_dispatch_capacity": None,
        "server_dispatch_budget_group": None,
        "server_max_dispatches_per_minute_per_budget_group": None,
        "server_budget_group_dispatch_count_this_minute": 0,
        "server_remaining_budget_group_dispatch_capacity": None,
        "server_lock_required": False,
        "server_lock_supported": False,
        "status": status,
    }


def queue_body(
    name: str,
    detail: QueueDetail,
    workers: list[RegisteredWorker],
    *,
    stale_after: timedelta,
    overdue_after: timedelta,
    summary: bool = False,
) -> dict[str, object]:
    """One queue as the reference's TaskQueueController shows it; `summary` as its index does."""
    kinds = {kind: detail.kinds.get(kind) or KindCounts(kind=kind) for kind in KINDS}
    pollers = sorted(
        (_poller(w, stale_after) for w in workers),
        key=lambda p: (bool(p["is_stale"]), str(p["worker_id"])),
    )
    stale = int(stale_after.total_seconds())
    body: dict[str, object] = {"name": name}
    if not summary:
        body["pollers"] = pollers
    body["stats"] = _stats(detail, kinds, pollers, stale)
    if not summary:
        body["current_leases"] = [_lease(lease) for lease in detail.current_leases]
    body["repair"] = _repair(detail, kinds, int(overdue_after.total_seconds()))
    body["admission"] = {
        **{f"{kind}_tasks": _task_admission(kind, kinds[kind], pollers) for kind in KINDS},
        "query_tasks": {
            "status": "accepting",
            "budget_source": NO_SERVER_BUDGET,
            "max_pending_per_queue": None,
            "approximate_pending_count": detail.pending_queries,
            "remaining_pending_capacity": None,
            "lock_required": False,
            "lock_supported": False,
        },
    }
    return body


def _lease(lease: CurrentLease) -> dict[str, object]:
    body: dict[str, object] = {
        "task_id": lease.task_id,
        "task_type": lease.task_type,
        "workflow_id": lease.workflow_id,
        "run_id": lease.run_id,
        "lease_owner": lease.lease_owner,
        "lease_expires_at": _iso(lease.lease_expires_at),
        "is_expired": lease.is_expired,
    }
    if lease.task_type == "workflow":
        body["workflow_task_attempt"] = lease.attempt
    else:
        body["activity_attempt_id"] = lease.activity_attempt_id
        body["attempt_number"] = lease.attempt
    return body
