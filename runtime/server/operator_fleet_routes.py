"""Task-queue and worker-fleet views, and removing a worker (SPEC M8, M9).

In the reference server's shapes (runtime/server/fleet_shapes.py), which the SDK's
`list_task_queues`, `describe_task_queue`, `list_workers`, `describe_worker` and
`deregister_worker` parse; Burrow's own figures ride along under keys of their own (`backlog`,
`workers`, `throttling` of a queue: ready depth, stale leases, unhealthy and compatibility-blocked
tasks per kind, this process's held polls).

Reads: operator or admin role. `DELETE /api/workers/{id}`: admin role. Control-plane header,
`X-Namespace` like every control route.
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from fastapi import APIRouter

from burrow.server import fleet_shapes, operator_metrics
from burrow.server.api_errors import ApiError
from burrow.server.deps import AdminCaller, OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store import fleet, repair
from burrow.store.fleet_details import RegisteredWorker

router = APIRouter(prefix="/api")
log = structlog.get_logger("burrow.server")
OVERDUE_AFTER = repair.DEFAULT_REPUBLISH_AFTER


def live_after(state: State) -> timedelta:
    """A worker heard from within this is live: the claims' owner staleness (S5c)."""
    return timedelta(seconds=state.runtime.sticky.owner_stale_seconds)


def _empty_view(name: str) -> fleet.TaskQueueView:
    nothing = [fleet.KindBacklog(kind=kind) for kind in fleet.KINDS]
    return fleet.TaskQueueView(
        name=name, backlog=fleet.BacklogMetrics.of(nothing), workers=fleet.WorkerFleetMetrics()
    )


async def _queue(
    state: State,
    namespace: str,
    view: fleet.TaskQueueView,
    *,
    summary: bool,
    workers: list[RegisteredWorker] | None = None,
) -> dict[str, object]:
    """The queue's body; `workers`: its registered workers when the caller read them already."""
    stale_after = live_after(state)
    detail = await state.store.queue_detail(
        namespace=namespace, queue=view.name, overdue_after=OVERDUE_AFTER
    )
    if workers is None:
        workers = await state.store.registered_workers(
            namespace=namespace, stale_after=stale_after, task_queue=view.name
        )
    body = fleet_shapes.queue_body(
        view.name,
        detail,
        workers,
        stale_after=stale_after,
        overdue_after=OVERDUE_AFTER,
        summary=summary,
    )
    return {**body, **view.model_dump(mode="json", exclude={"name"})}


@router.get("/task-queues")
async def list_task_queues(state: State, caller: OperatorCaller) -> ResponseBody:
    """Every queue of the namespace with open tasks or registered workers, by name."""
    views = await state.store.task_queues(namespace=caller.namespace, live_after=live_after(state))
    views = operator_metrics.with_polls(views, state.held, caller.namespace)
    # One read of the namespace's workers for every queue, not one per queue.
    by_queue: dict[str, list[RegisteredWorker]] = {}
    for worker in await state.store.registered_workers(
        namespace=caller.namespace, stale_after=live_after(state)
    ):
        by_queue.setdefault(worker.task_queue, []).append(worker)
    return {
        "namespace": caller.namespace,
        "task_queues": [
            await _queue(
                state, caller.namespace, view, summary=True, workers=by_queue.get(view.name, [])
            )
            for view in views
        ],
    }


@router.get("/task-queues/{name}")
async def get_task_queue(name: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One queue, with its pollers and current leases.

    As the reference answers it, a queue with neither tasks nor workers is described too: empty.
    """
    views = await state.store.task_queues(
        namespace=caller.namespace, live_after=live_after(state), queue=name
    )
    views = operator_metrics.with_polls(views or [_empty_view(name)], state.held, caller.namespace)
    body = await _queue(state, caller.namespace, views[0], summary=False)
    return {"namespace": caller.namespace, **body}


@router.get("/workers")
async def list_workers(
    state: State,
    caller: OperatorCaller,
    task_queue: str | None = None,
    status: str | None = None,
) -> ResponseBody:
    """The namespace's registered workers that have not stopped, most recently heard first.

    `task_queue` and `status` (`active`, `draining` or `stale`) narrow the list.
    """
    stale_after = live_after(state)
    workers = await state.store.registered_workers(
        namespace=caller.namespace, stale_after=stale_after, task_queue=task_queue or None
    )
    if status:
        workers = [w for w in workers if fleet_shapes.status_of(w) == status]
    return {
        "namespace": caller.namespace,
        "stale_after_seconds": int(stale_after.total_seconds()),
        "workers": [fleet_shapes.worker_body(w) for w in workers],
        "metrics": fleet_shapes.worker_counts(workers),
    }


async def _worker(state: State, namespace: str, worker_id: str) -> RegisteredWorker:
    found = await state.store.registered_workers(
        namespace=namespace, stale_after=live_after(state), worker_id=worker_id
    )
    if not found:
        raise ApiError(
            404,
            "worker_not_found",
            f"Worker [{worker_id}] not found in namespace [{namespace}].",
        )
    return found[0]


@router.get("/workers/{worker_id}")
async def get_worker(worker_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One registered worker; 404 `worker_not_found` when unknown or stopped."""
    worker = await _worker(state, caller.namespace, worker_id)
    return fleet_shapes.worker_body(worker, detail=True)


@router.delete("/workers/{worker_id}")
async def deregister_worker(worker_id: str, state: State, caller: AdminCaller) -> ResponseBody:
    """Remove a worker from the roster (admin); 404 `worker_not_found` when unknown or stopped.

    As the worker's own deregistration does (PROTOCOL.md 4.3): it is stopped, the
    workflow-task leases it held go back to ready as next attempts, its sticky bindings and
    sessions are handed over. A process still running has its polls refused until it registers
    again.
    """
    worker = await _worker(state, caller.namespace, worker_id)
    recovered = await state.store.release_workflow_leases(worker_id=worker_id)
    await state.store.deregister_worker(worker_id=worker_id)
    log.info(
        "worker removed by an operator",
        namespace=caller.namespace,
        queue=worker.task_queue,
        worker_id=worker_id,
        recovered_workflow_tasks=recovered,
    )
    return {
        "worker_id": worker_id,
        "outcome": "deregistered",
        "recovered_workflow_task_count": recovered,
    }
