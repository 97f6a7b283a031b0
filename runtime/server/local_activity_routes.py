"""Worker plane, prepared local activities (PROTOCOL.md 5.6; SDK 2.12.0, protocol 1.20).

`POST /api/worker/workflow-tasks/{taskId}/local-activities/{operation}` admits
(`checkpoint`, `checkpoint-group`, `prepare`, `recover`);
`POST .../local-activities/{activityAttemptId}/{operation}` speaks for one admitted attempt
(`control`, `heartbeat`, `outcome`, `acknowledge-cancellation`). Every call names the
workflow task's lease (lease owner, attempt) and is fenced by it like the task's other calls;
the store (`burrow.store.prepared_locals`) records each step as ordinary activity history.

Discovery advertises `prepared_local_activities` and `prepared_local_activity_groups`; a group
may mix local calls with activities, timers and children, which its checkpoint opens as the
task's completion would. A local call in the run's cancellation cleanup names the request and
its delivery, and ends by the cleanup deadline. Not installed: explicit local cancellation
policies, cleanup within cancellation scopes, and cooperative stops of a running local
callback (`control` never asks one to stop for a cancellation request, so
`acknowledge-cancellation` has nothing to acknowledge and is refused).
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import TypeVar

from fastapi import APIRouter
from pydantic import ValidationError

from burrow.codec import Payload, encode_blob
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure, JsonDict
from burrow.server import parallel_groups
from burrow.server.api_errors import ApiError
from burrow.server.cancellation_routes import FULL_HISTORY_TOKEN
from burrow.server.deps import State, WorkerCaller
from burrow.server.local_activity_models import (
    MAX_GROUP,
    AcknowledgeCancellation,
    Checkpoint,
    Control,
    GroupMember,
    Heartbeat,
    Outcome,
    Prepare,
    Recover,
)
from burrow.server.routing import ResponseBody, wrap
from burrow.server.worker_models import WorkflowTaskFence
from burrow.store import prepared_admissions as admissions
from burrow.store import prepared_locals as prepared
from burrow.store import prepared_outcomes as outcomes
from burrow.store.models import ClaimFence

router = APIRouter(prefix="/api/worker/workflow-tasks")

T = TypeVar("T")


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _claim(
    state: State, caller: WorkerCaller, task_id: str, body: WorkflowTaskFence
) -> prepared.Claim:
    fence = ClaimFence(
        task_id=task_id,
        namespace=caller.namespace,
        lease_owner=body.lease_owner,
        attempt=body.workflow_task_attempt,
    )
    lease = timedelta(seconds=state.settings.workflow_task_lease_seconds)
    return prepared.Claim(lease=fence, lease_duration=lease)


async def _call(pending: Awaitable[T]) -> T:
    """The store's answer, its refusal as the protocol names it."""
    try:
        return await pending
    except prepared.PreparedRefused as exc:
        ids = dict(exc.ids)
        reason, status = str(ids.pop("reason")), int(str(ids.pop("status")))
        raise ApiError(status, reason, str(exc), **ids) from exc


def _claim_fields(claim: prepared.Claim, task_id: str, run_id: str) -> dict[str, object]:
    return {
        "task_id": task_id,
        "workflow_task_id": task_id,
        "workflow_run_id": run_id,
        "workflow_task_attempt": claim.epoch,
        "lease_owner": claim.lease.lease_owner,
    }


# -- admissions ------------------------------------------------------------------------------


@router.post("/{task_id}/local-activities/checkpoint")
async def checkpoint(
    task_id: str, body: Checkpoint, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record the authored steps before a prepared local call (side effects, versions)."""
    claim = _claim(state, caller, task_id, body)
    try:
        commands = [cmd.parse_command(command) for command in body.commands]
    except cmd.InvalidCommand as exc:
        raise ApiError(422, "validation_failed", f"invalid checkpoint command: {exc}") from exc
    done = await _call(
        state.store.checkpoint_local_prefix(
            claim=claim, start_sequence=body.start_sequence, commands=commands
        )
    )
    return _checkpointed(claim, task_id, body, done)


@router.post("/{task_id}/local-activities/checkpoint-group")
async def checkpoint_group(
    task_id: str, body: Checkpoint, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Open every member of a parallel group of local calls at once (atomic admission)."""
    claim = _claim(state, caller, task_id, body)
    members, kind = _members(body)
    done = await _call(
        state.store.checkpoint_local_group(
            claim=claim, start_sequence=body.start_sequence, members=members, kind=kind
        )
    )
    answer = _checkpointed(claim, task_id, body, done)
    answer["local_activities"] = [
        {"sequence": step, "activity_execution_id": execution}
        for step, execution in done.local_activities
    ]
    return answer


_REMOTE = {"schedule_activity": "activity", "start_timer": "timer", "start_child_workflow": "child"}


def _kind_of(command: JsonDict) -> str:
    kind = str(command.get("type"))
    return "activity" if kind == "prepare_local_activity" else _REMOTE.get(kind, kind)


def _members(body: Checkpoint) -> tuple[list[admissions.GroupMember], str]:
    """The group's members at their places in the group, and its kind; else 409 or 422.

    A local call is taken as its options; an activity, timer or child as its command.
    """
    size = len(body.commands)
    if not 1 <= size <= MAX_GROUP:
        raise ApiError(422, "validation_failed", f"a group has 1 to {MAX_GROUP} members")
    kinds = [_kind_of(command) for command in body.commands]
    kind = kinds[0] if len(set(kinds)) == 1 else "mixed"
    members: list[admissions.GroupMember] = []
    for index, command in enumerate(body.commands):
        if kinds[index] not in ("activity", "timer", "child"):
            raise ApiError(
                409,
                "invalid_commands",
                f"command {index} ({command.get('type')!r}) is no member of a prepared group",
                command=index,
            )
        expected = parallel_groups.entry(body.start_sequence, size, index, kind)
        leaf = {key: command.get(key) for key in expected}
        if leaf != expected or command.get("parallel_group_path") != [expected]:
            raise ApiError(
                409,
                "invalid_commands",
                f"command {index}: group member {leaf} is not {expected}",
                command=index,
            )
        members.append(_member(index, command))
    return members, kind


def _member(index: int, command: JsonDict) -> admissions.GroupMember:
    try:
        if command.get("type") == "prepare_local_activity":
            return GroupMember.model_validate(command).spec()
        parsed = cmd.parse_command(parallel_groups.strip(command))
    except (ValidationError, cmd.InvalidCommand) as exc:
        raise ApiError(422, "validation_failed", f"command {index}: {exc}") from exc
    if not isinstance(parsed, cmd.ScheduleActivity | cmd.StartTimer | cmd.StartChildWorkflow):
        raise ApiError(409, "invalid_commands", f"command {index} is no group member")
    return parsed


def _checkpointed(
    claim: prepared.Claim, task_id: str, body: Checkpoint, done: admissions.Checkpointed
) -> ResponseBody:
    return wrap(
        {
            "checkpointed": True,
            "duplicate": done.duplicate,
            "reason": None,
            "checkpoint_id": body.checkpoint_id,
            **_claim_fields(claim, task_id, done.run_id),
            "start_sequence": done.start_sequence,
            "next_sequence": done.next_sequence,
            "history_refresh_page_token": FULL_HISTORY_TOKEN,
        }
    )


@router.post("/{task_id}/local-activities/prepare")
async def prepare(task_id: str, body: Prepare, state: State, caller: WorkerCaller) -> ResponseBody:
    """Start the next attempt of a local step: `ActivityStarted`, its deadlines and lease."""
    claim = _claim(state, caller, task_id, body)
    spec = body.descriptor.spec()
    found = await _call(
        state.store.prepare_local_attempt(
            claim=claim,
            sequence=body.sequence,
            worker_attempt_id=body.worker_attempt_id,
            spec=spec,
            group=body.descriptor.group(),
            cleanup=body.descriptor.cleanup(),
        )
    )
    return wrap({"prepared": True, "reason": None, **_attempt(found)})


@router.post("/{task_id}/local-activities/recover")
async def recover(task_id: str, body: Recover, state: State, caller: WorkerCaller) -> ResponseBody:
    """Close the attempt a lost claim left open; its callback's stop is unknown."""
    claim = _claim(state, caller, task_id, body)
    spec = body.descriptor.spec()
    closed = await _call(
        state.store.recover_local_attempt(claim=claim, sequence=body.sequence, spec=spec)
    )
    return wrap(
        {
            "recovered": True,
            "callback_stop_state": "unknown",
            **_closed(claim, closed),
        }
    )


@router.post("/{task_id}/local-activities/{operation}")
async def unknown_admission(task_id: str, operation: str) -> ResponseBody:
    """An operation the protocol does not define: 404."""
    raise _unknown(operation)


# -- one admitted attempt ---------------------------------------------------------------------


@router.post("/{task_id}/local-activities/{activity_attempt_id}/control")
async def control(
    task_id: str, activity_attempt_id: str, body: Control, state: State, caller: WorkerCaller
) -> ResponseBody:
    """May the attempt go on: renews the claim's lease while it may, else says why not."""
    claim = _claim(state, caller, task_id, body)
    found = await _call(
        state.store.control_local_attempt(claim=claim, activity_attempt_id=activity_attempt_id)
    )
    return wrap(_control(found, heartbeat=False))


@router.post("/{task_id}/local-activities/{activity_attempt_id}/heartbeat")
async def heartbeat(
    task_id: str, activity_attempt_id: str, body: Heartbeat, state: State, caller: WorkerCaller
) -> ResponseBody:
    """The callback's heartbeat: recorded while the attempt may go on."""
    claim = _claim(state, caller, task_id, body)
    details = body.progress.get("details")
    progress: Payload | None = None
    if details is not None:  # kept as JSON: the SDK sends its details as plain values
        progress = {"codec": "json", "blob": encode_blob(details, codec="json")}
    found = await _call(
        state.store.heartbeat_local_attempt(
            claim=claim, activity_attempt_id=activity_attempt_id, progress=progress
        )
    )
    return wrap(_control(found, heartbeat=True))


@router.post("/{task_id}/local-activities/{activity_attempt_id}/outcome")
async def outcome(
    task_id: str, activity_attempt_id: str, body: Outcome, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Close the attempt as reported: completed, failed, or retried (the claim released)."""
    claim = _claim(state, caller, task_id, body)
    report = _report(body)
    closed = await _call(
        state.store.report_local_outcome(
            claim=claim, activity_attempt_id=activity_attempt_id, report=report
        )
    )
    return wrap(
        {
            "recorded": True,
            "worker_attempt_id": closed.worker_attempt_id,
            "recorded_at": _stamp(closed.recorded_at),
            **_closed(claim, closed),
        }
    )


@router.post("/{task_id}/local-activities/{activity_attempt_id}/acknowledge-cancellation")
async def acknowledge_cancellation(
    task_id: str,
    activity_attempt_id: str,
    body: AcknowledgeCancellation,
    state: State,
    caller: WorkerCaller,
) -> ResponseBody:
    """Refused once the lease is checked: no prepared attempt is ever asked to stop."""
    claim = _claim(state, caller, task_id, body)
    await state.store.check_workflow_task_lease(lease=claim.lease)
    raise ApiError(
        409,
        "prepared_local_cancellation_not_requested",
        f"attempt {activity_attempt_id} was not asked to stop",
        activity_attempt_id=activity_attempt_id,
        request_id=body.request_id,
    )


@router.post("/{task_id}/local-activities/{activity_attempt_id}/{operation}")
async def unknown_attempt_call(
    task_id: str, activity_attempt_id: str, operation: str
) -> ResponseBody:
    """An operation the protocol does not define for an attempt: 404."""
    raise _unknown(operation)


def _unknown(operation: str) -> ApiError:
    return ApiError(
        404,
        "unknown_local_activity_operation",
        f"{operation!r} is not a prepared local activity operation",
        operation=operation,
    )


def _report(body: Outcome) -> outcomes.Report:
    report = body.report
    if report.outcome == "completed":
        if report.result is None:
            raise ApiError(422, "validation_failed", "a completed outcome carries its result")
        codec = report.payload_codec or report.result.codec
        return outcomes.Report(completed=True, result={"codec": codec, "blob": report.result.blob})
    failure = Failure(
        exception_type=report.exception_type,
        message=report.message,
        non_retryable=report.non_retryable,
    )
    return outcomes.Report(completed=False, failure=failure)


def _attempt(found: prepared.AttemptState) -> dict[str, object]:
    """The fields every receipt about one attempt carries: its claim, identity and deadlines."""
    return {
        "duplicate": found.duplicate,
        "workflow_task_id": found.task_id,
        "workflow_run_id": found.run_id,
        "workflow_task_attempt": found.workflow_task_attempt,
        "lease_owner": found.lease_owner,
        "worker_attempt_id": found.worker_attempt_id,
        "activity_execution_id": found.activity_execution_id,
        "activity_attempt_id": found.activity_attempt_id,
        "attempt_number": found.attempt_number,
        "server_time": _stamp(found.server_time),
        "lease_expires_at": _stamp(found.lease_expires_at),
        "workflow_lease_expires_at": _stamp(found.lease_expires_at),
        "start_to_close_deadline_at": _stamp(found.start_to_close_deadline_at),
        "schedule_to_close_deadline_at": _stamp(found.schedule_to_close_deadline_at),
        "heartbeat_deadline_at": _stamp(found.heartbeat_deadline_at),
        "cancellation_cleanup": None
        if found.cancellation_cleanup is None
        else found.cancellation_cleanup.to_json(),
    }


def _control(found: prepared.AttemptState, *, heartbeat: bool) -> dict[str, object]:
    active = found.stop_reason is None
    return {
        **_attempt(found),
        "active": active,
        "renewed": active and not heartbeat,
        "stop_required": not active,
        "reason": found.stop_reason,
        "heartbeat_recorded": heartbeat and active,
        "heartbeat_history_event_id": found.heartbeat_event_id if heartbeat else None,
    }


def _closed(claim: prepared.Claim, closed: outcomes.Closed) -> dict[str, object]:
    retried = closed.event_type == "ActivityRetryScheduled"
    return {
        "duplicate": closed.duplicate,
        "reason": None,
        **_claim_fields(claim, closed.task_id, closed.run_id),
        "activity_execution_id": closed.activity_execution_id,
        "activity_attempt_id": closed.activity_attempt_id,
        "event_type": closed.event_type,
        "event_id": closed.event_id,
        "claim_released": retried,
        "created_task_ids": closed.created_task_ids,
        "history_refresh_page_token": FULL_HISTORY_TOKEN,
    }
