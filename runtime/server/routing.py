"""Helpers the route modules share: the worker-plane envelope, the polling worker, runs by id."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta

import structlog

from burrow.errors import WorkflowNotFoundError
from burrow.server.api_errors import ApiError
from burrow.server.deps import ServerState
from burrow.server.polls import Answer
from burrow.server.worker_models import PollTasks
from burrow.server.worker_protocol import worker_envelope
from burrow.store.models import RunInfo, WorkerState
from burrow.store.server_queries import WorkerRegistration

log = structlog.get_logger("burrow.server")

ResponseBody = dict[str, object]
"""A route's JSON response body, already in JSON form (`model_dump(mode="json")`).

Not `JsonObject`: FastAPI checks a route's result against its annotation, and the recursive JSON
union costs four times what this does on a poll answer carrying 500 history events.
"""


def wrap(body: Mapping[str, object]) -> ResponseBody:
    """A worker-plane response: its fields plus the protocol envelope (PROTOCOL.md 2.3)."""
    return {**body, **worker_envelope()}


async def registered_worker(
    state: ServerState, namespace: str, body: PollTasks
) -> WorkerRegistration:
    """The polling worker's registration; 412 unregistered, 409 on a queue or build mismatch."""
    reg = await state.store.worker_registration(worker_id=body.worker_id)
    if reg is None or reg.namespace != namespace or reg.state == WorkerState.STOPPED:
        raise ApiError(
            412,
            "worker_not_registered",
            f"worker {body.worker_id} is not registered; call POST /worker/register first",
            worker_id=body.worker_id,
        )
    if reg.task_queue != body.task_queue:
        raise ApiError(
            409,
            "task_queue_mismatch",
            f"worker {body.worker_id} registered on {reg.task_queue!r}, polled {body.task_queue!r}",
            registered_task_queue=reg.task_queue,
        )
    if body.build_id is not None and body.build_id != reg.build_id:
        raise ApiError(
            409,
            "build_id_mismatch",
            f"worker {body.worker_id} registered build {reg.build_id!r}, polled {body.build_id!r}",
        )
    return reg


def refuse_if_draining(reg: WorkerRegistration, *, kind: str) -> None:
    """409 `worker_draining` for a draining worker's poll for new work (PROTOCOL.md 5.1, 16).

    A draining worker finishes what it holds and takes nothing new (S8); its heartbeats,
    completions, failures and a resent poll's redelivery of a task it already leased still go
    through (callers check this after the redelivery).
    """
    if reg.state == WorkerState.DRAINING:
        log.info(
            "poll refused: worker draining",
            namespace=reg.namespace,
            queue=reg.task_queue,
            worker_id=reg.worker_id,
            kind=kind,
        )
        raise ApiError(
            409,
            "worker_draining",
            f"worker {reg.worker_id} is draining; it takes no new {kind} tasks",
            task=None,
            poll_status="draining",
            worker_status="draining",
            drain_intent="draining",
            task_kind=f"{kind}_task",
        )


async def answered_run(state: ServerState, answer: Answer) -> RunInfo | None:
    """The run a remembered poll answer names, or None when it is gone."""
    try:
        return await state.store.get_run(
            namespace=str(answer["namespace"]),
            workflow_id=str(answer["workflow_id"]),
            run_id=str(answer["run_id"]),
        )
    except WorkflowNotFoundError:
        return None


async def find(state: ServerState, namespace: str, workflow_id: str, run_id: str | None) -> RunInfo:
    """The run (latest of the workflow id unless `run_id`); 404 `workflow_not_found`."""
    return await state.store.get_run(namespace=namespace, workflow_id=workflow_id, run_id=run_id)


def run_id_of(run_id: str) -> str:
    """A run id from a path; 404 `workflow_not_found` when it is not a UUID (none would match)."""
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise ApiError(404, "workflow_not_found", f"run {run_id} not found") from None
    return run_id


def owner_stale(state: ServerState) -> timedelta:
    """When a silent session holder counts as gone: the runtime's own setting (W5)."""
    return timedelta(seconds=state.runtime.sticky.owner_stale_seconds)
