"""Worker plane, query tasks (PROTOCOL.md 6.3; SPEC M4b).

A query submitted on the control plane is a query task on the run's queue, in the same table
Burrow's own workers answer from; an SDK worker long-polls it here, replays the history it
carries and answers with an envelope; it may observe its claim (`status`) meanwhile. Queries
never append history.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

import structlog
from fastapi import APIRouter, Query, Request

from burrow.server import longpoll, parallel_groups
from burrow.server.deps import ServerState, State, WorkerCaller
from burrow.server.history_pages import whole_history_task, worker_event
from burrow.server.lease_models import QueryTaskObserved
from burrow.server.polls import Answer, Leased
from burrow.server.routing import ResponseBody, answered_run, registered_worker, wrap
from burrow.server.worker_models import (
    CompleteQueryTask,
    FailQueryTask,
    PollTasks,
    QueryTaskAnswered,
    QueryTaskFence,
    QueryTaskPayload,
    QueryTaskStatusQuery,
    failure_record,
)
from burrow.store import claims
from burrow.store.models import ClaimedQueryTask, ClaimFence

router = APIRouter(prefix="/api/worker/query-tasks")
log = structlog.get_logger("burrow.server")
# A query's answer is awaited by a caller; an answer later than this is worth nothing.
QUERY_TASK_LEASE_SECONDS = 30.0


def task_payload(claimed: ClaimedQueryTask) -> QueryTaskPayload:
    """The poll response's task: the whole history (queries are rare and read-only)."""
    return QueryTaskPayload(
        query_task_id=claimed.lease.task_id,
        query_task_attempt=claimed.lease.attempt,
        query_name=claimed.query_name,
        query_arguments=claimed.arguments,
        **whole_history_task(claimed),
        query_admitted_at=claimed.admitted_at,
        query_deadline_at=claimed.deadline_at,
        server_time=datetime.now(UTC),
    )


# What a remembered answer leaves out, read again from the store for a resent poll.
TASK_PAYLOADS = frozenset({"workflow_arguments", "query_arguments", "history_events"})


async def reread_payloads(state: ServerState, leased: Leased) -> Answer | None:
    """A resent poll's answer: the remembered one with its payloads read again from the store."""
    arguments = await state.store.task_arguments(kind="query", task_id=leased.task_id)
    run = await answered_run(state, leased.answer)
    if arguments is None or run is None:
        return None
    events = await state.store.read_history(run_id=run.run_id)
    groups = parallel_groups.groups_of(events)
    return {
        **leased.answer,
        "server_time": _now(),
        "workflow_arguments": run.input,
        "query_arguments": arguments,
        "history_events": [
            worker_event(e, run.namespace, groups)
            for e in events
            if e.sequence <= leased.history_through
        ],
    }


@router.post("/poll")
async def poll(
    body: PollTasks, request: Request, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Long-poll for a query task of the workflow types the worker registered."""
    deadline = longpoll.deadline_of(request, body.timeout_seconds)
    reg = await registered_worker(state, caller.namespace, body)
    if not reg.workflow_types:
        return wrap({"task": None, "poll_status": "no_workflow_capability"})
    key = ("query", caller.namespace, body.task_queue, body.worker_id, body.poll_request_id or "")
    if body.poll_request_id:
        again = await state.polls.redelivered(
            key,
            lambda task_id: state.store.query_task_lease(task_id=task_id),
            lambda lease: lease.attempt,
            lambda leased: reread_payloads(state, leased),
        )
        if again is not None:
            return wrap({"task": again, "poll_status": "leased"})
    flt = claims.QueueFilter(
        namespace=caller.namespace,
        queue=body.task_queue,
        types=reg.workflow_types,
        connection=reg.connection,
        build_id=reg.build_id,
    )
    lease = timedelta(seconds=QUERY_TASK_LEASE_SECONDS)

    async def claim() -> ClaimedQueryTask | None:
        return await state.store.claim_query_task(flt=flt, worker_id=body.worker_id, lease=lease)

    claimed = await longpoll.hold(
        state,
        request,
        kind="query",
        namespace=caller.namespace,
        task_queue=body.task_queue,
        deadline=deadline,
        claim=claim,
        connection=reg.connection,
    )
    if claimed is None:
        return wrap({"task": None, "poll_status": "empty"})
    log.info(
        "query task leased",
        namespace=caller.namespace,
        queue=body.task_queue,
        run_id=claimed.run.run_id,
        task_id=claimed.lease.task_id,
        worker_id=body.worker_id,
        query_name=claimed.query_name,
    )
    task = task_payload(claimed).model_dump(mode="json")
    if body.poll_request_id:
        state.polls.remember(
            key,
            task_id=claimed.lease.task_id,
            attempt=claimed.lease.attempt,
            answer=task,
            payloads=TASK_PAYLOADS,
            history_through=claimed.history[-1].sequence if claimed.history else 0,
        )
    return wrap({"task": task, "poll_status": "leased"})


@router.post("/{task_id}/complete")
async def complete(
    task_id: str, body: CompleteQueryTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Store the query's answer (its envelope) for the caller waiting on it."""
    state.store.check_payload(body.result_envelope.model_dump(), "query result")
    await state.store.answer_query_task(
        lease=_fence(caller.namespace, task_id, body),
        result=body.result_envelope.model_dump(),
        failure=None,
    )
    return wrap(
        QueryTaskAnswered(
            query_task_id=task_id, query_task_attempt=body.query_task_attempt, outcome="completed"
        ).model_dump(mode="json")
    )


@router.post("/{task_id}/fail")
async def fail(
    task_id: str, body: FailQueryTask, state: State, caller: WorkerCaller
) -> ResponseBody:
    """Store the query's failure: the handler raised, or the query is unknown."""
    failure = body.failure
    await state.store.answer_query_task(
        lease=_fence(caller.namespace, task_id, body),
        result=None,
        failure=failure_record(
            message=failure.message or "query failed",
            exception_type=failure.type,
            reason=failure.reason or "query_rejected",
            stack=failure.stack_trace,
        ),
    )
    return wrap(
        QueryTaskAnswered(
            query_task_id=task_id, query_task_attempt=body.query_task_attempt, outcome="failed"
        ).model_dump(mode="json")
    )


def _now() -> str:
    """The server's time as the SDK reads it (UTC, six fractional digits)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@router.get("/{task_id}/status")
async def status(
    task_id: str,
    query: Annotated[QueryTaskStatusQuery, Query()],
    state: State,
    caller: WorkerCaller,
) -> ResponseBody:
    """Observe a live query claim without renewing it (protocol 1.20 query authority).

    Refused as an answer would be (404 unknown task; 409 expired, other owner or attempt,
    answered): the holder then knows its work is worth nothing.
    """
    held = await state.store.observe_query_task(lease=_fence(caller.namespace, task_id, query))
    return wrap(
        QueryTaskObserved(
            query_task_id=held.query_task_id,
            query_task_attempt=held.attempt,
            lease_owner=held.lease_owner,
            lease_expires_at=held.lease_expires_at,
            query_admitted_at=held.admitted_at,
            query_deadline_at=held.deadline_at,
            server_time=held.server_time,
        ).model_dump(mode="json")
    )


def _fence(namespace: str, task_id: str, body: QueryTaskFence | QueryTaskStatusQuery) -> ClaimFence:
    """The query task's lease the call names (6.3): refused by the store unless current."""
    return ClaimFence(
        task_id=task_id,
        namespace=namespace,
        lease_owner=body.lease_owner,
        attempt=body.query_task_attempt,
    )
