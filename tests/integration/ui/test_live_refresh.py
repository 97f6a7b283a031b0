"""Issue 31: the UI's live refresh: run-change wakes from RabbitMQ, and the poll behind them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from burrow.server.auth import ALL_ROLES
from burrow.server.deps import ServerState
from burrow.ui import live
from burrow.ui.access import UiCaller
from burrow.ui.session import new_session


class _Page:
    """The request side of an open event stream: connected until told otherwise."""

    def __init__(self) -> None:
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


def _caller(state: ServerState) -> UiCaller:
    return UiCaller(new_session(ALL_ROLES), "default", ("default",), state)


async def _app(database_url: str, *, wakes: bool) -> Any:
    server = ServerSettings(sweep_interval_seconds=60.0)
    return create_app(server, Settings.load(database_url=database_url, wakes={"enabled": wakes}))


@pytest.fixture(params=[True, False], ids=["wakes", "poll-only"])
async def state(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[ServerState]:
    app = await _app(database_url, wakes=request.param)
    async with app.router.lifespan_context(app):
        yield app.state.burrow


async def _next_event(stream: AsyncIterator[str], seconds: float = 30.0) -> str:
    async with asyncio.timeout(seconds):
        while True:
            chunk = await anext(stream)
            if chunk.startswith("event:"):
                return chunk


async def _start(state: ServerState, workflow_id: str) -> str:
    run = await state.store.start_workflow(
        namespace="default",
        workflow_id=workflow_id,
        workflow_type="greeter",
        task_queue="ui-live",
        input={"args": []},
    )
    return run.run_id


async def test_a_run_page_hears_its_run_change(state: ServerState) -> None:
    """Issue 31: a run's stream sends `changed` when its history moves (wake or poll)."""
    run_id = await _start(state, "live-run")
    page = _Page()
    stream = live._stream(page, _caller(state), run_id)  # type: ignore[arg-type]
    assert (await anext(stream)).startswith("retry:")
    waiting = asyncio.ensure_future(_next_event(stream))
    await asyncio.sleep(0.3)  # the stream has read its first mark
    await state.store.terminate_workflow(namespace="default", workflow_id="live-run", reason="t")
    assert await waiting == "event: changed\ndata: {}\n\n"
    page.gone = True
    await stream.aclose()


async def test_the_list_hears_a_new_run_and_a_close(state: ServerState) -> None:
    """Issue 31: the list's stream sends `changed` for a start and for a close."""
    page = _Page()
    stream = live._stream(page, _caller(state), None)  # type: ignore[arg-type]
    await anext(stream)
    waiting = asyncio.ensure_future(_next_event(stream))
    await asyncio.sleep(0.3)
    await _start(state, "live-list")
    assert (await waiting).startswith("event: changed")
    waiting = asyncio.ensure_future(_next_event(stream))
    await asyncio.sleep(live.COALESCE_SECONDS + 0.3)
    await state.store.terminate_workflow(namespace="default", workflow_id="live-list", reason="t")
    assert (await waiting).startswith("event: changed")
    await stream.aclose()


async def test_with_the_poll_an_hour_away_a_close_still_arrives_by_its_wake(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: the list is fed by the RabbitMQ run-change wakes, not only by its poll."""
    monkeypatch.setattr(live, "POLL_SECONDS", 3600.0)
    app = await _app(database_url, wakes=True)
    async with app.router.lifespan_context(app):
        state: ServerState = app.state.burrow
        run_id = await _start(state, "live-wake")
        stream = live._stream(_Page(), _caller(state), run_id)  # type: ignore[arg-type]
        await anext(stream)
        waiting = asyncio.ensure_future(_next_event(stream))
        # The binding is made in the background; the listener hears the close once it is.
        await asyncio.sleep(1.0)
        await state.store.terminate_workflow(
            namespace="default", workflow_id="live-wake", reason="t"
        )
        assert (await waiting).startswith("event: changed")
        await stream.aclose()


async def test_a_stream_binds_only_while_a_page_listens(state: ServerState) -> None:
    """Issue 31: nobody watching, no binding: the feed holds no key once streams end."""
    feed = state.ui_changes
    with feed.subscribe("3f1d0c7e-0000-4000-8000-000000000001") as one, feed.subscribe(None):
        assert set(feed._bound) == {"3f1d0c7e-0000-4000-8000-000000000001", "#"}
        feed.changed("another-run")
        assert not one.heard.is_set()
        feed.changed("3f1d0c7e-0000-4000-8000-000000000001")
        assert one.heard.is_set()
    assert not feed._bound
