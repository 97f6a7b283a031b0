"""Live refresh of the UI's pages: server-sent events fed by RabbitMQ run-change wakes (issue 31).

A page's event stream (`GET /ui/events`, `?run_id=` for one run) sends `changed` when its list or
run changed. The broker's run-change wakes make it look at once: the server binds its listener
to the changes of a run (or to every change, for a list) only while a page listens, so a server
nobody watches receives nothing extra. What it sends is decided by the store's change marks,
re-read on each wake and every POLL_SECONDS: a lost wake, or a broker that is down, delays a
refresh by at most that, and a wake for another namespace sends nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from burrow.server.change_feed import ChangeFeed
from burrow.ui.access import Caller, UiCaller, UiRefused

router = APIRouter(prefix="/ui", include_in_schema=False)
log = structlog.get_logger("burrow.ui")

POLL_SECONDS = 2.0
"""How often a stream re-reads its mark with no wake heard."""
COALESCE_SECONDS = 0.5
"""After sending, wait this long: a burst of changes costs the page one refresh."""
KEEPALIVE_SECONDS = 15.0


async def _mark(caller: UiCaller, run_id: str | None) -> object:
    store = caller.state.store
    if run_id is None:
        return await store.list_mark(namespace=caller.namespace)
    return await store.run_mark(run_id=run_id)


async def _stream(request: Request, caller: UiCaller, run_id: str | None) -> AsyncIterator[str]:
    feed: ChangeFeed = caller.state.ui_changes
    yield f"retry: {int(POLL_SECONDS * 1000)}\n\n"
    with feed.subscribe(run_id) as subscription:
        mark = await _mark(caller, run_id)
        quiet = 0.0
        while not await request.is_disconnected():
            await subscription.wait(POLL_SECONDS)
            now = await _mark(caller, run_id)
            if now != mark:
                mark = now
                quiet = 0.0
                yield "event: changed\ndata: {}\n\n"
                await asyncio.sleep(COALESCE_SECONDS)
                continue
            quiet += POLL_SECONDS
            if quiet >= KEEPALIVE_SECONDS:
                quiet = 0.0
                yield ": keep-alive\n\n"


@router.get("/events")
async def events(
    request: Request, caller: Caller, run_id: Annotated[str | None, Query()] = None
) -> StreamingResponse:
    """The page's change stream (text/event-stream)."""
    if run_id is not None:
        try:
            run_id = str(uuid.UUID(run_id))
        except ValueError:
            raise UiRefused(404, "Run not found", "that is not a run id") from None
    return StreamingResponse(
        _stream(request, caller, run_id),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
