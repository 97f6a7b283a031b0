"""Worker plane, update validation tasks (PROTOCOL.md 6.5; SPEC M4b).

An update to a run whose worker declares a validator for it is validated before it is accepted
(burrow.update_validation): an update validation task, kept beside query tasks, that an SDK
worker leases on its multiplexed workflow poll (`task_kinds: ["workflow",
"update_validation"]`) or here, replays the run read-only, runs the validator and approves or
rejects. Validation never appends history.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

import structlog
from fastapi import APIRouter, Request

from burrow.protocol.shapes import Failure
from burrow.server import longpoll
from burrow.server.api_errors import ApiError, stale_lease
from burrow.server.deps import ServerState, State, WorkerCaller
from burrow.server.history_pages import whole_history_task
from burrow.server.routing import ResponseBody, registered_worker, wrap
from burrow.server.worker_models import (
    PollTasks,
    RejectUpdateValidationTask,
    UpdateValidationAnswered,
    UpdateValidationTaskFence,
    UpdateValidationTaskPayload,
    failure_record,
)
from burrow.store import claims, queries
from burrow.store import errors as store_errors
from burrow.store.models import ClaimedQueryTask, ClaimFence, JsonDict, TaskState
from burrow.store.server_queries import WorkerRegistration
from burrow.update_validation import REJECTED, WORKER_FAILED

router = APIRouter(prefix="/api/worker/update-validation-tasks")
log = structlog.get_logger("burrow.server")
# The caller waits for the verdict; a later one is worth nothing.
VALIDATION_TASK_LEASE_SECONDS = 30.0
KINDS = (queries.UPDATE_VALIDATION,)


def task_payload(claimed: ClaimedQueryTask) -> JsonDict:
    """The poll response's task: the whole history, like a query task's."""
    return UpdateValidationTaskPayload(
        update_validation_task_id=claimed.lease.task_id,
        update_validation_attempt=claimed.lease.attempt,
        update_name=claimed.query_name,
        update_arguments=claimed.arguments,
        **whole_history_task(claimed),
    ).model_dump(mode="json")


async def claim(
    state: ServerState, reg: WorkerRegistration, worker_id: str
) -> ClaimedQueryTask | None:
    """Lease one ready validation task of the worker's queue and workflow types."""
    flt = claims.QueueFilter(
        namespace=reg.namespace,
        queue=reg.task_queue,
        types=reg.workflow_types,
        connection=reg.connection,
        build_id=reg.build_id,
    )
    claimed = await state.store.claim_query_task(
        flt=flt,
        worker_id=worker_id,
        lease=timedelta(seconds=VALIDATION_TASK_LEASE_SECONDS),
        kinds=KINDS,
    )
    if claimed is not None:
        log.info(
            "update validation task leased",
            namespace=reg.namespace,
            queue=reg.task_queue,
            run_id=claimed.run.run_id,
            task_id=claimed.lease.task_id,
            worker_id=worker_id,
            update_name=claimed.query_name,
        )
    return claimed


@router.post("/poll")
async def poll(
    body: PollTasks, request: Request, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Long-poll for an update validation task of the workflow types the worker registered."""
    deadline = longpoll.deadline_of(request, body.timeout_seconds)
    reg = await registered_worker(state, caller.namespace, body)
    if not reg.workflow_types:
        return wrap({"task": None, "poll_status": "no_workflow_capability"})
    claimed = await longpoll.hold(
        state,
        request,
        kind="query",
        namespace=caller.namespace,
        task_queue=body.task_queue,
        deadline=deadline,
        claim=lambda: claim(state, reg, body.worker_id),
        connection=reg.connection,
    )
    if claimed is None:
        return wrap({"task": None, "poll_status": "empty"})
    return wrap({"task": task_payload(claimed), "poll_status": "leased"})


@router.post("/{task_id}/approve")
async def approve(
    task_id: str, body: UpdateValidationTaskFence, state: State, caller: WorkerCaller
) -> ResponseBody:
    """The validator approved the update: the waiting caller goes on to accept it."""
    await _answer(state, caller.namespace, task_id, body, failure=None)
    return wrap(_receipt(task_id, body, "approved"))


@router.post("/{task_id}/reject")
async def reject(
    task_id: str, body: RejectUpdateValidationTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """The validator rejected the update, or could not run: it is not accepted."""
    failure = body.failure
    reason = WORKER_FAILED if failure.reason == WORKER_FAILED else REJECTED
    errors = failure.validation_errors
    record = failure_record(
        message=failure.message or "update validator rejected the request",
        exception_type=failure.type,
        reason=reason,
        stack=failure.stack_trace,
        non_retryable=True,
        cause=None if errors is None else {"validation_errors": errors},
    )
    await _answer(state, caller.namespace, task_id, body, failure=record)
    return wrap(_receipt(task_id, body, "rejected" if reason == REJECTED else "failed"))


async def _answer(
    state: ServerState,
    namespace: str,
    task_id: str,
    body: UpdateValidationTaskFence,
    *,
    failure: Failure | None,
) -> None:
    task = await state.store.get_query(task_id=task_id)
    if task is None or task.task_kind != queries.UPDATE_VALIDATION:
        raise ApiError(
            404,
            "update_validation_task_not_found",
            f"update validation task {task_id} not found",
            update_validation_task_id=task_id,
        )
    if task.state in (TaskState.COMPLETED, TaskState.FAILED):
        raise ApiError(
            409,
            "duplicate_update_validation_completion",
            f"update validation task {task_id} was already answered",
            update_validation_task_id=task_id,
            task_status=task.state.value,
        )
    fence = ClaimFence(
        task_id=task_id,
        namespace=namespace,
        lease_owner=body.lease_owner,
        attempt=body.update_validation_attempt,
    )
    try:
        await state.store.answer_query_task(
            lease=fence,
            result=None if failure is not None else {"approved": True},
            failure=failure,
        )
    except store_errors.StaleLease as exc:
        raise _refusal(exc, task_id) from exc


def _refusal(exc: store_errors.StaleLease, task_id: str) -> ApiError:
    """A fenced verdict's refusal, in the reasons the SDK treats as final (6.5)."""
    refusal = store_errors.LeaseRefusal
    context: dict[str, object] = {"update_validation_task_id": task_id}
    match exc.reason:
        case refusal.TASK_NOT_FOUND:
            message = f"update validation task {task_id} not found"
            return ApiError(404, "update_validation_task_not_found", message, **context)
        case refusal.EXPIRED:
            message = f"the lease on update validation task {task_id} expired"
            return ApiError(409, "update_validation_lease_expired", message, **context)
        case refusal.ATTEMPT_MISMATCH | refusal.OWNER_MISMATCH:
            message = f"update validation task {task_id} is leased to another attempt"
            return ApiError(
                409,
                "stale_update_validation_completion",
                message,
                current_attempt=exc.current_attempt,
                **context,
            )
        case refusal.NOT_LEASED | refusal.RUN_CLOSED:
            message = f"update validation task {task_id} is {exc.task_status}, not leased"
            return ApiError(409, "update_validation_task_not_leased", message, **context)
    return stale_lease(exc)


def _receipt(
    task_id: str,
    body: UpdateValidationTaskFence,
    outcome: Literal["approved", "rejected", "failed"],
) -> JsonDict:
    return UpdateValidationAnswered(
        update_validation_task_id=task_id,
        update_validation_attempt=body.update_validation_attempt,
        outcome=outcome,
    ).model_dump(mode="json")
