"""Control plane, queries and updates (PROTOCOL.md 17, 6.3; SPEC M4b).

Both go through the store exactly as Burrow's own client does: a query is a query task on the
run's queue that whichever worker serves the run answers (a Burrow worker, or an SDK worker
over `/api/worker/query-tasks`); an update is accepted into the run's history once per
`request_id`, and applied by the Burrow worker that runs the workflow. The call waits for the
answer through the server's `OutcomeWaiter`: woken by the commit that records it (this
server's, or another process's through the broker), re-reading Postgres at the probe interval.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from burrow import codec
from burrow.outcomes import query_done, update_done
from burrow.server.api_errors import ApiError
from burrow.server.control_models import (
    QueryAnswer,
    QueryWorkflow,
    UpdateReceipt,
    UpdateWorkflow,
)
from burrow.server.deps import OperatorCaller, ServerState, State
from burrow.server.routing import ResponseBody, find, run_id_of
from burrow.store.models import JsonDict, TaskState, UpdateState
from burrow.update_validation import VALIDATION_TIMEOUT_SECONDS, Verdict, validate_update

router = APIRouter(prefix="/api/workflows")
log = structlog.get_logger("burrow.server")

QUERY_TIMEOUT_SECONDS = 10.0
UPDATE_WAIT_SECONDS = 60.0
MAX_VALIDATION_SECONDS = VALIDATION_TIMEOUT_SECONDS
# Reasons the SDK maps to "no such query" (PROTOCOL.md 2.4): answered 404, others 409.
_UNKNOWN_QUERY = frozenset({"rejected_unknown_query", "query_not_found"})


async def _query(
    state: ServerState,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    query_name: str,
    body: QueryWorkflow,
) -> ResponseBody:
    run = await find(state, namespace, workflow_id, run_id)
    seconds = body.timeout_seconds or QUERY_TIMEOUT_SECONDS
    arguments = body.input.model_dump() if body.input is not None else dict(codec.encode([]))
    task_id = await state.store.submit_query(
        namespace=namespace,
        workflow_id=workflow_id,
        run_id=run.run_id,
        query_name=query_name,
        arguments=arguments,
        timeout=timedelta(seconds=seconds),
    )
    answer = await state.outcomes.wait_for(
        task_id, lambda: state.store.get_query(task_id=task_id), query_done, seconds
    )
    context = {"workflow_id": workflow_id, "run_id": run.run_id, "query_name": query_name}
    if answer is None or not query_done(answer):
        claimed = answer is not None and answer.state == TaskState.LEASED
        reason = "query_worker_timeout" if claimed else "query_task_not_claimed"
        raise ApiError(
            504, reason, f"no worker answered query {query_name!r} within {seconds}s", **context
        )
    if answer.state == TaskState.FAILED:
        failure = answer.failure or {}
        reason = str(failure.get("reason") or "query_rejected")
        message = str(failure.get("message") or "query failed")
        status = 404 if reason in _UNKNOWN_QUERY else 409
        if status == 409:
            reason = "query_rejected"
        raise ApiError(
            status,
            reason,
            message,
            exception_type=failure.get("exception_type"),
            control_plane={"operation": "query"},
            **context,
        )
    envelope = answer.result or dict(codec.encode(None))
    return QueryAnswer(
        workflow_id=workflow_id,
        run_id=run.run_id,
        query_name=query_name,
        query_task_id=task_id,
        result_envelope=envelope,
        payload_codec=str(envelope.get("codec", "avro")),
    ).model_dump(mode="json")


@router.post("/{workflow_id}/query/{query_name}")
async def query(
    workflow_id: str,
    query_name: str,
    state: State,
    caller: OperatorCaller,
    body: QueryWorkflow | None = None,
) -> ResponseBody:
    """Ask the worker serving the run to answer a query; blocks until it does."""
    return await _query(
        state, caller.namespace, workflow_id, None, query_name, body or QueryWorkflow()
    )


@router.post("/{workflow_id}/runs/{run_id}/query/{query_name}")
async def query_run(
    workflow_id: str,
    run_id: str,
    query_name: str,
    state: State,
    caller: OperatorCaller,
    body: QueryWorkflow | None = None,
) -> ResponseBody:
    """Query one run of the workflow."""
    return await _query(
        state, caller.namespace, workflow_id, run_id_of(run_id), query_name, body or QueryWorkflow()
    )


async def _update(
    state: ServerState,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    update_name: str,
    body: UpdateWorkflow,
) -> JSONResponse:
    request_id = body.request_id or f"server-update-{uuid.uuid4().hex}"
    arguments = body.input.model_dump() if body.input is not None else dict(codec.encode([]))
    target = await find(state, namespace, workflow_id, run_id)
    before = await state.store.get_update(run_id=target.run_id, update_id=request_id)
    if before is not None and before.update_name != update_name:
        raise ApiError(
            409,
            "request_id_conflict",
            f"request_id {request_id!r} was already used for update {before.update_name!r}",
            request_id=request_id,
            retained_command_type="update",
            control_plane={"operation": "update"},
        )
    if before is None:  # a resent update was approved (or needed no approval) already
        await _validate(state, namespace, workflow_id, target.run_id, update_name, body, arguments)
    accepted_on = await state.store.submit_update(
        namespace=namespace,
        workflow_id=workflow_id,
        run_id=target.run_id,
        update_name=update_name,
        arguments=arguments,
        update_id=request_id,
    )
    log.info(
        "update accepted" if before is None else "update resent",
        namespace=namespace,
        run_id=accepted_on,
        workflow_id=workflow_id,
        update_name=update_name,
        request_id=request_id,
    )
    row = await state.store.get_update(run_id=accepted_on, update_id=request_id)
    timed_out = False
    if body.wait_for == "completed" and (row is None or not update_done(row)):
        seconds = body.wait_timeout_seconds or UPDATE_WAIT_SECONDS
        row = await state.outcomes.wait_for(
            accepted_on,
            lambda: state.store.get_update(run_id=accepted_on, update_id=request_id),
            update_done,
            seconds,
        )
        timed_out = row is None or not update_done(row)
    common: dict[str, object] = {
        "workflow_id": workflow_id,
        "run_id": accepted_on,
        "update_id": request_id,
        "update_name": update_name,
        "request_id": request_id,
        "wait_for": body.wait_for,
    }
    if row is not None and row.state == UpdateState.FAILED:
        failure = row.failure or {}
        message = str(failure.get("message") or "workflow update failed")
        # PROTOCOL.md 2.4: 422 with `update_status: failed` is the SDK's UpdateFailed.
        raise ApiError(
            422,
            "update_failed",
            message,
            update_status="failed",
            failure_message=message,
            exception_type=failure.get("exception_type"),
            **common,
        )
    completed = row is not None and row.state == UpdateState.COMPLETED
    status = "completed" if completed else "accepted"
    receipt = UpdateReceipt(
        **common,
        update_status=status,
        outcome="deduplicated" if before is not None else status,
        wait_timed_out=timed_out,
        result_envelope=row.result if completed and row is not None else None,
    )
    return JSONResponse(receipt.model_dump(mode="json"), status_code=200)


async def _validate(
    state: ServerState,
    namespace: str,
    workflow_id: str,
    run_id: str,
    update_name: str,
    body: UpdateWorkflow,
    arguments: JsonDict,
) -> None:
    """Refuse the update unless its validator, if a worker declares one, approves it (6.5).

    A refusal writes nothing to the run's history.
    """
    seconds = min(
        body.wait_timeout_seconds or VALIDATION_TIMEOUT_SECONDS, VALIDATION_TIMEOUT_SECONDS
    )
    checked = await validate_update(
        state.store,
        state.outcomes,
        namespace=namespace,
        workflow_id=workflow_id,
        run_id=run_id,
        update_name=update_name,
        arguments=arguments,
        update_id=body.request_id,
        seconds=seconds,
    )
    if checked.allows:
        return
    context: dict[str, object] = {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "update_name": update_name,
        "request_id": body.request_id,
        "update_validation_task_id": checked.task_id,
        "control_plane": {"operation": "update"},
    }
    failure = checked.failure or {}
    message = str(failure.get("message") or "update validator rejected the request")
    match checked.verdict:
        case Verdict.REJECTED:
            raise ApiError(
                422,
                "update_validator_rejected",
                message,
                update_status="rejected",
                exception_type=failure.get("exception_type"),
                validation_errors=checked.validation_errors,
                retryable=False,
                **context,
            )
        case Verdict.WORKER_FAILED:
            raise ApiError(
                422,
                "update_validation_worker_failed",
                message,
                exception_type=failure.get("exception_type"),
                retryable=False,
                **context,
            )
        case Verdict.TIMED_OUT:
            raise ApiError(
                504,
                "update_validation_execution_timeout",
                f"the validator of update {update_name!r} did not answer within {seconds}s",
                retryable=True,
                **context,
            )
    raise ApiError(
        504,
        "update_validation_task_not_claimed",
        f"no worker took the validation of update {update_name!r} within {seconds}s",
        retryable=True,
        **context,
    )


@router.post("/{workflow_id}/update/{update_name}")
async def update(
    workflow_id: str,
    update_name: str,
    state: State,
    caller: OperatorCaller,
    body: UpdateWorkflow | None = None,
) -> JSONResponse:
    """Accept an update once per `request_id`; with `wait_for: completed`, wait for its result."""
    return await _update(
        state, caller.namespace, workflow_id, None, update_name, body or UpdateWorkflow()
    )


@router.post("/{workflow_id}/runs/{run_id}/update/{update_name}")
async def update_run(
    workflow_id: str,
    run_id: str,
    update_name: str,
    state: State,
    caller: OperatorCaller,
    body: UpdateWorkflow | None = None,
) -> JSONResponse:
    """Update one run of the workflow."""
    return await _update(
        state,
        caller.namespace,
        workflow_id,
        run_id_of(run_id),
        update_name,
        body or UpdateWorkflow(),
    )
