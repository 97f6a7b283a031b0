"""Worker plane, activity tasks (PROTOCOL.md 6.1-6.2; SPEC M4b).

Poll, complete, fail, heartbeat, renew-lease. Calls are fenced by (task id, activity attempt
id, lease owner) (18.3).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog
from fastapi import APIRouter, Request
from pydantic import BaseModel

from burrow.protocol.shapes import JsonObject
from burrow.server import longpoll
from burrow.server.deps import ServerState, State, WorkerCaller
from burrow.server.lease_models import ActivityLeaseRenewed, WireTime
from burrow.server.polls import Answer, Leased
from burrow.server.routing import (
    ResponseBody,
    owner_stale,
    refuse_if_draining,
    registered_worker,
    wrap,
)
from burrow.server.worker_models import (
    ActivityHeartbeatAck,
    ActivityTaskOutcome,
    ActivityTaskPayload,
    CompleteActivityTask,
    FailActivityTask,
    HeartbeatActivityTask,
    PollTasks,
    RenewActivityTaskLease,
    failure_record,
)
from burrow.store import claims
from burrow.store.models import ClaimedActivityTask, ClaimFence, SessionRefusal
from burrow.store.server_queries import WorkerRegistration

router = APIRouter(prefix="/api/worker/activity-tasks")
log = structlog.get_logger("burrow.server")


def task_payload(task: ClaimedActivityTask) -> ActivityTaskPayload:
    """The poll response's task."""
    return ActivityTaskPayload(
        task_id=task.lease.task_id,
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        namespace=task.namespace,
        activity_execution_id=task.activity_execution_id,
        activity_attempt_id=task.activity_attempt_id,
        idempotency_key=task.activity_execution_id,
        attempt_number=task.attempt_number,
        activity_type=task.activity_type,
        payload_codec=str(task.arguments.get("codec", "avro")),
        arguments=task.arguments,
        task_queue=task.queue,
        lease_owner=task.lease.lease_owner,
        lease_expires_at=task.lease.lease_expires_at,
        worker_session=None if task.worker_session is None else task.worker_session.to_json(),
        connection=task.connection,
    )


# What a remembered answer leaves out, read again from the store for a resent poll.
TASK_PAYLOADS = frozenset({"arguments"})


async def reread_arguments(state: ServerState, leased: Leased) -> Answer | None:
    """A resent poll's answer: the remembered one with its arguments read again."""
    arguments = await state.store.task_arguments(kind="activity", task_id=leased.task_id)
    return None if arguments is None else {**leased.answer, "arguments": arguments}


EXPLAINED_REFUSALS = 5
# Races with another claim, not reasons this worker is refused.
_NOT_EXPLAINED = frozenset({None, SessionRefusal.TASK_NOT_READY, SessionRefusal.NOT_A_SESSION_TASK})


async def session_refusals(
    state: ServerState, reg: WorkerRegistration, worker_id: str
) -> list[JsonObject]:
    """Why ready session attempts on the queue were not given to this worker (W3, W6).

    An empty poll says so when session work waits that the worker may not take: each refusal
    names its task, session and typed reason (and the missing requirements). Explaining takes
    nothing: the admission runs in a transaction that is rolled back.
    """
    waiting = await state.store.ready_session_tasks(
        namespace=reg.namespace,
        connection=reg.connection,
        queue=reg.task_queue,
        types=reg.activity_types,
        limit=EXPLAINED_REFUSALS,
    )
    refusals = []
    for task_id, session_id in waiting:
        decision = await state.store.explain_session_admission(
            task_id=task_id, worker_id=worker_id, owner_stale=owner_stale(state)
        )
        reason = decision.reason
        if decision.admitted or reason is None or reason in _NOT_EXPLAINED:
            continue
        refusal: JsonObject = {"task_id": task_id, "session_id": session_id, "reason": reason.value}
        if decision.missing_requirements:
            refusal["missing_requirements"] = list(decision.missing_requirements)
        refusals.append(refusal)
    return refusals


@router.post("/poll")
async def poll(
    body: PollTasks, request: Request, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Long-poll for an activity attempt (6.1); idempotent by `poll_request_id`."""
    deadline = longpoll.deadline_of(request, body.timeout_seconds)
    reg = await registered_worker(state, caller.namespace, body)
    if not reg.activity_types:
        return wrap({"task": None, "poll_status": "no_activity_capability"})
    key = (
        "activity",
        caller.namespace,
        body.task_queue,
        body.worker_id,
        body.poll_request_id or "",
    )
    if body.poll_request_id:
        again = await state.polls.redelivered(
            key,
            lambda task_id: state.store.activity_task_lease(task_id=task_id),
            lambda lease: lease.activity_attempt_id,
            lambda leased: reread_arguments(state, leased),
        )
        if again is not None:
            return wrap({"task": again, "poll_status": "leased", **_server_time()})
    refuse_if_draining(reg, kind="activity")
    flt = claims.QueueFilter(
        namespace=caller.namespace,
        queue=body.task_queue,
        types=reg.activity_types,
        connection=reg.connection,
        build_id=reg.build_id,
    )
    lease = timedelta(seconds=state.settings.activity_task_lease_seconds)
    stale = owner_stale(state)

    async def claim() -> ClaimedActivityTask | None:
        # A session attempt is leased only once this worker is admitted to its session (W3,
        # W6); a refused one stays ready for a capable worker.
        leased = await state.store.claim_activity_tasks(
            flt=flt, worker_id=body.worker_id, lease=lease, limit=1, owner_stale=stale
        )
        return leased[0] if leased else None

    claimed = await longpoll.hold(
        state,
        request,
        kind="activity",
        namespace=caller.namespace,
        task_queue=body.task_queue,
        deadline=deadline,
        claim=claim,
        connection=reg.connection,
    )
    if claimed is None:
        # Only with a claim slot free now: explaining must not hold the answer past its due.
        refusals = await longpoll.in_time(
            state, deadline, lambda: session_refusals(state, reg, body.worker_id)
        )
        empty: ResponseBody = {"task": None, "poll_status": "empty"}
        if refusals:
            empty["session_refusals"] = refusals
        return wrap(empty)
    task = task_payload(claimed).model_dump(mode="json")
    if body.poll_request_id:
        state.polls.remember(
            key,
            task_id=claimed.lease.task_id,
            attempt=claimed.activity_attempt_id,
            answer=task,
            payloads=TASK_PAYLOADS,
        )
    log.info(
        "activity task leased",
        namespace=caller.namespace,
        queue=body.task_queue,
        run_id=claimed.run_id,
        task_id=claimed.lease.task_id,
        worker_id=body.worker_id,
        session_id=None if claimed.worker_session is None else claimed.worker_session.session_id,
    )
    return wrap({"task": task, "poll_status": "leased", **_server_time()})


class _ServerTime(BaseModel):
    server_time: WireTime


def _server_time() -> JsonObject:
    """`server_time`: what the SDK measures a leased task's `lease_expires_at` from."""
    return _ServerTime(server_time=datetime.now(UTC)).model_dump(mode="json")


def _fence(namespace: str, task_id: str, lease_owner: str, activity_attempt_id: str) -> ClaimFence:
    """The attempt the call names (18.3): refused by the store's fence unless it is current."""
    return ClaimFence(
        task_id=task_id,
        namespace=namespace,
        lease_owner=lease_owner,
        activity_attempt_id=activity_attempt_id,
    )


@router.post("/{task_id}/complete")
async def complete(
    task_id: str, body: CompleteActivityTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record the attempt's result once; a resend after commit gets 409 (18.4)."""
    result = body.result.model_dump() if body.result is not None else {"codec": "avro", "blob": ""}
    done = await state.store.complete_activity_task(
        lease=_fence(caller.namespace, task_id, body.lease_owner, body.activity_attempt_id),
        result=result,
    )
    log.info(
        "activity task completed",
        namespace=caller.namespace,
        queue=done.task.queue,
        run_id=done.task.run_id,
        task_id=task_id,
        worker_id=body.lease_owner,
    )
    return wrap(
        ActivityTaskOutcome(
            task_id=task_id, activity_attempt_id=body.activity_attempt_id, outcome="completed"
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/fail")
async def fail(
    task_id: str, body: FailActivityTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record a failed attempt: the retry policy decides on another one (6.2)."""
    failure = body.failure
    failed = await state.store.fail_activity_task(
        lease=_fence(caller.namespace, task_id, body.lease_owner, body.activity_attempt_id),
        failure=failure_record(
            exception_type=failure.type,
            message=failure.message,
            non_retryable=failure.non_retryable,
            stack=failure.stack_trace,
            details=failure.details.model_dump() if failure.details is not None else None,
        ),
    )
    log.info(
        "activity task failed",
        namespace=caller.namespace,
        queue=failed.task.queue,
        run_id=failed.task.run_id,
        task_id=task_id,
        worker_id=body.lease_owner,
        retried=failed.retried,
    )
    return wrap(
        ActivityTaskOutcome(
            task_id=task_id,
            activity_attempt_id=body.activity_attempt_id,
            outcome="retry_scheduled" if failed.retried else "failed",
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/heartbeat")
async def heartbeat(
    task_id: str, body: HeartbeatActivityTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Record progress and renew the lease; answers whether cancellation was requested.

    A session attempt's heartbeat renews its session too (W1); when another worker holds the
    session now, `can_continue` is false and the worker reports nothing more (W7). A session
    never hides a cancellation (W8).
    """
    renewed = await state.store.heartbeat_activity_task(
        lease=_fence(caller.namespace, task_id, body.lease_owner, body.activity_attempt_id),
        details=body.details,
        lease_duration=timedelta(seconds=state.settings.activity_task_lease_seconds),
    )
    return wrap(
        ActivityHeartbeatAck(
            task_id=task_id,
            activity_attempt_id=body.activity_attempt_id,
            lease_owner=body.lease_owner,
            cancel_requested=renewed.cancel_requested,
            can_continue=renewed.can_continue,
            lease_expires_at=renewed.lease_expires_at,
            last_heartbeat_at=renewed.last_heartbeat_at,
            reason=None if renewed.can_continue else renewed.reason,
            worker_session=None
            if renewed.worker_session is None
            else renewed.worker_session.to_json(),
            worker_session_renewal=None
            if renewed.reason is None
            else {"admitted": False, "outcome": None, "reason": renewed.reason},
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/renew-lease")
async def renew_lease(
    task_id: str, body: RenewActivityTaskLease, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Renew a live attempt's lease without recording progress (PROTOCOL.md 6.2).

    No heartbeat details, no heartbeat time, no history; business timeouts keep their bounds,
    and an expired, foreign or superseded claim is refused as a heartbeat would be (18.3).
    The answer repeats the original claim's identity for the SDK to check.
    """
    renewed = await state.store.renew_activity_lease(
        lease=_fence(caller.namespace, task_id, body.lease_owner, body.activity_attempt_id),
        lease_duration=timedelta(seconds=state.settings.activity_task_lease_seconds),
    )
    return wrap(
        ActivityLeaseRenewed(
            workflow_task_id=task_id,
            workflow_instance_id=renewed.workflow_id,
            workflow_run_id=renewed.run_id,
            activity_execution_id=renewed.activity_execution_id,
            activity_attempt_id=renewed.activity_attempt_id,
            attempt_number=renewed.attempt_number,
            lease_owner=renewed.lease_owner,
            can_continue=True,
            cancel_requested=renewed.cancel_requested,
            server_time=renewed.server_time,
            lease_expires_at=renewed.lease_expires_at,
            last_heartbeat_at=renewed.last_heartbeat_at,
            heartbeat_deadline_at=renewed.heartbeat_deadline_at,
        ).model_dump(mode="json")
    )
