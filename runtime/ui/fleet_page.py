"""The Fleet page: task queues, workers, worker sessions and the matching role (issue 31).

Read in-process from the same store calls and shapes as the operator API
(operator_fleet_routes, operator_session_routes, operator_metrics, fleet_shapes). A queue
holding ready work that no live worker's build and declared types can take
(`compatibility_blocked`, M9) is highlighted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from burrow.server import build_rollout_routes, fleet_shapes, operator_metrics, routing
from burrow.server.auth import Caller as ApiCaller
from burrow.server.auth import Role
from burrow.server.operator_fleet_routes import OVERDUE_AFTER, live_after
from burrow.store.fleet import TaskQueueView
from burrow.store.fleet_details import RegisteredWorker
from burrow.store.metrics import StickyWorkerMetrics
from burrow.store.session_models import SessionState, WorkerSessionInfo
from burrow.ui.access import Caller, UiCaller
from burrow.ui.templating import render

router = APIRouter(prefix="/ui/fleet", include_in_schema=False)
SESSION_LIMIT = 100


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One task queue's figures, as the operator API's queue list computes them."""

    view: TaskQueueView
    registered: int
    """Workers registered on it (live or not, not stopped)."""

    @property
    def blocked(self) -> int:
        """Ready tasks no live worker's build and types can take (M9)."""
        return self.view.backlog.compatibility_blocked_tasks


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One registered worker with its slots, sticky cache and the sessions it holds."""

    worker: RegisteredWorker
    body: dict[str, Any]
    """Its operator API shape (fleet_shapes.worker_body): status and slots as the API says."""
    sticky: StickyWorkerMetrics | None
    sessions_held: int


def _held(sessions: list[WorkerSessionInfo]) -> dict[str, int]:
    held: dict[str, int] = {}
    for info in sessions:
        if info.state is SessionState.ACTIVE and info.lease_owner:
            held[info.lease_owner] = held.get(info.lease_owner, 0) + 1
    return held


def _row(worker: RegisteredWorker, sticky: StickyWorkerMetrics | None, held: int) -> WorkerRow:
    return WorkerRow(worker, fleet_shapes.worker_body(worker), sticky, held)


@router.get("")
async def fleet(request: Request, caller: Caller) -> HTMLResponse:
    """Queues, workers, sessions and the matching role of the caller's namespace."""
    state, namespace = caller.state, caller.namespace
    stale_after = live_after(state)
    views = await state.store.task_queues(namespace=namespace, live_after=stale_after)
    views = operator_metrics.with_polls(views, state.held, namespace)
    workers = await state.store.registered_workers(namespace=namespace, stale_after=stale_after)
    sessions, session_counts = await state.store.list_worker_sessions(
        namespace=namespace, limit=SESSION_LIMIT, owner_stale=routing.owner_stale(state)
    )
    metrics = await operator_metrics.snapshot(state.store, state.runtime, namespace)
    sticky = {w.worker_id: w for w in metrics.sticky_execution_workers}
    held = _held(sessions)
    per_queue: dict[str, int] = {}
    for worker in workers:
        per_queue[worker.task_queue] = per_queue.get(worker.task_queue, 0) + 1
    return render(
        request,
        caller,
        "fleet.html",
        {
            "queues": [QueueRow(view, per_queue.get(view.name, 0)) for view in views],
            "workers": [
                _row(w, sticky.get(w.worker_id), held.get(w.worker_id, 0)) for w in workers
            ],
            "worker_counts": fleet_shapes.worker_counts(workers),
            "sessions": sessions,
            "session_counts": session_counts,
            "metrics": metrics,
            "matching_role": operator_metrics.matching_role(state.runtime, state.settings),
            "stale_after": stale_after,
        },
    )


def _api_caller(caller: UiCaller) -> ApiCaller:
    """The operator API's caller for a UI session (reads only, in the session's namespace)."""
    return ApiCaller(roles=frozenset({Role.OPERATOR}), namespace=caller.namespace)


@router.get("/queues/{name:path}")
async def queue(name: str, request: Request, caller: Caller) -> HTMLResponse:
    """One queue: its pollers, stats, current leases, admission and build-id cohorts."""
    state, namespace = caller.state, caller.namespace
    stale_after: timedelta = live_after(state)
    detail = await state.store.queue_detail(
        namespace=namespace, queue=name, overdue_after=OVERDUE_AFTER
    )
    workers = await state.store.registered_workers(
        namespace=namespace, stale_after=stale_after, task_queue=name
    )
    body = fleet_shapes.queue_body(
        name, detail, workers, stale_after=stale_after, overdue_after=OVERDUE_AFTER
    )
    views = await state.store.task_queues(namespace=namespace, live_after=stale_after, queue=name)
    cohorts = await build_rollout_routes.build_ids(name, state, _api_caller(caller))
    return render(
        request,
        caller,
        "fleet_queue.html",
        {
            "name": name,
            "body": body,
            "view": views[0] if views else None,
            "cohorts": cohorts["build_ids"],
        },
    )
