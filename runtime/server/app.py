"""The app factory and the process runner of `burrow server` (SPEC M4b)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog
import uvicorn
from fastapi import FastAPI

from burrow.config import Settings
from burrow.server import (
    activity_tasks,
    control,
    discovery,
    errors,
    operator,
    queries,
    query_tasks,
    worker_lifecycle,
    worker_sessions,
    workflow_tasks,
)
from burrow.server.broker_wakes import WakeTap
from burrow.server.deps import ServerState
from burrow.server.gate import RequestGate
from burrow.server.polls import HeldPolls
from burrow.server.settings import ServerSettings
from burrow.server.sweeper import LOOP_NAME, Sweeper
from burrow.server.wakes import PollWakes
from burrow.store import Store
from burrow.store.ready import Notice
from burrow.wakes import WakeLink

log = structlog.get_logger("burrow.server")


def _after_commit(
    wakes: PollWakes, link: WakeLink | None
) -> Callable[[list[Notice]], Awaitable[None]]:
    """Wake this server's held polls, then publish wakes for other processes (after commit)."""

    async def after_commit(notices: list[Notice]) -> None:
        await wakes.after_commit(notices)
        if link is not None:
            await link.publish_ready(notices)

    return after_commit


def create_app(server: ServerSettings, settings: Settings) -> FastAPI:
    """The ASGI app: routes, error contract, and a lifespan that owns the store and sweeps."""
    wakes = PollWakes()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        link: WakeLink | None = None
        tap: WakeTap | None = None
        if settings.wakes.enabled:
            # What the server's commits make ready also wakes Burrow's own workers (C1, M5),
            # and what other processes make ready wakes the server's held polls.
            link = WakeLink(settings, name=f"burrow-server:{os.getpid()}")
            wakes.tap = tap = WakeTap(link, wakes)
            await link.start()
        store = Store.connect(
            settings.database_url,
            max_payload_bytes=settings.max_payload_bytes,
            after_commit=_after_commit(wakes, link),
        )
        app.state.burrow = ServerState(
            settings=server,
            runtime=settings,
            store=store,
            wakes=wakes,
            held=HeldPolls(server.max_held_polls),
        )
        sweeper = Sweeper(
            store=store,
            settings=settings,
            interval=server.sweep_interval_seconds,
            health=app.state.burrow.loops.add(LOOP_NAME),
        )
        sweeper.start()
        try:
            yield
        finally:
            await sweeper.stop()
            await store.close()
            if tap is not None:
                await tap.close()
            if link is not None:
                await link.close()

    app = FastAPI(title="Burrow", lifespan=lifespan, openapi_url=None, docs_url=None)
    errors.install(app)
    for module in (
        discovery,
        operator,
        control,
        queries,
        worker_lifecycle,
        workflow_tasks,
        activity_tasks,
        worker_sessions,
        query_tasks,
    ):
        app.include_router(module.router)

    # Token, body cap and version headers, before FastAPI reads a body (gate.py).
    app.add_middleware(
        RequestGate,
        settings=server,
        max_request_bytes=server.request_cap(settings.max_payload_bytes),
    )
    return app


async def serve(server: ServerSettings, settings: Settings) -> None:
    """Run the server until it is told to stop.

    Raises:
        ConfigurationError: no token is set and the host is not loopback.
    """
    server.check_bind()
    if server.open:
        log.warning(
            "no token set: the server runs open (no authentication), on loopback only",
            host=server.host,
            port=server.port,
        )
    config = uvicorn.Config(
        create_app(server, settings),
        host=server.host,
        port=server.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        # Held long polls would otherwise hold a shutdown for up to a minute; a poll cut short
        # loses nothing (a lease it took expires and the task is claimed again).
        timeout_graceful_shutdown=5,
    )
    log.info("server listening", host=server.host, port=server.port)
    await uvicorn.Server(config).serve()
