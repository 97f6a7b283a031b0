"""The Schedules pages: the list, one schedule, and pause, resume and trigger (issue 30, 31).

Reads and actions are the store calls the schedule API makes (schedule_routes.py). Schedule ids
may hold any character: links quote them as one path segment and the routes take the rest of
the path, so an id with a slash still names one schedule.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse
from starlette.responses import HTMLResponse

from burrow.errors import ScheduleNotFound
from burrow.store.schedule_models import ScheduleDescription, ScheduleStatus
from burrow.ui.access import Actor, Caller, UiCaller, UiRefused
from burrow.ui.templating import link, path_part, render

router = APIRouter(prefix="/ui/schedules", include_in_schema=False)
PAGE_SIZE = 50
HISTORY_PAGE = 50
NOTICES = {
    "paused": "Schedule paused: it fires no more until resumed.",
    "resumed": "Schedule resumed: it fires again from its next fire time.",
    "triggered": "Schedule triggered.",
}


def _not_found(caller: UiCaller, schedule_id: str) -> UiRefused:
    return UiRefused(
        404,
        "Schedule not found",
        f"no schedule {schedule_id!r} in namespace {caller.namespace!r}",
    )


def _status(text: str) -> ScheduleStatus | None:
    try:
        return ScheduleStatus(text) if text else None
    except ValueError:
        raise UiRefused(422, "Unknown status", f"no schedule status {text!r}") from None


@router.get("")
async def schedules(
    request: Request,
    caller: Caller,
    status: Annotated[str, Query()] = "",
    after: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    """The namespace's schedules by id, a page at a time."""
    found = await caller.state.store.list_schedules(
        namespace=caller.namespace,
        status=_status(status),
        after_schedule_id=after or None,
        limit=PAGE_SIZE + 1,
    )
    page = found[:PAGE_SIZE]
    return render(
        request,
        caller,
        "schedules.html",
        {
            "schedules": page,
            "status": status,
            "statuses": [s.value for s in ScheduleStatus],
            "after": after,
            "next_after": page[-1].schedule_id if len(found) > PAGE_SIZE else None,
        },
    )


async def _describe(caller: UiCaller, schedule_id: str) -> ScheduleDescription:
    try:
        return await caller.state.store.describe_schedule(
            namespace=caller.namespace, schedule_id=schedule_id
        )
    except ScheduleNotFound:
        raise _not_found(caller, schedule_id) from None


def _back(caller: UiCaller, schedule_id: str, **params: str) -> RedirectResponse:
    """303 to the schedule's page, with a notice of what was done."""
    target = link(caller, f"/ui/schedules/{path_part(schedule_id)}", None, **params)
    return RedirectResponse(target, status_code=303)


async def _set_paused(
    caller: UiCaller, schedule_id: str, note: str, *, paused: bool
) -> RedirectResponse:
    store = caller.state.store
    change = store.pause_schedule if paused else store.resume_schedule
    try:
        await change(namespace=caller.namespace, schedule_id=schedule_id, note=note.strip() or None)
    except ScheduleNotFound:
        raise _not_found(caller, schedule_id) from None
    return _back(caller, schedule_id, notice="paused" if paused else "resumed")


@router.post("/{schedule_id:path}/pause")
async def pause(
    schedule_id: str, caller: Actor, note: Annotated[str, Form(max_length=1000)] = ""
) -> RedirectResponse:
    """Stop the schedule firing, with the note saying why."""
    return await _set_paused(caller, schedule_id, note, paused=True)


@router.post("/{schedule_id:path}/resume")
async def resume(
    schedule_id: str, caller: Actor, note: Annotated[str, Form(max_length=1000)] = ""
) -> RedirectResponse:
    """Fire again from the next fire time after now."""
    return await _set_paused(caller, schedule_id, note, paused=False)


@router.post("/{schedule_id:path}/trigger")
async def trigger(schedule_id: str, caller: Actor) -> RedirectResponse:
    """Fire now, under the schedule's overlap policy."""
    try:
        fired = await caller.state.store.trigger_schedule(
            namespace=caller.namespace, schedule_id=schedule_id
        )
    except ScheduleNotFound:
        raise _not_found(caller, schedule_id) from None
    return _back(caller, schedule_id, notice="triggered", outcome=fired.outcome.value)


@router.get("/{schedule_id:path}")
async def schedule(
    schedule_id: str,
    request: Request,
    caller: Caller,
    after: Annotated[int | None, Query(ge=0)] = None,
    notice: Annotated[str, Query()] = "",
    outcome: Annotated[str, Query()] = "",
) -> HTMLResponse:
    """One schedule: its spec, policies, next fires, recent fires and its audit history."""
    found = await _describe(caller, schedule_id)
    history = await caller.state.store.schedule_history(
        namespace=caller.namespace,
        schedule_id=schedule_id,
        after_sequence=after,
        limit=HISTORY_PAGE,
    )
    return render(
        request,
        caller,
        "schedule.html",
        {
            "schedule": found,
            "history": history,
            "after": after,
            "notice": NOTICES.get(notice),
            "outcome": outcome if notice == "triggered" else "",
        },
    )
