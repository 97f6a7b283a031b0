"""Standalone activities as the SDK Client uses them (PROTOCOL.md 17, SDK `start_activity`).

`POST /api/activities` starts one, `GET /api/activities/{id}` describes it (its result once it
completed), `GET /api/activities` lists them a page at a time. Each runs on a host run of its
own (store/standalone.py), so cancel and terminate are the workflow control routes' on the
activity id, as the SDK's handle calls them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated

import structlog
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from burrow import codec, page_tokens
from burrow.errors import WorkflowAlreadyStartedError
from burrow.protocol import shapes
from burrow.protocol.shapes import JsonDict
from burrow.server.api_errors import ApiError
from burrow.server.control_models import WORKFLOW_ID_PATTERN
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.server.worker_models import Envelope
from burrow.store.models import RunStatus
from burrow.store.standalone import (
    HOST_WORKFLOW_TYPE,
    NewStandaloneActivity,
    StandaloneActivityInfo,
)

router = APIRouter(prefix="/api/activities")
log = structlog.get_logger("burrow.server")

# `status` of a list: the host run's status bucket (a timed-out host reads as failed).
STATUS_BUCKETS: dict[str, tuple[RunStatus, ...]] = {
    "running": (RunStatus.RUNNING,),
    "completed": (RunStatus.COMPLETED,),
    "failed": (RunStatus.FAILED, RunStatus.TIMED_OUT),
    "cancelled": (RunStatus.CANCELLED,),
    "terminated": (RunStatus.TERMINATED,),
}


class StartActivity(BaseModel):
    """`POST /api/activities`, as `Client.start_activity` sends it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    activity_type: str = Field(min_length=1, max_length=255)
    task_queue: str = Field(min_length=1, max_length=255)
    activity_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=WORKFLOW_ID_PATTERN
    )
    activity_class: str | None = Field(default=None, max_length=255)
    business_key: str | None = Field(default=None, max_length=255)
    input: Envelope | None = None
    retry_policy: shapes.RetrySpec | None = None
    start_to_close_timeout_seconds: float | None = None
    schedule_to_start_timeout_seconds: float | None = None
    schedule_to_close_timeout_seconds: float | None = None
    heartbeat_timeout_seconds: float | None = None

    @field_validator(
        "start_to_close_timeout_seconds",
        "schedule_to_start_timeout_seconds",
        "schedule_to_close_timeout_seconds",
        "heartbeat_timeout_seconds",
    )
    @classmethod
    def _positive(cls, value: float | None, info: object) -> float | None:
        name = str(getattr(info, "field_name", "timeout"))
        return None if value is None else shapes.check_positive_seconds(name, value)


class ActivityExecution(BaseModel):
    """One standalone activity, as `StandaloneActivityExecution.from_dict` reads it."""

    model_config = ConfigDict(frozen=True)

    activity_id: str
    workflow_id: str
    workflow_run_id: str
    activity_execution_id: str
    workflow_type: str
    activity_type: str
    activity_class: str | None
    task_queue: str
    namespace: str
    status: str
    activity_status: str
    is_terminal: bool
    closed_reason: str | None
    business_key: str | None
    payload_codec: str
    input: JsonDict
    result: JsonDict | None
    failure: JsonDict | None
    last_failure: JsonDict | None
    started_at: datetime
    closed_at: datetime | None
    last_progress_at: datetime | None
    last_heartbeat_at: datetime | None
    schedule_to_start_deadline_at: datetime | None
    schedule_to_close_deadline_at: datetime | None
    attempt_count: int


class ActivityStarted(ActivityExecution):
    """The start receipt (201)."""

    outcome: str = "started_new"


class ActivityList(BaseModel):
    """`GET /api/activities`: a page, newest first."""

    model_config = ConfigDict(frozen=True)

    activities: list[ActivityExecution]
    activity_count: int
    next_page_token: str | None


def execution(info: StandaloneActivityInfo) -> ActivityExecution:
    """The standalone activity as the control plane shows it."""
    timed_out = info.status == RunStatus.TIMED_OUT
    closed_reason = None  # a failed one says how its activity ended (failed, timed_out)
    if info.status != RunStatus.RUNNING:
        failed = info.status in (RunStatus.FAILED, RunStatus.TIMED_OUT)
        closed_reason = info.activity_status if failed else info.status.value
    s2start = info.schedule_to_start_seconds
    return ActivityExecution(
        activity_id=info.activity_id,
        workflow_id=info.activity_id,
        workflow_run_id=info.run_id,
        activity_execution_id=info.activity_execution_id,
        workflow_type=HOST_WORKFLOW_TYPE,
        activity_type=info.activity_type,
        activity_class=info.activity_class,
        task_queue=info.task_queue,
        namespace=info.namespace,
        status=RunStatus.FAILED.value if timed_out else info.status.value,
        activity_status=info.activity_status,
        is_terminal=info.status != RunStatus.RUNNING,
        closed_reason=closed_reason,
        business_key=info.business_key,
        payload_codec=str(info.arguments.get("codec", "avro")),
        input=info.arguments,
        result=info.result,
        failure=info.failure,
        last_failure=info.last_failure,
        started_at=info.created_at,
        closed_at=info.closed_at,
        last_progress_at=info.heartbeat_at or info.started_at,
        last_heartbeat_at=info.heartbeat_at,
        schedule_to_start_deadline_at=None
        if s2start is None or info.attempt > 1
        else info.created_at + timedelta(seconds=s2start),
        schedule_to_close_deadline_at=info.schedule_to_close_deadline,
        attempt_count=info.attempt,
    )


@router.post("")
async def start(body: StartActivity, state: State, caller: OperatorCaller) -> JSONResponse:
    """Start a standalone activity (201); an id any run already has is refused (409)."""
    activity_id = body.activity_id or f"activity-{uuid.uuid4()}"
    new = NewStandaloneActivity(
        namespace=caller.namespace,
        activity_id=activity_id,
        activity_type=body.activity_type,
        task_queue=body.task_queue,
        arguments=body.input.model_dump() if body.input is not None else dict(codec.encode([])),
        retry_policy=(body.retry_policy or shapes.RetrySpec()).to_json(),
        activity_class=body.activity_class,
        business_key=body.business_key,
        schedule_to_start_seconds=body.schedule_to_start_timeout_seconds,
        start_to_close_seconds=body.start_to_close_timeout_seconds,
        schedule_to_close_seconds=body.schedule_to_close_timeout_seconds,
        heartbeat_seconds=body.heartbeat_timeout_seconds,
    )
    try:
        info = await state.store.start_activity(new)
    except WorkflowAlreadyStartedError as exc:
        raise ApiError(
            409,
            "instance_already_started",
            f"activity id {activity_id} is already used (run {exc.run_id}, {exc.status})",
            activity_id=activity_id,
            workflow_run_id=exc.run_id or None,
        ) from exc
    log.info(
        "standalone activity started",
        namespace=caller.namespace,
        queue=body.task_queue,
        run_id=info.run_id,
        activity_id=activity_id,
        activity_type=body.activity_type,
    )
    started = ActivityStarted(**execution(info).model_dump())
    return JSONResponse(started.model_dump(mode="json"), status_code=201)


@router.get("")
async def list_activities(
    state: State,
    caller: OperatorCaller,
    status: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=1000)] = 100,
    next_page_token: str | None = None,
) -> ResponseBody:
    """Standalone activities of the namespace, newest first, a page at a time."""
    if status is not None and status not in STATUS_BUCKETS:
        raise ApiError(
            422,
            "validation_failed",
            f"unknown status {status!r}",
            errors={"status": [f"one of {', '.join(STATUS_BUCKETS)}"]},
        )
    page = await state.store.list_activities(
        namespace=caller.namespace,
        statuses=None if status is None else STATUS_BUCKETS[status],
        after=page_tokens.created_after_of(next_page_token),
        limit=page_size,
    )
    shown = [execution(info) for info in page.activities]
    return ActivityList(
        activities=shown,
        activity_count=len(shown),
        next_page_token=None if page.next_after is None else page_tokens.token_of(page.next_after),
    ).model_dump(mode="json")


@router.get("/{activity_id}")
async def describe_activity(activity_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """One standalone activity, with its result once it completed."""
    info = await state.store.describe_activity(namespace=caller.namespace, activity_id=activity_id)
    if info is None:
        raise ApiError(
            404,
            "activity_not_found",
            f"no standalone activity {activity_id!r} in namespace {caller.namespace!r}",
            activity_id=activity_id,
        )
    return execution(info).model_dump(mode="json")
