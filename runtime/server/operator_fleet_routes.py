"""Task-queue and worker-fleet views (SPEC M8, M9).

Ready depth, stale leases, unhealthy tasks and the oldest ready task's age per queue and kind;
live, stale and draining workers per queue; throttling (slots, and this process's held polls).

Operator or admin role, control-plane header, `X-Namespace` like every control route.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from burrow.server import operator_metrics
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody

router = APIRouter(prefix="/api")


def _live_after(state: State) -> timedelta:
    """A worker heard from within this is live: the claims' owner staleness (S5c)."""
    return timedelta(seconds=state.runtime.sticky.owner_stale_seconds)


@router.get("/task-queues")
async def list_task_queues(state: State, caller: OperatorCaller) -> ResponseBody:
    """Every queue of the namespace with open tasks or registered workers."""
    views = await state.store.task_queues(namespace=caller.namespace, live_after=_live_after(state))
    views = operator_metrics.with_polls(views, state.held, caller.namespace)
    return {
        "namespace": caller.namespace,
        "task_queues": [view.model_dump(mode="json") for view in views],
    }


@router.get("/task-queues/{name}")
async def get_task_queue(name: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One queue; 404 `task_queue_not_found` when it has neither open tasks nor workers."""
    views = await state.store.task_queues(
        namespace=caller.namespace, live_after=_live_after(state), queue=name
    )
    views = operator_metrics.with_polls(views, state.held, caller.namespace)
    if not views:
        raise ApiError(
            404,
            "task_queue_not_found",
            f"no open tasks and no workers on task queue {name!r}"
            f" in namespace {caller.namespace!r}",
        )
    return {"namespace": caller.namespace, "task_queue": views[0].model_dump(mode="json")}


@router.get("/workers")
async def list_workers(state: State, caller: OperatorCaller) -> ResponseBody:
    """The namespace's registered workers that have not stopped, with counts."""
    fleet = await state.store.worker_fleet(
        namespace=caller.namespace, live_after=_live_after(state)
    )
    body = fleet.model_dump(mode="json")
    workers = body.pop("fleet")
    return {"namespace": caller.namespace, "metrics": body, "workers": workers}


@router.get("/workers/{worker_id}")
async def get_worker(worker_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One registered worker; 404 `worker_not_found` when unknown or stopped."""
    fleet = await state.store.worker_fleet(
        namespace=caller.namespace, live_after=_live_after(state)
    )
    for worker in fleet.fleet:
        if worker.worker_id == worker_id:
            return {"namespace": caller.namespace, "worker": worker.model_dump(mode="json")}
    raise ApiError(
        404,
        "worker_not_found",
        f"no registered worker {worker_id!r} in namespace {caller.namespace!r}",
    )
