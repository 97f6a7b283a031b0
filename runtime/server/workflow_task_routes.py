"""Worker plane, workflow tasks (PROTOCOL.md 5; SPEC M4b).

Poll, history, complete, fail, heartbeat. Every call but the poll is fenced by (task id,
lease owner, attempt) (5.6).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta

import structlog
from fastapi import APIRouter, Request

from burrow.errors import WorkflowNotFoundError
from burrow.protocol.shapes import JsonDict
from burrow.server import (
    condition_waits,
    longpoll,
    parallel_groups,
    selections,
    update_validation_routes,
    wire_commands,
)
from burrow.server.api_errors import ApiError
from burrow.server.cancellation_routes import observation
from burrow.server.definitions import definition_changed
from burrow.server.deps import ServerState, State, WorkerCaller
from burrow.server.history_pages import decode_token, page, worker_event
from burrow.server.polls import Answer, Leased
from burrow.server.routing import (
    ResponseBody,
    answered_run,
    refuse_if_draining,
    registered_worker,
    wrap,
)
from burrow.server.update_tasks import is_update_batch, pending_update
from burrow.server.worker_models import (
    CompleteWorkflowTask,
    FailWorkflowTask,
    HistoryPage,
    HistoryPageRequest,
    PollTasks,
    StickyCacheClaim,
    WorkflowTaskCompleted,
    WorkflowTaskFailed,
    WorkflowTaskFence,
    WorkflowTaskHeartbeatAck,
    WorkflowTaskPayload,
    failure_record,
)
from burrow.store import claims, message_streams
from burrow.store.completion.effects import CompletionOutcome
from burrow.store.errors import InvariantBroken
from burrow.store.history import NewEvent
from burrow.store.models import (
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    ClaimFence,
    FencedTask,
    ReplayMode,
    RunInfo,
)

router = APIRouter(prefix="/api/worker/workflow-tasks")
log = structlog.get_logger("burrow.server")

WAITING_FOR_HISTORY = "WorkflowTaskWaitingForHistory"


def task_payload(
    claimed: ClaimedWorkflowTask, page_size: int, *, definition_changed: bool = False
) -> WorkflowTaskPayload:
    """The poll response's task: the claim plus its first history page.

    `definition_changed` (S8): the worker must replay cold, whatever the binding says.
    """
    run, sticky = claimed.run, claimed.sticky
    if definition_changed:
        sticky = replace(sticky, replay_mode=ReplayMode.FORCED_COLD_REPLAY)
    events, token = page(claimed.history, page_size)
    total = claimed.history[-1].sequence if claimed.history else 0
    groups = parallel_groups.groups_of(claimed.history)
    return WorkflowTaskPayload(
        task_id=claimed.lease.task_id,
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        namespace=run.namespace,
        workflow_task_attempt=claimed.lease.attempt,
        workflow_type=run.workflow_type,
        workflow_class=run.workflow_type,
        payload_codec=str(run.input.get("codec", "avro")),
        arguments=run.input.get("blob"),
        run_status=run.status.value,
        last_history_sequence=total,
        total_history_events=total,
        history_events=[worker_event(e, run.namespace, groups) for e in events],
        next_history_page_token=token,
        task_queue=run.task_queue,
        connection=run.connection,
        compatibility=run.build_id,
        lease_owner=claimed.lease.lease_owner,
        lease_expires_at=claimed.lease.lease_expires_at,
        sticky_worker_id=sticky.worker_id,
        sticky_until=sticky.until,
        sticky_replay_mode=sticky.replay_mode.value,
        sticky_execution={
            "sticky_worker_id": sticky.worker_id,
            "sticky_until": None if sticky.until is None else sticky.until.isoformat(),
            "replay_mode": sticky.replay_mode.value,
            # S10: a warm entry may be used only when the owner claimed it while bound.
            "cache_directive": "resume_if_present"
            if sticky.replay_mode == ReplayMode.STICKY_HIT_EXPECTED
            else "cold_replay",
        },
        cancel_requested=run.cancel_requested,
        workflow_update_id=pending_update(claimed.history),
        workflow_definition_changed=definition_changed,
        cancellation_request=observation(claimed.history),
    )


# What a remembered answer leaves out, read again from the store for a resent poll.
TASK_PAYLOADS = frozenset({"arguments", "history_events", "next_history_page_token"})


async def reread_payloads(state: ServerState, leased: Leased, page_size: int) -> Answer | None:
    """A resent poll's answer: the remembered one with its payloads read again from the store.

    The history is cut where the first answer's ended, so both answers carry the same pages.
    """
    answer = leased.answer
    run = await answered_run(state, answer)
    if run is None:
        return None
    events = await state.store.read_history(run_id=run.run_id)
    shown, token = page([e for e in events if e.sequence <= leased.history_through], page_size)
    groups = parallel_groups.groups_of(events)
    return {
        **answer,
        "arguments": run.input.get("blob"),
        "history_events": [worker_event(e, run.namespace, groups) for e in shown],
        "next_history_page_token": token,
    }


@router.post("/poll")
async def poll(
    body: PollTasks, request: Request, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Long-poll for a workflow task (5.1); idempotent by `poll_request_id`."""
    deadline = longpoll.deadline_of(request, body.timeout_seconds)
    reg = await registered_worker(state, caller.namespace, body)
    if not reg.workflow_types:
        return wrap({"task": None, "poll_status": "no_workflow_capability"})
    key = (
        "workflow",
        caller.namespace,
        body.task_queue,
        body.worker_id,
        body.poll_request_id or "",
    )
    if body.poll_request_id:
        again = await state.polls.redelivered(
            key,
            lambda task_id: state.store.workflow_task_lease(task_id=task_id),
            lambda lease: lease.attempt,
            lambda leased: reread_payloads(state, leased, body.history_page_size),
        )
        if again is not None:
            return wrap({"task": again, "poll_status": "leased"})
    refuse_if_draining(reg, kind="workflow")
    flt = claims.QueueFilter(
        namespace=caller.namespace,
        queue=body.task_queue,
        types=reg.workflow_types,
        connection=reg.connection,
        build_id=reg.build_id,
    )
    lease = timedelta(seconds=state.settings.workflow_task_lease_seconds)
    # S5: bound tasks go to their owner first; nothing is held warm here, so every claim
    # carries the history from sequence 1 (the SDK checks its cache against it, PROTOCOL 11).
    sticky = claims.StickyClaim(
        enabled=state.runtime.sticky.enabled,
        owner_stale=timedelta(seconds=state.runtime.sticky.owner_stale_seconds),
    )

    # 6.5: the multiplexed poll answers with an update validation task first (a caller waits).
    kinds = body.task_kinds or ["workflow"]

    async def claim() -> ClaimedWorkflowTask | ClaimedQueryTask | None:
        if "update_validation" in kinds:
            found = await update_validation_routes.claim(state, reg, body.worker_id)
            if found is not None or "workflow" not in kinds:
                return found
        return await state.store.claim_workflow_task(
            flt=flt, worker_id=body.worker_id, lease=lease, sticky=sticky
        )

    claimed: ClaimedWorkflowTask | ClaimedQueryTask | None = await longpoll.hold(
        state,
        request,
        kind="workflow",
        namespace=caller.namespace,
        task_queue=body.task_queue,
        deadline=deadline,
        claim=claim,
        connection=reg.connection,
    )
    if claimed is None:
        return wrap({"task": None, "poll_status": "empty"})
    if isinstance(claimed, ClaimedQueryTask):
        return wrap(
            {"task": update_validation_routes.task_payload(claimed), "poll_status": "leased"}
        )
    claimed = await _resolve_selections(state, claimed)
    if claimed.history_after == 0:  # the whole history: the run's open waits are all in it
        state.waits.remember(claimed.lease.task_id, claimed.lease.attempt, claimed.history)
    changed = definition_changed(reg, claimed.run)
    payload = task_payload(claimed, body.history_page_size, definition_changed=changed)
    task = payload.model_dump(mode="json")
    if body.poll_request_id:
        state.polls.remember(
            key,
            task_id=claimed.lease.task_id,
            attempt=claimed.lease.attempt,
            answer=task,
            payloads=TASK_PAYLOADS,
            history_through=task["last_history_sequence"],
        )
    log.info(
        "workflow task leased",
        namespace=caller.namespace,
        queue=body.task_queue,
        run_id=claimed.run.run_id,
        task_id=claimed.lease.task_id,
        worker_id=body.worker_id,
    )
    return wrap({"task": task, "poll_status": "leased"})


def _fence(namespace: str, task_id: str, body: WorkflowTaskFence) -> ClaimFence:
    """The lease the call names (5.6): refused by the store's fence unless it is current."""
    return ClaimFence(
        task_id=task_id,
        namespace=namespace,
        lease_owner=body.lease_owner,
        attempt=body.workflow_task_attempt,
    )


@router.post("/{task_id}/history")
async def history(
    task_id: str, body: HistoryPageRequest, state: State, caller: WorkerCaller
) -> ResponseBody:
    """A page of the leased task's history, from the token's sequence on (5.2)."""
    fence = _fence(caller.namespace, task_id, body)
    try:
        after = decode_token(body.next_history_page_token)
    except ApiError:
        await state.store.check_workflow_task_lease(lease=fence)  # a lease refusal comes first
        raise
    task, events = await state.store.read_leased_history(lease=fence, after_seq=after)
    shown, token = page(events, body.history_page_size)
    # A group's steps were opened before this page, maybe: found in the whole history.
    whole = events if after == 0 else await state.store.read_history(run_id=task.run_id)
    groups = parallel_groups.groups_of(whole)
    total = events[-1].sequence if events else after
    return wrap(
        HistoryPage(
            task_id=task_id,
            workflow_task_attempt=body.workflow_task_attempt,
            history_events=[worker_event(e, caller.namespace, groups) for e in shown],
            total_history_events=total,
            next_history_page_token=token,
        ).model_dump(mode="json")
    )


async def sticky_binding(
    state: ServerState, fence: ClaimFence, claim: StickyCacheClaim
) -> tuple[ClaimFence, timedelta | None]:
    """The completion's fence and how long the run stays bound to its worker (S4).

    No binding with sticky off. 409 unless the claim names this lease's worker, run and build
    (PROTOCOL.md 11): the fence then names the claim's run, which the store checks is the
    task's. A refused claim is reported after the lease is checked, as the protocol orders them.
    """
    if not state.runtime.sticky.enabled:
        return fence, None
    ttl = timedelta(seconds=min(claim.ttl_seconds, state.runtime.sticky.ttl_seconds))
    reg = await state.store.worker_registration(worker_id=fence.lease_owner)
    capable = reg is not None and reg.sticky_cache_enabled
    right_build = reg is None or reg.build_id is None or claim.build_id == reg.build_id
    named = capable and right_build and claim.worker_id == fence.lease_owner
    if named and await _run_of(state, fence.namespace, claim.workflow_id, claim.run_id):
        return replace(fence, run_id=claim.run_id), ttl
    task = await state.store.check_workflow_task_lease(lease=fence)
    if not capable:
        raise ApiError(
            409,
            "worker_capability_not_supported",
            f"worker {fence.lease_owner} did not register a sticky cache",
            capability="sticky_execution",
        )
    run = await _run_of(state, fence.namespace, claim.workflow_id, task.run_id)
    if claim.worker_id != fence.lease_owner or run is None or not right_build:
        raise ApiError(
            409,
            "sticky_cache_identity_mismatch",
            "sticky_cache must name the lease owner, this task's workflow and run, and the"
            " worker's build",
            worker_id=claim.worker_id,
            workflow_id=claim.workflow_id,
            run_id=claim.run_id,
        )
    if claim.run_id != task.run_id:
        raise ApiError(
            409,
            "sticky_cache_identity_mismatch",
            f"sticky_cache names run {claim.run_id}, the task is of run {task.run_id}",
            run_id=claim.run_id,
        )
    return replace(fence, run_id=claim.run_id), ttl


async def _run_of(
    state: ServerState, namespace: str, workflow_id: str, run_id: str
) -> RunInfo | None:
    try:
        return await state.store.get_run(
            namespace=namespace, workflow_id=workflow_id, run_id=run_id
        )
    except WorkflowNotFoundError:
        return None


def _completed(outcome: CompletionOutcome) -> FencedTask:
    if outcome.task is None:  # the transactional completion, which server calls take, names it
        raise InvariantBroken("a fenced workflow task completion did not name its task")
    return outcome.task


async def _resolve_selections(
    state: ServerState, claimed: ClaimedWorkflowTask
) -> ClaimedWorkflowTask:
    """The claim with SelectionResolved appended for each select its history decided."""
    found = selections.resolutions(claimed.history)
    if not found:
        return claimed
    new = [NewEvent(r, f"selection:{r.selection_group_id}:resolved") for r in found]
    appended = await state.store.append_for_leased_task(lease=claimed.lease, events=new)
    return replace(claimed, history=[*claimed.history, *appended])


async def _with_condition_waits(
    state: ServerState, task_id: str, attempt: int, commands: list[JsonDict], update_task: bool
) -> list[JsonDict]:
    """The batch with what it decided about the run's open condition waits (condition_waits)."""
    if update_task or not _is_uuid(task_id):  # an unknown task id is refused by the completion
        return commands
    known = state.waits.get(task_id, attempt)
    if known is None:  # claimed by another process (or long ago): read the run's waits
        found = await state.store.read_task_run_events(
            task_id=task_id, event_types=condition_waits.EVENT_TYPES
        )
        known = tuple(condition_waits.open_waits(found))
    return condition_waits.derive(commands, known)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


@router.post("/{task_id}/complete")
async def complete(
    task_id: str, body: CompleteWorkflowTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Apply the task's commands once (5.3); a resend after commit gets 409, no new history."""
    fence, sticky_ttl = _fence(caller.namespace, task_id, body), None
    if body.sticky_cache is not None:
        fence, sticky_ttl = await sticky_binding(state, fence, body.sticky_cache)
    condition_waits.validate(body.commands)
    commands = body.commands
    if parallel_groups.has_group(commands) or any(
        command.get("type") == selections.CANCEL for command in commands
    ):
        _, history = await state.store.read_leased_history(lease=fence)
        if selections.is_select(commands):
            commands = selections.check(commands, parallel_groups.next_step(history))
        elif parallel_groups.has_group(commands):
            commands = parallel_groups.check(commands, history)  # less a group sent again
        commands = selections.cancels(commands, history)
    update_task = is_update_batch(body.commands)
    attempt = body.workflow_task_attempt
    commands = await _with_condition_waits(state, task_id, attempt, commands, update_task)
    outcome = await state.store.complete_workflow_task(
        lease=fence,
        commands=wire_commands.normalize(commands),
        sticky_ttl=sticky_ttl,
        update_task=update_task,
        stream_cursors=[
            message_streams.StreamCursor(cursor.stream_name, cursor.through_position)
            for cursor in body.message_stream_cursors
        ],
    )
    task = _completed(outcome)
    state.waits.forget(task_id, body.workflow_task_attempt)
    if body.sticky_cache is not None:  # S10: its counters, stored as a heartbeat's figures are
        await state.store.report_sticky_cache(
            worker_id=body.lease_owner, figures=body.sticky_cache.metrics.figures()
        )
    status = outcome.closed_status.value if outcome.closed_status is not None else "waiting"
    log.info(
        "workflow task completed",
        namespace=caller.namespace,
        queue=task.queue,
        run_id=task.run_id,
        task_id=task_id,
        worker_id=body.lease_owner,
        commands=len(body.commands),
    )
    return wrap(
        WorkflowTaskCompleted(
            task_id=task_id,
            workflow_task_attempt=body.workflow_task_attempt,
            run_id=task.run_id,
            run_status=status,
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/fail")
async def fail(
    task_id: str, body: FailWorkflowTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record a task failure for a retry, or acknowledge "waiting for history" (5.5)."""
    fence = _fence(caller.namespace, task_id, body)
    failure = body.failure
    waiting = failure.type == WAITING_FOR_HISTORY or (
        "workflow task waiting for scheduled history" in failure.message.lower()
    )
    if waiting:
        # Nothing new to schedule: the task is done and the run waits for its next event.
        task = _completed(await state.store.complete_workflow_task(lease=fence, commands=[]))
    else:
        task = await state.store.fail_workflow_task(
            lease=fence,
            failure=failure_record(
                exception_type=failure.type,
                message=failure.message,
                reason=failure.reason,
                stack=failure.stack_trace,
            ),
        )
    log.info(
        "workflow task failed" if not waiting else "workflow task waiting for history",
        namespace=caller.namespace,
        queue=task.queue,
        run_id=task.run_id,
        task_id=task_id,
        worker_id=body.lease_owner,
    )
    return wrap(
        WorkflowTaskFailed(
            task_id=task_id, outcome="waiting_for_history" if waiting else "failed"
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/heartbeat")
async def heartbeat(
    task_id: str, body: WorkflowTaskFence, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Renew the lease while a local activity runs (5.4)."""
    renewed = await state.store.heartbeat_workflow_task(
        lease=_fence(caller.namespace, task_id, body),
        lease_duration=timedelta(seconds=state.settings.workflow_task_lease_seconds),
    )
    return wrap(
        WorkflowTaskHeartbeatAck(
            task_id=task_id,
            workflow_task_attempt=body.workflow_task_attempt,
            lease_owner=body.lease_owner,
            lease_expires_at=renewed.lease_expires_at,
            cancel_requested=renewed.cancel_requested,
        ).model_dump(mode="json")
    )
