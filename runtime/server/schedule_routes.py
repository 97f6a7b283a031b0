"""Schedules of the caller's namespace over HTTP (issue 30), in the reference server's shapes.

Every route the SDK's `Client` calls (reference `ScheduleController`, routes/api.php):
`GET|POST /api/schedules`, `GET|PUT|DELETE /api/schedules/{id}`, `POST .../pause|resume|trigger|
backfill` and `GET .../history`. Operator role, control-plane header and `X-Namespace`, like the
reference's route group. Refusals: 404 `schedule_not_found`, 409 `schedule_already_exists`, 422
`validation_failed` (a field, or a spec that cannot work), `memo_too_large`,
`invalid_time_range`, `invalid_after_sequence`; 400 `invalid_page_token`. A trigger answers
`triggered`, `buffered` (with `buffer_depth`), `buffer_full`, `skipped` (with a reason;
`remaining_actions_exhausted` past `max_runs`) or `failed`. A refusal writes
nothing: every check runs before the store's transaction, which refuses a missing or taken id
before its first write.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from burrow import page_tokens
from burrow.errors import InvalidScheduleSpec, ScheduleAlreadyExists, ScheduleNotFound
from burrow.handle import id_or_new
from burrow.protocol.schedules import OverlapPolicy, SchedulePolicies
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.server.schedule_models import (
    MAX_MEMO_BYTES,
    BackfillBody,
    NewScheduleBody,
    NoteBody,
    ScheduleUpdateBody,
    TriggerBody,
    description_body,
    fire_body,
    summary_body,
    trigger_body,
)
from burrow.store import schedule_history
from burrow.store.schedule_models import (
    FireOutcome,
    NewSchedule,
    ScheduleStatus,
    ScheduleUpdate,
)

router = APIRouter(prefix="/api/schedules")

MAX_PAGE_SIZE = 1000
_BUFFERING = (OverlapPolicy.BUFFER_ONE, OverlapPolicy.BUFFER_ALL, OverlapPolicy.CANCEL_OTHER)


@contextmanager
def _refusals(namespace: str, schedule_id: str) -> Iterator[None]:
    """The schedule core's typed refusals as the reference's statuses and reasons."""
    try:
        yield
    except ScheduleNotFound as exc:
        message = f"Schedule [{schedule_id}] not found in namespace [{namespace}]."
        raise ApiError(404, "schedule_not_found", message, schedule_id=schedule_id) from exc
    except ScheduleAlreadyExists as exc:
        message = f"Schedule [{schedule_id}] already exists in namespace [{namespace}]."
        raise ApiError(409, "schedule_already_exists", message, schedule_id=schedule_id) from exc
    except InvalidScheduleSpec as exc:
        errors = {exc.field: [exc.reason]}
        raise ApiError(422, "validation_failed", str(exc), errors=errors) from exc
    except ValidationError as exc:
        fields: dict[str, list[str]] = {}
        for error in exc.errors():
            where = ".".join(str(part) for part in error.get("loc", ())) or "body"
            fields.setdefault(where, []).append(str(error.get("msg")))
        raise ApiError(422, "validation_failed", f"invalid schedule: {exc}", errors=fields) from exc
    except ValueError as exc:  # a blank schedule id
        raise ApiError(
            422, "validation_failed", str(exc), errors={"schedule_id": [str(exc)]}
        ) from exc


def _check_memo(memo: dict[str, Any] | None) -> None:
    if memo is None:
        return
    size = len(json.dumps(memo, separators=(",", ":")).encode())
    if size > MAX_MEMO_BYTES:
        message = f"The memo exceeds the maximum allowed size of {MAX_MEMO_BYTES} bytes."
        raise ApiError(422, "memo_too_large", message, limit=MAX_MEMO_BYTES)


def _overlap(name: str | None) -> OverlapPolicy | None:
    return None if name is None else OverlapPolicy(name)


def _page_token(schedule_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": schedule_id}).encode()).decode()


def _after_of(token: str) -> str:
    try:
        document = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise page_tokens.InvalidPageToken(token) from None
    after = document.get("after") if isinstance(document, dict) else None
    if not isinstance(after, str):
        raise page_tokens.InvalidPageToken(token)
    return after


def _moment(value: str, field: str) -> datetime:
    """An ISO 8601 time; one without an offset is UTC (as the reference's server clock is)."""
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        message = f"The {field} field must be a valid date."
        raise ApiError(422, "validation_failed", message, errors={field: [message]}) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@router.get("")
@router.get("/")
async def list_schedules(
    state: State,
    caller: OperatorCaller,
    status: ScheduleStatus | None = None,
    workflow_type: str | None = None,
    query: str | None = None,
    page_size: int = Query(default=100, ge=1, le=MAX_PAGE_SIZE),
    next_page_token: str | None = None,
) -> ResponseBody:
    """One page of the namespace's schedules by id; `next_page_token` is null on the last."""
    if query is not None and query.strip():
        message = "schedule lists filter by status and workflow_type; query is not supported"
        raise ApiError(422, "validation_failed", message, errors={"query": [message]})
    after = None if not next_page_token else _after_of(next_page_token)
    found = await state.store.list_schedules(
        namespace=caller.namespace,
        status=status,
        workflow_type=workflow_type,
        after_schedule_id=after,
        limit=page_size + 1,
    )
    page = found[:page_size]
    token = _page_token(page[-1].schedule_id) if len(found) > page_size else None
    return {"schedules": [summary_body(s) for s in page], "next_page_token": token}


@router.post("")
@router.post("/")
async def create_schedule(
    body: NewScheduleBody, state: State, caller: OperatorCaller
) -> JSONResponse:
    """Create a schedule (paused when asked): 201 `{schedule_id, outcome: "created"}`."""
    _check_memo(body.memo)
    namespace = caller.namespace
    with _refusals(namespace, body.schedule_id or ""):
        schedule_id = id_or_new(body.schedule_id, what="schedule id")
        policies: dict[str, Any] = {"jitter_seconds": body.jitter_seconds or 0}
        if body.overlap_policy is not None:
            policies["overlap_policy"] = body.overlap_policy
        if body.max_runs is not None:
            policies["max_runs"] = body.max_runs
        new = NewSchedule(
            namespace=namespace,
            schedule_id=schedule_id,
            spec=body.spec.spec(),
            action=body.action.action(),
            policies=SchedulePolicies.model_validate(policies),
            memo=body.memo,
            search_attributes=body.search_attributes,
            paused=bool(body.paused),
            note=body.note,
        )
        await state.store.create_schedule(new)
    return JSONResponse({"schedule_id": schedule_id, "outcome": "created"}, status_code=201)


@router.get("/{schedule_id}")
async def describe_schedule(schedule_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """The schedule, its counters, next fire times and recent actions."""
    with _refusals(caller.namespace, schedule_id):
        found = await state.store.describe_schedule(
            namespace=caller.namespace, schedule_id=schedule_id
        )
    return description_body(found)


@router.put("/{schedule_id}")
async def update_schedule(
    schedule_id: str, body: ScheduleUpdateBody, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Change the fields given; a given `action` is merged over the current one."""
    ids = {"namespace": caller.namespace, "schedule_id": schedule_id}
    with _refusals(caller.namespace, schedule_id):
        current = await state.store.describe_schedule(**ids, upcoming=0, recent=0)
        _check_memo(body.memo)  # after the 404, as the reference checks
        update = ScheduleUpdate(
            spec=None if body.spec is None else body.spec.spec(),
            action=None if body.action is None else body.action.action(current.action),
            overlap_policy=_overlap(body.overlap_policy),
            jitter_seconds=body.jitter_seconds,
            max_runs=body.max_runs,
            memo=body.memo,
            search_attributes=body.search_attributes,
            note=body.note,
        )
        await state.store.update_schedule(**ids, update=update)
    return {"schedule_id": schedule_id, "outcome": "updated"}


@router.delete("/{schedule_id}")
async def delete_schedule(schedule_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """Delete the schedule; runs it started go on, its history stays readable."""
    with _refusals(caller.namespace, schedule_id):
        await state.store.delete_schedule(namespace=caller.namespace, schedule_id=schedule_id)
    return {"schedule_id": schedule_id, "outcome": "deleted"}


@router.post("/{schedule_id}/pause")
async def pause_schedule(
    schedule_id: str,
    state: State,
    caller: OperatorCaller,
    body: Annotated[NoteBody | None, Body()] = None,
) -> ResponseBody:
    """Stop firing until resumed; the note says why."""
    with _refusals(caller.namespace, schedule_id):
        await state.store.pause_schedule(
            namespace=caller.namespace, schedule_id=schedule_id, note=(body or NoteBody()).note
        )
    return {"schedule_id": schedule_id, "outcome": "paused"}


@router.post("/{schedule_id}/resume")
async def resume_schedule(
    schedule_id: str,
    state: State,
    caller: OperatorCaller,
    body: Annotated[NoteBody | None, Body()] = None,
) -> ResponseBody:
    """Fire again from the next fire time after now."""
    with _refusals(caller.namespace, schedule_id):
        await state.store.resume_schedule(
            namespace=caller.namespace, schedule_id=schedule_id, note=(body or NoteBody()).note
        )
    return {"schedule_id": schedule_id, "outcome": "resumed"}


@router.post("/{schedule_id}/trigger")
async def trigger_schedule(
    schedule_id: str,
    state: State,
    caller: OperatorCaller,
    body: Annotated[TriggerBody | None, Body()] = None,
) -> ResponseBody:
    """Fire now, under the schedule's overlap policy or the one given for this fire."""
    ids = {"namespace": caller.namespace, "schedule_id": schedule_id}
    overlap = _overlap(None if body is None else body.overlap_policy)
    with _refusals(caller.namespace, schedule_id):
        fired = await state.store.trigger_schedule(**ids, overlap=overlap)
        answer = trigger_body(fired)
        if fired.outcome not in (FireOutcome.BUFFERED, FireOutcome.SKIPPED):
            return answer
        after = await state.store.describe_schedule(**ids, upcoming=0, recent=0)
    if fired.outcome is FireOutcome.BUFFERED:
        answer["buffer_depth"] = after.buffered_count
    elif after.remaining_actions == 0:  # `max_runs` reached: the reference's reason code
        answer["reason"] = "remaining_actions_exhausted"
    elif (overlap or after.overlap_policy) in _BUFFERING and after.buffered_count > 0:
        answer["outcome"] = "buffer_full"
        answer["reason"] = "Previous workflow is still running and buffer is at capacity."
    return answer


@router.post("/{schedule_id}/backfill")
async def backfill_schedule(
    schedule_id: str, body: BackfillBody, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Fire every fire time in `[start_time, end_time)` not fired before (at most 1,000)."""
    start = _moment(body.start_time, "start_time")
    end = _moment(body.end_time, "end_time")
    if end <= start:
        raise ApiError(422, "invalid_time_range", "end_time must be after start_time.")
    with _refusals(caller.namespace, schedule_id):
        fires = await state.store.backfill_schedule(
            namespace=caller.namespace,
            schedule_id=schedule_id,
            start=start,
            end=end,
            overlap=_overlap(body.overlap_policy),
        )
    results = [fire_body(fire) for fire in fires]
    return {
        "schedule_id": schedule_id,
        "outcome": "backfill_started",
        "fires_attempted": len(results),
        "results": results,
    }


def _history_limit(raw: str | None) -> int:
    """The reference's rule: absent, not a number or below 1 is 100; above 500 is 500."""
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        value = 0
    if value <= 0:
        return schedule_history.DEFAULT_PAGE
    return min(value, schedule_history.MAX_PAGE)


def _after_sequence(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    text = raw.strip()
    if not text.lstrip("-").isdigit() or int(text) < 0:
        message = "after_sequence must be a non-negative integer."
        raise ApiError(422, "invalid_after_sequence", message)
    return int(text)


@router.get("/{schedule_id}/history")
async def schedule_history_page(
    schedule_id: str,
    state: State,
    caller: OperatorCaller,
    limit: str | None = None,
    after_sequence: str | None = None,
) -> ResponseBody:
    """The schedule's audit events, oldest first; kept after a delete."""
    cursor = _after_sequence(after_sequence)
    page = await state.store.schedule_history(
        namespace=caller.namespace,
        schedule_id=schedule_id,
        after_sequence=cursor,
        limit=_history_limit(limit),
    )
    if page is None:
        message = f"Schedule [{schedule_id}] not found in namespace [{caller.namespace}]."
        raise ApiError(404, "schedule_not_found", message, schedule_id=schedule_id)
    events = [
        {
            "id": event.id,
            "sequence": event.sequence,
            "event_type": event.event_type.value,
            "payload": event.payload,
            "workflow_instance_id": event.workflow_id,
            "workflow_run_id": event.run_id,
            "recorded_at": event.recorded_at.isoformat(),
        }
        for event in page.events
    ]
    return {
        "schedule_id": page.schedule_id,
        "namespace": page.namespace,
        "events": events,
        "next_cursor": page.next_cursor,
        "has_more": page.has_more,
    }
