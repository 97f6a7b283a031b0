"""Repair, archive and redrive over HTTP, as the SDK Client calls them (PROTOCOL.md 17).

`repair_workflow` and `archive_workflow` act on the workflow's current run, as the Durable
Workflow server's instance-targeted commands do; `redrive_workflow` names the failed run. Each
answers the SDK's `WorkflowCommandResult` fields (`outcome`, `command_status`, `command_id`,
`run_id`) with a `control_plane` block naming the operation; a refusal is a 409 whose `reason`
is the reference's rejection code, and writes nothing. The store decides in the transaction that
holds the run (store/workflow_commands.py).
"""

from __future__ import annotations

import uuid
from typing import Literal

import structlog
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from burrow.server.api_errors import ApiError
from burrow.server.control_models import ArchiveWorkflow, CommandRequest, WorkflowCommandResult
from burrow.server.control_routes import current_run, named_run
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store.workflow_commands import CommandOrigin, CommandRefused

router = APIRouter(prefix="/api/workflows")
log = structlog.get_logger("burrow.server")
Operation = Literal["repair", "archive", "redrive"]
CONTROL_PLANE_SCHEMA = "durable-workflow.v2.control-plane-response"


def _control_plane(operation: Operation) -> dict[str, object]:
    return {"schema": CONTROL_PLANE_SCHEMA, "version": 1, "operation": operation}


def _refused(operation: Operation, workflow_id: str, exc: CommandRefused) -> ApiError:
    return ApiError(
        409,
        exc.reason,
        str(exc),
        workflow_id=workflow_id,
        run_id=exc.run_id,
        control_plane=_control_plane(operation),
    )


@router.post("/{workflow_id}/repair")
async def repair(
    workflow_id: str, state: State, caller: OperatorCaller, body: CommandRequest | None = None
) -> ResponseBody:
    """The repair pass for the current run: `repair_dispatched` or `repair_not_needed`."""
    run = await current_run(state, caller.namespace, workflow_id)
    origin = CommandOrigin(str(uuid.uuid4()), None if body is None else body.request_id)
    try:
        done = await state.store.repair_workflow_run(
            namespace=caller.namespace, workflow_id=workflow_id, run_id=run.run_id, origin=origin
        )
    except CommandRefused as exc:
        raise _refused("repair", workflow_id, exc) from None
    outcome = "repair_dispatched" if done.dispatched else "repair_not_needed"
    log.info("workflow repaired", namespace=caller.namespace, run_id=run.run_id, outcome=outcome)
    return WorkflowCommandResult(
        workflow_id=workflow_id,
        run_id=run.run_id,
        outcome=outcome,
        command_id=origin.command_id,
        request_id=origin.request_id,
        repair={
            "leases_expired": done.leases_expired,
            "task_created": done.task_created,
            "wakes_republished": done.wakes_republished,
        },
        control_plane=_control_plane("repair"),
    ).model_dump(mode="json")


@router.post("/{workflow_id}/archive")
async def archive(
    workflow_id: str, state: State, caller: OperatorCaller, body: ArchiveWorkflow | None = None
) -> ResponseBody:
    """Archive the closed current run: `archived`, or `archive_not_needed` when resent."""
    asked = body or ArchiveWorkflow()
    run = await current_run(state, caller.namespace, workflow_id)
    origin = CommandOrigin(str(uuid.uuid4()), asked.request_id)
    try:
        done = await state.store.archive_workflow_run(
            namespace=caller.namespace,
            workflow_id=workflow_id,
            run_id=run.run_id,
            reason=asked.reason,
            origin=origin,
        )
    except CommandRefused as exc:
        raise _refused("archive", workflow_id, exc) from None
    if done.archived_now:
        log.info("workflow archived", namespace=caller.namespace, run_id=run.run_id)
    return WorkflowCommandResult(
        workflow_id=workflow_id,
        run_id=run.run_id,
        outcome="archived" if done.archived_now else "archive_not_needed",
        command_id=origin.command_id,
        reason=done.reason,
        request_id=origin.request_id,
        archived_at=done.archived_at,
        control_plane=_control_plane("archive"),
    ).model_dump(mode="json")


@router.post("/{workflow_id}/runs/{run_id}/redrive")
async def redrive(
    workflow_id: str,
    run_id: str,
    state: State,
    caller: OperatorCaller,
    body: CommandRequest | None = None,
) -> JSONResponse:
    """Continue the failed run as a new run reusing its completed activity results.

    202 with the new run; a resend finds it again (200).
    """
    source = await named_run(state, caller.namespace, workflow_id, run_id)
    origin = CommandOrigin(str(uuid.uuid4()), None if body is None else body.request_id)
    try:
        done = await state.store.redrive_workflow_run(
            namespace=caller.namespace,
            workflow_id=workflow_id,
            run_id=source.run_id,
            origin=origin,
        )
    except CommandRefused as exc:
        raise _refused("redrive", workflow_id, exc) from None
    if done.created:
        log.info(
            "workflow redriven",
            namespace=caller.namespace,
            run_id=done.run.run_id,
            continued_from_run_id=source.run_id,
            resume_step_sequence=done.resume_step,
        )
    result = WorkflowCommandResult(
        workflow_id=workflow_id,
        run_id=done.run.run_id,
        outcome="redriven",
        command_id=origin.command_id,
        target_scope="run",
        request_id=origin.request_id,
        continued_from_run_id=done.continued_from_run_id,
        resume_step_sequence=done.resume_step,
        control_plane=_control_plane("redrive"),
    )
    return JSONResponse(result.model_dump(mode="json"), status_code=202 if done.created else 200)
