"""Worker plane, lifecycle (PROTOCOL.md 4): register, heartbeat, deregister."""

from __future__ import annotations

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from burrow.server.api_errors import ApiError
from burrow.server.definitions import refuse_changed_definitions
from burrow.server.deps import State, WorkerCaller
from burrow.server.routing import ResponseBody, wrap
from burrow.server.worker_models import (
    Deregistered,
    HeartbeatAck,
    Registered,
    RegisterWorker,
    WorkerHeartbeat,
)
from burrow.server.worker_protocol import worker_envelope
from burrow.store.models import StickyCacheReport
from burrow.store.sticky_reports import StickyFigures

router = APIRouter(prefix="/api/worker")
log = structlog.get_logger("burrow.server")
HEARTBEAT_INTERVAL_SECONDS = 10
DEFAULT_CONNECTION = "default"


@router.post("/register", status_code=201)
async def register(body: RegisterWorker, state: State, caller: WorkerCaller) -> JSONResponse:
    """Register (or refresh) a worker on one task queue with the types it runs (4.1).

    A worker id registering again is a restarted process: the workflow-task leases it held are
    handed back as next attempts (18.5), so a completion from before the restart is refused.
    A worker id belongs to its namespace: registering it from another is a 409
    `worker_id_conflict`, refused before any lease is released (issue 25).
    """
    await refuse_changed_definitions(state, caller.namespace, body)
    # S3: a worker that keeps a cache opts in to sticky routing, while the server honours it.
    sticky = state.runtime.sticky.enabled and body.keeps_sticky_cache
    cache = await _registered_cache(state, caller.namespace, body) if sticky else None
    registered = await state.store.register_worker(
        worker_id=body.worker_id,
        namespace=caller.namespace,
        task_queue=body.task_queue,
        workflow_types=body.supported_workflow_types,
        activity_types=body.supported_activity_types,
        concurrency=max(1, body.max_concurrent_workflow_tasks + body.max_concurrent_activity_tasks),
        build_id=body.build_id,
        connection=body.connection or DEFAULT_CONNECTION,  # M7: what its polls serve
        # W3, W6: what session requirements are matched against, and how many it may hold.
        capabilities=body.capabilities,
        max_concurrent_worker_sessions=body.max_concurrent_worker_sessions,
        # S8: what a start records for the run, and what a claim is checked against.
        workflow_fingerprints=body.workflow_definition_fingerprints,
        sticky_cache=cache,
        runtime=body.runtime,  # S10: the fleet reports the SDK's language
        update_validators=body.update_validators,  # 6.5: updates it approves before acceptance
        # M8: what `/api/workers` and `/api/task-queues/{name}` report as it declared them.
        sdk_version=body.sdk_version,
        max_workflow_tasks=body.max_concurrent_workflow_tasks,
        max_activity_tasks=body.max_concurrent_activity_tasks,
    )
    released = await state.store.release_workflow_leases(worker_id=body.worker_id)
    # A worker id registering again is a new process (or one that lost its state): its cache
    # is gone, so its bindings end and their next claims replay forced cold (PROTOCOL.md 11).
    unbound = await state.store.end_sticky_bindings(worker_id=body.worker_id)
    figures = body.sticky_figures()
    if sticky and figures is not None:
        await state.store.report_sticky_cache(worker_id=body.worker_id, figures=figures)
    log.info(
        "worker registered",
        namespace=caller.namespace,
        queue=body.task_queue,
        connection=body.connection or DEFAULT_CONNECTION,
        worker_id=body.worker_id,
        workflow_types=body.supported_workflow_types,
        activity_types=body.supported_activity_types,
        released_workflow_tasks=released,
        unbound_workflow_tasks=unbound,
    )
    receipt = Registered(
        worker_id=body.worker_id,
        namespace=caller.namespace,
        task_queue=body.task_queue,
        runtime=body.runtime,
        build_id=body.build_id,
        connection=body.connection or DEFAULT_CONNECTION,
        capabilities=body.capabilities,
        status=registered,  # draining when an operator drained its build-id cohort
        heartbeat_interval_seconds=HEARTBEAT_INTERVAL_SECONDS,
    )
    return JSONResponse(wrap(receipt.model_dump(mode="json")), status_code=201)


async def _registered_cache(
    state: State, namespace: str, body: RegisterWorker
) -> StickyCacheReport:
    """The cache a registration stores: on, with its capacity (S10).

    The counters the worker id last reported are kept: they are cumulative, and only what they
    rise by is counted (store/sticky_reports.py), so a process that registers again does not
    count its earlier hits twice.
    """
    reg = await state.store.worker_registration(worker_id=body.worker_id)
    before = None
    if reg is not None and reg.namespace == namespace:
        before = await state.store.sticky_cache_figures(worker_id=body.worker_id)
    opened = StickyFigures(enabled=True, capacity=body.sticky_cache_capacity or 0)
    return opened.merged_into(before)


@router.post("/heartbeat")
async def heartbeat(body: WorkerHeartbeat, state: State, caller: WorkerCaller) -> ResponseBody:
    """Mark the worker live (4.2); 404 `worker_not_registered` if it never registered."""
    reg = await state.store.worker_registration(worker_id=body.worker_id)
    if reg is None or reg.namespace != caller.namespace:
        raise ApiError(404, "worker_not_registered", f"worker {body.worker_id} is not registered")
    figures = body.sticky_figures()
    if figures is None:
        await state.store.heartbeat_worker(worker_id=body.worker_id)
    else:  # S10: stored as a Burrow worker's heartbeat figures are
        await state.store.report_sticky_cache(
            worker_id=body.worker_id, figures=figures, heartbeat=True
        )
    ack = HeartbeatAck(
        worker_id=body.worker_id, heartbeat_interval_seconds=HEARTBEAT_INTERVAL_SECONDS
    )
    return wrap(ack.model_dump(mode="json"))


@router.delete("/registrations/{worker_id}")
async def deregister(worker_id: str, state: State, caller: WorkerCaller) -> ResponseBody:
    """Stop the worker and hand its workflow-task leases back (4.3, 18.6)."""
    reg = await state.store.worker_registration(worker_id=worker_id)
    if reg is None or reg.namespace != caller.namespace:
        raise ApiError(404, "worker_not_found", f"worker {worker_id} is not registered")
    recovered = await state.store.release_workflow_leases(worker_id=worker_id)
    await state.store.deregister_worker(worker_id=worker_id)
    log.info(
        "worker deregistered",
        namespace=caller.namespace,
        queue=reg.task_queue,
        worker_id=worker_id,
        recovered_workflow_tasks=recovered,
    )
    receipt = Deregistered(worker_id=worker_id, recovered_workflow_task_count=recovered)
    return {**receipt.model_dump(mode="json"), **worker_envelope()}
