"""Control plane as the SDK Client uses it (PROTOCOL.md 17).

Start, describe, list, history, signal, cancel, terminate. Every route runs on the `Store` facade.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Literal

import structlog
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from burrow import codec, page_tokens
from burrow.errors import (
    InvalidSearchAttribute,
    PayloadError,
    WorkflowAlreadyStartedError,
    WorkflowNotFoundError,
)
from burrow.protocol.list_query import MAX_QUERY_CHARS
from burrow.server import list_pages, parallel_groups, read_replica
from burrow.server.api_errors import ApiError
from burrow.server.control_models import (
    CommandReceipt,
    HistoryResponse,
    Reason,
    SignalWorkflow,
    Started,
    StartWorkflow,
    WorkflowDescription,
    WorkflowList,
    WorkflowRunList,
    WorkflowRunSummary,
)
from burrow.server.deps import OperatorCaller, ServerState, State
from burrow.server.history_pages import client_event, decode_token, page
from burrow.server.routing import ResponseBody, find, run_id_of
from burrow.store.models import IdReusePolicy, RunInfo, RunStatus
from burrow.store.workflow_views import ListedRun, OpenState, RunFilter, RunPlace

router = APIRouter(prefix="/api/workflows")
log = structlog.get_logger("burrow.server")
HISTORY_PAGE_DEFAULT = 100
HISTORY_PAGE_MAX = 1000
TERMINAL = frozenset(RunStatus) - {RunStatus.RUNNING}


def status_of(run: RunInfo, open_state: OpenState | None = None) -> str:
    """The run's status as the Durable Workflow server names it.

    An open run is `pending`, `running` or `waiting` (OpenState, when read; `running` when
    not); a timed-out run reads as failed: its history says WorkflowTimedOut and
    `closed_reason` why (the server's way).
    """
    if run.status == RunStatus.RUNNING and open_state is not None:
        return open_state.value
    return RunStatus.FAILED.value if run.status == RunStatus.TIMED_OUT else run.status.value


def bucket_of(run: RunInfo) -> Literal["running", "completed", "failed"]:
    """The Durable Workflow server's status bucket: open, completed, or closed otherwise."""
    if run.status == RunStatus.RUNNING:
        return "running"
    if run.status in (RunStatus.COMPLETED, RunStatus.CONTINUED_AS_NEW):
        return "completed"
    return "failed"


def decoded(envelope: Mapping[str, object] | None) -> object:
    """The value of a `{codec, blob}` envelope, or None.

    None when there is no envelope or it cannot be read here (an unknown codec, an external
    payload): the envelope is served beside it.
    """
    if envelope is None:
        return None
    try:
        return codec.decode(envelope)
    except PayloadError:
        return None


WAIT_REASONS = {
    "activity": "waiting for an activity",
    "child": "waiting for a child workflow",
    "timer": "waiting for a timer",
    "signal": "waiting for a signal or an update",
}


def _seconds(seconds: float | None) -> int | float | None:
    """Whole seconds as an integer (the SDK types timeouts as int), others as they are."""
    return int(seconds) if seconds is not None and seconds.is_integer() else seconds


def _actions(run: RunInfo, place: RunPlace) -> dict[str, bool]:
    current, running = place.is_current_run, run.status == RunStatus.RUNNING
    return {
        "can_signal": current and running,
        "can_query": running,
        "can_update": current and running,
        "can_cancel": current and running,
        "can_terminate": current and running,
        "can_repair": current and running,
        "can_archive": current and not running and place.archived_at is None,
        "can_redrive": current and run.status == RunStatus.FAILED,
    }


def describe(run: RunInfo, place: RunPlace) -> WorkflowDescription:
    """The run as describe shows it, with its place among its workflow id's runs."""
    shown = _shown(run, place.open_state, place.archived_at, place.archive_reason)
    return shown.model_copy(
        update={
            "run_number": place.run_number,
            "run_count": place.run_count,
            "is_current_run": place.is_current_run,
            "actions": _actions(run, place),
            "continued_from_run_id": place.continued_from_run_id,
            "last_progress_at": place.last_progress_at,
            "wait_kind": place.wait_kind,
            "wait_reason": WAIT_REASONS.get(place.wait_kind or ""),
        }
    )


def list_item(listed: ListedRun) -> WorkflowDescription:
    """The run as a workflow list shows it (its place among its id's runs is left out)."""
    return _shown(listed.run, listed.open_state, listed.archived_at, listed.archive_reason)


def _shown(
    run: RunInfo,
    open_state: OpenState | None,
    archived_at: datetime | None,
    archive_reason: str | None,
) -> WorkflowDescription:
    return WorkflowDescription(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        workflow_type=run.workflow_type,
        namespace=run.namespace,
        task_queue=run.task_queue,
        status=status_of(run, open_state),
        status_bucket=bucket_of(run),
        closed_reason=run.status.value if run.status == RunStatus.TIMED_OUT else None,
        is_terminal=run.status in TERMINAL,
        payload_codec=str(run.input.get("codec", "avro")),
        input_envelope=run.input,
        output_envelope=run.result,
        input=decoded(run.input),
        output=decoded(run.result),
        failure=run.failure,
        cancel_requested=run.cancel_requested,
        continued_to_run_id=run.continued_to_run_id,
        started_at=run.created_at,
        closed_at=run.closed_at,
        compatibility=run.build_id,
        execution_timeout_seconds=_seconds(run.execution_timeout_seconds),
        run_timeout_seconds=_seconds(run.run_timeout_seconds),
        execution_deadline_at=run.execution_deadline_at,
        run_deadline_at=run.run_deadline_at,
        retry_attempt=run.retry_attempt,
        retry_of_run_id=run.retry_of_run_id,
        archived=archived_at is not None,
        archived_at=archived_at,
        archive_reason=archive_reason,
    )


async def _with_visibility(
    state: ServerState, shown: list[WorkflowDescription], *, reads: bool = False
) -> list[WorkflowDescription]:
    """The runs with their memo and search attributes (issue 30), read for all in one go.

    `reads`: from where the runs were listed (the read replica, if any).
    """
    if not shown:
        return shown
    held = await (state.read_store if reads else state.store).visibility_of(
        namespace=shown[0].namespace, run_ids=[run.run_id for run in shown]
    )
    return [
        run.model_copy(
            update={"memo": held[run.run_id][0], "search_attributes": held[run.run_id][1]}
        )
        if run.run_id in held
        else run
        for run in shown
    ]


async def current_run(state: ServerState, namespace: str, workflow_id: str) -> RunInfo:
    """The workflow id's newest run; 404 `instance_not_found` (the reference's code)."""
    try:
        return await state.store.get_run(namespace=namespace, workflow_id=workflow_id)
    except WorkflowNotFoundError:
        raise ApiError(
            404, "instance_not_found", "Workflow not found.", workflow_id=workflow_id
        ) from None


async def named_run(state: ServerState, namespace: str, workflow_id: str, run_id: str) -> RunInfo:
    """One run of the workflow id; 404 `run_not_found` naming both ids (the reference's code)."""
    missing = ApiError(
        404, "run_not_found", "Workflow run not found.", workflow_id=workflow_id, run_id=run_id
    )
    try:
        uuid.UUID(run_id)
        return await state.store.get_run(
            namespace=namespace, workflow_id=workflow_id, run_id=run_id
        )
    except (ValueError, WorkflowNotFoundError):
        raise missing from None


# PROTOCOL.md 17: `duplicate_policy` onto the store's id-reuse policy; absent is `fail`, as the
# Durable Workflow server has it (a workflow id is never reused).
DUPLICATE_POLICIES = {
    None: IdReusePolicy.REJECT_DUPLICATE,
    "fail": IdReusePolicy.REJECT_DUPLICATE,
    "use-existing": IdReusePolicy.USE_EXISTING,
}


@router.post("")
async def start(body: StartWorkflow, state: State, caller: OperatorCaller) -> JSONResponse:
    """Start a run (201), or return the running one under `use-existing` (200).

    The id-reuse check is made by the statement that inserts the run: of concurrent starts of
    one id, one is 201 and the others 409 (or 200 with its run under `use-existing`).
    """
    new_run_id = str(uuid.uuid4())
    try:
        run = await state.store.start_workflow(
            namespace=caller.namespace,
            workflow_id=body.workflow_id,
            workflow_type=body.workflow_type,
            task_queue=body.task_queue,
            input=body.input.model_dump(),
            build_id=body.build_id or body.compatibility,
            connection=body.connection or "default",
            id_reuse_policy=DUPLICATE_POLICIES[body.duplicate_policy],
            run_id=new_run_id,
            execution_timeout_seconds=body.execution_timeout_seconds,
            run_timeout_seconds=body.run_timeout_seconds,
            retry_policy=None if body.retry_policy is None else body.retry_policy.to_json(),
            memo=body.memo,
            search_attributes=body.search_attributes,
        )
    except (InvalidSearchAttribute, PayloadError) as exc:
        field = "search_attributes" if isinstance(exc, InvalidSearchAttribute) else "memo"
        raise ApiError(422, "validation_failed", str(exc), errors={field: [str(exc)]}) from exc
    except WorkflowAlreadyStartedError as exc:
        run_named = f" (run {exc.run_id}, {exc.status})" if exc.run_id else ""
        raise ApiError(
            409,
            "instance_already_started",
            f"workflow {body.workflow_id} already exists{run_named}; use a new workflow id",
            workflow_id=body.workflow_id,
            run_id=exc.run_id or None,
        ) from exc
    if run.run_id != new_run_id:
        place = await state.store.run_place(run_id=run.run_id)
        existing = _started(run, "returned_existing_active", place.open_state)
        return JSONResponse(existing.model_dump(mode="json"), status_code=200)
    log.info(
        "workflow started",
        namespace=caller.namespace,
        queue=body.task_queue,
        run_id=run.run_id,
        workflow_id=body.workflow_id,
    )
    # No workflow task has run for a new run: `pending`, as the reference answers a start.
    started = _started(run, "started_new", OpenState.PENDING)
    return JSONResponse(started.model_dump(mode="json"), status_code=201)


def _started(
    run: RunInfo,
    outcome: Literal["started_new", "returned_existing_active"],
    open_state: OpenState | None,
) -> Started:
    return Started(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        workflow_type=run.workflow_type,
        namespace=run.namespace,
        status=status_of(run, open_state),
        payload_codec=str(run.input.get("codec", "avro")),
        outcome=outcome,
    )


# PROTOCOL.md 17: the status names `list_workflows` may send, onto the store's filter.
# `running`, `completed` and `failed` are the reference's status buckets (`bucket_of`: what
# `status_bucket` shows), as its list filters by them; `pending` and `waiting` keep the open runs
# describe and list show with that status (OpenState); the other names keep one status each. The
# reference takes only its three buckets and refuses the other names (422); Burrow takes these
# as well.
STATUS_FILTERS: dict[str, RunFilter] = {
    "pending": RunFilter(open_state=OpenState.PENDING),
    "running": RunFilter((RunStatus.RUNNING,)),
    "waiting": RunFilter(open_state=OpenState.WAITING),
    "completed": RunFilter((RunStatus.COMPLETED, RunStatus.CONTINUED_AS_NEW)),
    "failed": RunFilter(
        (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED, RunStatus.TERMINATED)
    ),
    "cancelled": RunFilter((RunStatus.CANCELLED,)),
    "canceled": RunFilter((RunStatus.CANCELLED,)),
    "terminated": RunFilter((RunStatus.TERMINATED,)),
    "continued_as_new": RunFilter((RunStatus.CONTINUED_AS_NEW,)),
    "timed_out": RunFilter((RunStatus.TIMED_OUT,)),
}


@router.get("")
async def list_workflows(
    state: State,
    caller: OperatorCaller,
    status: str | None = None,
    workflow_type: str | None = None,
    query: Annotated[str | None, Query(max_length=MAX_QUERY_CHARS)] = None,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
    next_page_token: str | None = None,
    archived: bool | None = None,
) -> ResponseBody:
    """Runs of the namespace, newest first, a page at a time (PROTOCOL.md 17; issue 30).

    `query` is a list query (`WorkflowType = 'Checkout' AND StartTime > '...' ORDER BY ...`),
    or, a bare word, the reference's term: the runs whose workflow id contains it (it also
    matches a business key, which Burrow runs do not have); list_pages.py. Archived runs are
    listed with the others, as the Durable Workflow server lists them; `archived=true` keeps
    only them, `archived=false` leaves them out (the package's `archived` visibility filter).
    """
    wanted = RunFilter() if status is None else STATUS_FILTERS.get(status)
    if wanted is None:
        raise ApiError(
            422,
            "validation_failed",
            f"unknown status {status!r}",
            errors={"status": [f"one of {', '.join(STATUS_FILTERS)}"]},
        )
    custom = await state.store.search_attributes(namespace=caller.namespace) if query else {}
    checked, term = list_pages.list_query_of(query, custom)
    if term:
        wanted = replace(wanted, id_contains=term)
    if archived is not None:
        wanted = replace(wanted, archived=archived)
    listed = await state.read_store.list_runs_page(
        namespace=caller.namespace,
        wanted=wanted,
        workflow_type=workflow_type,
        after=page_tokens.after_of(next_page_token),
        limit=page_size,
        query=checked,
    )
    token = None if listed.next_after is None else page_tokens.token_of(listed.next_after)
    return WorkflowList(
        workflows=await _with_visibility(state, [list_item(r) for r in listed.runs], reads=True),
        workflow_count=len(listed.runs),
        next_page_token=token,
    ).model_dump(mode="json")


@router.get("/{workflow_id}")
async def describe_workflow(workflow_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """The workflow's current (newest) run, in the reference's `formatRun` shape."""
    run = await current_run(state, caller.namespace, workflow_id)
    place = await state.store.run_place(run_id=run.run_id)
    return (await _with_visibility(state, [describe(run, place)]))[0].model_dump(mode="json")


@router.get("/{workflow_id}/runs")
async def list_workflow_runs(
    workflow_id: str, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Every run of the workflow id, oldest first, numbered from 1 (PROTOCOL.md 17)."""
    found = await state.store.workflow_runs(namespace=caller.namespace, workflow_id=workflow_id)
    if not found:
        raise ApiError(404, "instance_not_found", "Workflow not found.", workflow_id=workflow_id)
    summaries = [_run_summary(listed, n, len(found)) for n, listed in enumerate(found, start=1)]
    return WorkflowRunList(
        workflow_id=workflow_id, run_count=len(summaries), runs=summaries
    ).model_dump(mode="json")


def _run_summary(listed: ListedRun, number: int, count: int) -> WorkflowRunSummary:
    run = listed.run
    return WorkflowRunSummary(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        run_number=number,
        namespace=run.namespace,
        workflow_type=run.workflow_type,
        status=status_of(run, listed.open_state),
        status_bucket=bucket_of(run),
        is_terminal=run.status in TERMINAL,
        is_current_run=number == count,
        closed_reason=run.status.value if run.status == RunStatus.TIMED_OUT else None,
        task_queue=run.task_queue,
        compatibility=run.build_id,
        started_at=run.created_at,
        closed_at=run.closed_at,
        archived=listed.archived_at is not None,
    )


@router.get("/{workflow_id}/runs/{run_id}")
async def describe_run(
    workflow_id: str, run_id: str, state: State, caller: OperatorCaller
) -> ResponseBody:
    """One run of the workflow, in the reference's `formatRun` shape."""
    run = await named_run(state, caller.namespace, workflow_id, run_id)
    place = await state.store.run_place(run_id=run.run_id)
    return (await _with_visibility(state, [describe(run, place)]))[0].model_dump(mode="json")


@router.get("/{workflow_id}/runs/{run_id}/history")
async def history(
    workflow_id: str,
    run_id: str,
    state: State,
    caller: OperatorCaller,
    page_size: Annotated[int, Query(ge=1, le=HISTORY_PAGE_MAX)] = HISTORY_PAGE_DEFAULT,
    next_page_token: str | None = None,
) -> ResponseBody:
    """A page of the run's history (PROTOCOL.md 9), token base64(last sequence)."""
    run = await named_run(state, caller.namespace, workflow_id, run_id)
    after = decode_token(next_page_token)
    whole = await read_replica.closed_history(state, run)  # None: the primary's, read below
    if whole is None:
        events = await state.store.read_history(run_id=run.run_id, after_seq=after)
        whole = events if after == 0 else await state.store.read_history(run_id=run.run_id)
    else:
        events = [e for e in whole if e.sequence > after]
    shown, token = page(events, page_size)
    groups = parallel_groups.groups_of(whole)
    return HistoryResponse(
        workflow_id=workflow_id,
        run_id=run.run_id,
        events=[client_event(e, groups) for e in shown],
        next_page_token=token,
    ).model_dump(mode="json")


async def _signal(
    state: State,
    namespace: str,
    workflow_id: str,
    run_id: str | None,
    signal_name: str,
    body: SignalWorkflow,
) -> JSONResponse:
    run = await find(state, namespace, workflow_id, run_id)
    if run.status != RunStatus.RUNNING:
        raise ApiError(
            409,
            "run_not_active",
            f"workflow {workflow_id} run {run.run_id} is {run.status.value}",
            control_plane={"operation": "signal"},
        )
    request_id = body.request_id or f"server-signal-{uuid.uuid4().hex}"
    arguments = body.input.model_dump() if body.input is not None else dict(codec.encode([]))
    recorded = await state.store.signal_workflow(
        namespace=namespace,
        workflow_id=workflow_id,
        signal_name=signal_name,
        arguments=arguments,
        signal_id=request_id,
        run_id=run.run_id,
    )
    if not recorded:
        first = await state.store.recorded_signal(run_id=run.run_id, signal_id=request_id)
        if first is not None and (first.signal_name, first.arguments) != (signal_name, arguments):
            raise ApiError(
                409,
                "request_id_conflict",
                f"request_id {request_id!r} was already used for a different signal",
                request_id=request_id,
            )
    log.info(
        "signal received" if recorded else "signal resent",
        namespace=namespace,
        run_id=run.run_id,
        workflow_id=workflow_id,
        signal_name=signal_name,
        request_id=request_id,
    )
    receipt = CommandReceipt(
        workflow_id=workflow_id,
        run_id=run.run_id,
        outcome="signal_received" if recorded else "deduplicated",
        request_id=request_id,
        signal_name=signal_name,
    )
    return JSONResponse(receipt.model_dump(mode="json"), status_code=202)


@router.post("/{workflow_id}/signal/{signal_name}")
async def signal(
    workflow_id: str, signal_name: str, body: SignalWorkflow, state: State, caller: OperatorCaller
) -> JSONResponse:
    """Deliver a signal to the current run, once per `request_id`."""
    return await _signal(state, caller.namespace, workflow_id, None, signal_name, body)


@router.post("/{workflow_id}/runs/{run_id}/signal/{signal_name}")
async def signal_run(
    workflow_id: str,
    run_id: str,
    signal_name: str,
    body: SignalWorkflow,
    state: State,
    caller: OperatorCaller,
) -> JSONResponse:
    """Deliver a signal to one run, once per `request_id`."""
    return await _signal(state, caller.namespace, workflow_id, run_id_of(run_id), signal_name, body)


async def _cancel(
    state: State, namespace: str, workflow_id: str, run_id: str | None, body: Reason
) -> CommandReceipt:
    run = await find(state, namespace, workflow_id, run_id)
    # PROTOCOL.md 17: the control plane's cancel closes the run now; no workflow code runs.
    await state.store.cancel_workflow_now(
        namespace=namespace, workflow_id=workflow_id, reason=body.reason or "", run_id=run.run_id
    )
    return CommandReceipt(workflow_id=workflow_id, run_id=run.run_id, outcome="cancelled")


async def _terminate(
    state: State, namespace: str, workflow_id: str, run_id: str | None, body: Reason
) -> CommandReceipt:
    run = await find(state, namespace, workflow_id, run_id)
    await state.store.terminate_workflow(
        namespace=namespace, workflow_id=workflow_id, reason=body.reason or "", run_id=run.run_id
    )
    return CommandReceipt(workflow_id=workflow_id, run_id=run.run_id, outcome="terminated")


@router.post("/{workflow_id}/cancel")
async def cancel(
    workflow_id: str, state: State, caller: OperatorCaller, body: Reason | None = None
) -> ResponseBody:
    """Cancel the current run now (closed as cancelled, no workflow code runs)."""
    receipt = await _cancel(state, caller.namespace, workflow_id, None, body or Reason())
    return receipt.model_dump(mode="json")


@router.post("/{workflow_id}/runs/{run_id}/cancel")
async def cancel_run(
    workflow_id: str, run_id: str, state: State, caller: OperatorCaller, body: Reason | None = None
) -> ResponseBody:
    """Cancel one run now (closed as cancelled, no workflow code runs)."""
    receipt = await _cancel(
        state, caller.namespace, workflow_id, run_id_of(run_id), body or Reason()
    )
    return receipt.model_dump(mode="json")


@router.post("/{workflow_id}/terminate")
async def terminate(
    workflow_id: str, state: State, caller: OperatorCaller, body: Reason | None = None
) -> ResponseBody:
    """Close the current run now, without running workflow code."""
    receipt = await _terminate(state, caller.namespace, workflow_id, None, body or Reason())
    return receipt.model_dump(mode="json")


@router.post("/{workflow_id}/runs/{run_id}/terminate")
async def terminate_run(
    workflow_id: str, run_id: str, state: State, caller: OperatorCaller, body: Reason | None = None
) -> ResponseBody:
    """Close one run now, without running workflow code."""
    receipt = await _terminate(
        state, caller.namespace, workflow_id, run_id_of(run_id), body or Reason()
    )
    return receipt.model_dump(mode="json")
