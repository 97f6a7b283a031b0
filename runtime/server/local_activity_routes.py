"""Worker plane, prepared local activities (PROTOCOL.md 5.6; SDK 2.12.0, protocol 1.20).

`POST /api/worker/workflow-tasks/{taskId}/local-activities/{operation}` admits
(`checkpoint`, `checkpoint-group`, `prepare`, `recover`);
`POST .../local-activities/{activityAttemptId}/{operation}` speaks for one admitted attempt
(`control`, `heartbeat`, `outcome`, `acknowledge-cancellation`). Every call names the
workflow task's lease (lease owner, attempt) and is fenced by it like the task's other calls.

Burrow records local activities through `record_local_activity` on completion (5.4); the
prepared bridge is not installed, so discovery does not advertise `prepared_local_activities`
or `prepared_local_activity_groups`. A call on a current lease is refused with 409
`worker_capability_not_supported` naming the capability, after the lease is checked, and
nothing is written.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter

from burrow.server.api_errors import ApiError
from burrow.server.deps import State, WorkerCaller
from burrow.server.routing import ResponseBody
from burrow.server.worker_models import WorkflowTaskFence
from burrow.store.models import ClaimFence

router = APIRouter(prefix="/api/worker/workflow-tasks")

ADMISSIONS: Final = frozenset({"checkpoint", "checkpoint-group", "prepare", "recover"})
ATTEMPT_CALLS: Final = frozenset({"control", "heartbeat", "outcome", "acknowledge-cancellation"})
GROUPS: Final = "prepared_local_activity_groups"
SINGLE: Final = "prepared_local_activities"


def _unknown(operation: str) -> ApiError:
    return ApiError(
        404,
        "unknown_local_activity_operation",
        f"{operation!r} is not a prepared local activity operation",
        operation=operation,
    )


async def _refuse(
    task_id: str, operation: str, body: WorkflowTaskFence, state: State, caller: WorkerCaller
) -> ResponseBody:
    """The lease first (a stale claim is refused as on every fenced call), then the bridge."""
    await state.store.check_workflow_task_lease(
        lease=ClaimFence(
            task_id=task_id,
            namespace=caller.namespace,
            lease_owner=body.lease_owner,
            attempt=body.workflow_task_attempt,
        )
    )
    capability = GROUPS if operation == "checkpoint-group" else SINGLE
    raise ApiError(
        409,
        "worker_capability_not_supported",
        f"this server does not install {capability}; record local activities with"
        " record_local_activity",
        capability=capability,
        operation=operation,
        task_id=task_id,
    )


@router.post("/{task_id}/local-activities/{operation}")
async def admission(
    task_id: str, operation: str, body: WorkflowTaskFence, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Admit a prepared local activity, a checkpoint or a recovery: refused (not installed)."""
    if operation not in ADMISSIONS:
        raise _unknown(operation)
    return await _refuse(task_id, operation, body, state, caller)


@router.post("/{task_id}/local-activities/{activity_attempt_id}/{operation}")
async def attempt_call(
    task_id: str,
    activity_attempt_id: str,
    operation: str,
    body: WorkflowTaskFence,
    state: State,
    caller: WorkerCaller,
) -> ResponseBody:
    """Control, heartbeat, report or acknowledge one prepared attempt: refused (not installed)."""
    if operation not in ATTEMPT_CALLS:
        raise _unknown(operation)
    return await _refuse(task_id, operation, body, state, caller)
