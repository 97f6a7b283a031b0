"""Cooperative cancellation over HTTP (PROTOCOL.md 6.5, protocol 1.20).

`POST /api/workflows/{id}[/runs/{runId}]/request-cancellation` records the run's one request
(the SDK's `Client.request_workflow_cancellation`); a repeat answers the original request id and
cleanup deadline. The claim the request wakes carries it as `cancellation_request`
(`observation`), with the token that reloads the whole history. The worker then names the
authored call the workflow waits in, and
`POST /api/worker/workflow-tasks/{taskId}/deliver-cancellation` records the delivery there, on
that claim, applying the call's cancellation policy (`burrow.store.cooperative`). A delivery
that must wait for an activity or child to end releases the claim; that end wakes the run again.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import Field

from burrow.protocol.cancellation_events import CallKind
from burrow.server.api_errors import ApiError
from burrow.server.control_models import Reason
from burrow.server.deps import OperatorCaller, State, WorkerCaller
from burrow.server.history_pages import encode_token
from burrow.server.routing import ResponseBody, find, run_id_of, wrap
from burrow.server.worker_models import ActivityTaskFence, WorkflowTaskFence
from burrow.store import cooperative
from burrow.store.models import ClaimFence, HistoryEvent

router = APIRouter(prefix="/api")

MAX_CLEANUP_SECONDS = 3600
FULL_HISTORY_TOKEN = encode_token(0)
"""The token that pages a claim's history from its first event (PROTOCOL.md 9)."""
_MAX_SEQUENCE = 2**31 - 1


class RequestCancellation(Reason):
    """`POST .../request-cancellation`."""

    cleanup_timeout_seconds: int | None = Field(default=None, ge=1, le=MAX_CLEANUP_SECONDS)


class DeliverCancellation(WorkflowTaskFence):
    """`POST /api/worker/workflow-tasks/{taskId}/deliver-cancellation`."""

    request_id: str = Field(min_length=1, max_length=255)
    sequence: int = Field(ge=1, le=_MAX_SEQUENCE)
    call_kind: CallKind
    sequence_span: int = Field(default=1, ge=1, le=1000)
    operation_sequence: int | None = Field(default=None, ge=1, le=_MAX_SEQUENCE)
    operation_sequence_span: int = Field(default=1, ge=1, le=1000)


def _stamp(moment: datetime) -> str:
    return moment.isoformat()


def observation(history: list[HistoryEvent]) -> dict[str, object] | None:
    """A claim's `cancellation_request`: the run's request, if its history holds one."""
    request = cooperative.recorded_request(history)
    if request is None:
        return None
    return {
        "request_id": request.workflow_command_id,
        "requested_at": _stamp(request.requested_at),
        "cleanup_deadline_at": _stamp(request.cleanup_deadline_at),
        "history_refresh_page_token": FULL_HISTORY_TOKEN,
    }


async def _request(
    state: State,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    body: RequestCancellation,
) -> ResponseBody:
    run = await find(state, namespace, workflow_id, run_id)
    request = await state.store.request_cancellation(
        namespace=namespace,
        workflow_id=workflow_id,
        run_id=run.run_id,
        reason=body.reason,
        cleanup_seconds=body.cleanup_timeout_seconds,
    )
    return {
        "accepted": True,
        "duplicate": request.duplicate,
        "workflow_id": workflow_id,
        "run_id": request.run_id,
        "cancellation_request": {
            "request_id": request.request_id,
            "requested_at": _stamp(request.requested_at),
            "cleanup_deadline_at": _stamp(request.cleanup_deadline_at),
            "history_refresh_page_token": FULL_HISTORY_TOKEN,
        },
    }


@router.post("/workflows/{workflow_id}/request-cancellation")
async def request_cancellation(
    workflow_id: str,
    state: State,
    caller: OperatorCaller,
    body: RequestCancellation | None = None,
) -> ResponseBody:
    """Ask the current run to cancel, its cleanup code bounded by `cleanup_timeout_seconds`."""
    return await _request(state, caller.namespace, workflow_id, None, body or RequestCancellation())


@router.post("/workflows/{workflow_id}/runs/{run_id}/request-cancellation")
async def request_run_cancellation(
    workflow_id: str,
    run_id: str,
    state: State,
    caller: OperatorCaller,
    body: RequestCancellation | None = None,
) -> ResponseBody:
    """Ask one run to cancel (refused unless it is the running one)."""
    return await _request(
        state, caller.namespace, workflow_id, run_id_of(run_id), body or RequestCancellation()
    )


_WAITING_REASONS = {
    "activity": "cancellation_waiting_for_activity",
    "child": "cancellation_waiting_for_child",
}


@router.post("/worker/workflow-tasks/{task_id}/deliver-cancellation")
async def deliver_cancellation(
    task_id: str, body: DeliverCancellation, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record the delivery at the named call on this claim, or release the claim to wait."""
    fence = ClaimFence(
        task_id=task_id,
        namespace=caller.namespace,
        lease_owner=body.lease_owner,
        attempt=body.workflow_task_attempt,
    )
    if (body.operation_sequence is not None) != (body.call_kind == "selection_handle"):
        raise ApiError(
            422,
            "validation_failed",
            "only a selection handle names an operation range",
            call_kind=body.call_kind,
        )
    if body.call_kind != "parallel" and body.sequence_span != 1:
        raise ApiError(
            422,
            "validation_failed",
            "only a parallel call spans several steps",
            call_kind=body.call_kind,
        )
    target = cooperative.DeliveryTarget(
        request_id=body.request_id,
        sequence=body.sequence,
        call_kind=body.call_kind,
        sequence_span=body.sequence_span,
        operation_sequence=body.operation_sequence,
        operation_sequence_span=body.operation_sequence_span
        if body.operation_sequence is not None
        else None,
    )
    try:
        delivery = await state.store.deliver_cancellation(lease=fence, target=target)
    except cooperative.CancellationRefused as exc:
        raise ApiError(409, str(exc.ids["reason"]), str(exc), task_id=task_id) from exc
    if not delivery.delivered:
        # The claim goes back: the activity's or child's end wakes the run for the next one.
        await state.store.complete_workflow_task(lease=fence, commands=[])
        return wrap(
            {
                "delivered": False,
                "reason": _WAITING_REASONS[delivery.waiting_for or "activity"],
                "claim_released": True,
                "task_id": task_id,
                "workflow_run_id": delivery.run_id,
            }
        )
    return wrap(
        {
            "delivered": True,
            "task_id": task_id,
            "workflow_run_id": delivery.run_id,
            "request_id": target.request_id,
            "sequence": target.sequence,
            "call_kind": target.call_kind,
            "sequence_span": target.sequence_span,
            "operation_sequence": target.operation_sequence,
            "operation_sequence_span": body.operation_sequence_span,
        }
    )


class ActivityStatusRequest(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/status`."""


class AcknowledgeActivityCancellation(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/acknowledge-cancellation`."""

    request_id: str = Field(min_length=1, max_length=255)


def _activity_fence(namespace: str, task_id: str, body: ActivityTaskFence) -> ClaimFence:
    return ClaimFence(
        task_id=task_id,
        namespace=namespace,
        lease_owner=body.lease_owner,
        activity_attempt_id=body.activity_attempt_id,
    )


@router.post("/worker/activity-tasks/{task_id}/status")
async def activity_status(
    task_id: str, body: ActivityStatusRequest, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Observe a held attempt without renewing it: may it go on, was it asked to stop."""
    status = await state.store.activity_status(
        lease=_activity_fence(caller.namespace, task_id, body)
    )
    answer: dict[str, object] = {
        "task_id": task_id,
        "activity_attempt_id": body.activity_attempt_id,
        "lease_owner": body.lease_owner,
        "can_continue": not status.cancel_requested,
        "cancel_requested": status.cancel_requested,
        "heartbeat_recorded": False,
        "reason": "cancel_requested" if status.cancel_requested else None,
        "lease_expires_at": _stamp(status.lease_expires_at),
    }
    if status.request is not None and status.delivery_event_id is not None:
        answer["cancellation_acknowledgement"] = {
            "callback_state": "unknown",
            "request_id": status.request.workflow_command_id,
            "root_request_id": status.request.workflow_command_id,
            "cleanup_deadline_at": _stamp(status.request.cleanup_deadline_at),
            "cancellation_history_event_id": status.delivery_event_id,
        }
    return wrap(answer)


@router.post("/worker/activity-tasks/{task_id}/acknowledge-cancellation")
async def acknowledge_activity_cancellation(
    task_id: str, body: AcknowledgeActivityCancellation, state: State, caller: WorkerCaller
) -> ResponseBody:
    """The worker stopped the attempt it was asked to stop: close it as cancelled."""
    try:
        closed = await state.store.acknowledge_activity_stop(
            lease=_activity_fence(caller.namespace, task_id, body), request_id=body.request_id
        )
    except cooperative.CancellationRefused as exc:
        raise ApiError(409, str(exc.ids["reason"]), str(exc), task_id=task_id) from exc
    return wrap(
        {
            "task_id": task_id,
            "activity_attempt_id": body.activity_attempt_id,
            "lease_owner": body.lease_owner,
            "request_id": body.request_id,
            "acknowledged": True,
            "duplicate": False,
            "reason": None,
            "heartbeat_recorded": False,
            "history_event_id": closed,
        }
    )
