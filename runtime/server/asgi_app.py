"""The app factory and the process runner of `burrow server` (SPEC M4b)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import structlog
import uvicorn
from fastapi import FastAPI

from burrow import ui
from burrow.config import Settings
from burrow.outcomes import OutcomeWaiter
from burrow.server import (
    activity_routes,
    activity_task_routes,
    api_errors,
    cancellation_routes,
    control_routes,
    discovery_routes,
    external_payload_routes,
    history_export_routes,
    local_activity_routes,
    message_stream_routes,
    namespace_routes,
    operator_routes,
    protocol_spec_routes,
    query_task_routes,
    query_update_routes,
    read_replica,
    schedule_routes,
    search_attribute_routes,
    update_validation_routes,
    worker_lifecycle_routes,
    worker_session_routes,
    workflow_command_routes,
    workflow_stream_routes,
    workflow_task_routes,
)
from burrow.server.broker_wakes import WakeTap
from burrow.server.change_feed import ChangeFeed
from burrow.server.deps import ServerState
from burrow.server.external_payload_ingress import ExternalPayloadIngress
from burrow.server.gate import RequestGate
from burrow.server.namespace_cache import KnownNamespaces
from burrow.server.poll_wakes import PollWakes
from burrow.server.polls import HeldPolls
from burrow.server.settings import ServerSettings
from burrow.server.sweeper import LOOP_NAME, Sweeper
from burrow.store import Store
from burrow.store.ready import ClosePoliciesPending, Notice
from burrow.ui.metrics_history import MetricsHistory, measuring
from burrow.wake_link import WakeLink

log = structlog.get_logger("burrow.server")


def _after_commit(
    wakes: PollWakes,
    outcomes: OutcomeWaiter,
    link: WakeLink | None,
    poke_sweeper: Callable[[], None],
) -> Callable[[list[Notice]], Awaitable[None]]:
    """Wake this server's held polls and waiting calls, then publish wakes for other processes.

    A commit that left close policies pending runs the sweeper's next pass at once.
    """

    async def after_commit(notices: list[Notice]) -> None:
        if any(isinstance(n, ClosePoliciesPending) for n in notices):
            poke_sweeper()
        await wakes.after_commit(notices)
        outcomes.after_commit(notices)
        if link is not None:
            await link.publish_ready(notices)

    return after_commit


def _outcome_waiter(store: Store, server: ServerSettings, link: WakeLink | None) -> OutcomeWaiter:
    """The waiter of query and update calls, re-reading at the probe interval.

    This server's commits wake it, and other processes' through the broker.
    """
    outcomes = OutcomeWaiter(
        store,
        fallback_seconds=server.poll_probe_seconds,
        unheard_seconds=server.poll_probe_seconds,
        wakes_flowing=lambda: link is not None and link.healthy,
    )
    if link is not None:
        outcomes.attach(
            link.listen_for_run_changes(on_change=outcomes.changed, on_resync=outcomes.resync)
        )
    return outcomes


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
            # Bound late: the waiter the hook wakes needs the store for its fallback poll.
            after_commit=lambda notices: after_commit(notices),
        )
        outcomes = _outcome_waiter(store, server, link)
        # Bound late too: the sweeper is built once the state it reports to exists.
        after_commit = _after_commit(wakes, outcomes, link, lambda: sweeper.poke())
        app.state.burrow = ServerState(
            settings=server,
            runtime=settings,
            store=store,
            wakes=wakes,
            outcomes=outcomes,
            held=HeldPolls(server.max_held_polls),
            reads=read_replica.connect(server, settings),
        )
        # BURROW_SERVER_NAMESPACES is a bootstrap default: created if missing; every namespace
        # of the store is served (issue 30).
        await store.ensure_namespaces(server.namespaces)
        app.state.burrow.known = KnownNamespaces(store)
        await app.state.burrow.known.load()
        if link is not None:
            feed = app.state.burrow.ui_changes = ChangeFeed()
            feed.attach(link.listen_for_run_changes(on_change=feed.changed, on_resync=feed.resync))
        sweeper = Sweeper(
            store=store,
            settings=settings,
            interval=server.sweep_interval_seconds,
            health=app.state.burrow.loops.add(LOOP_NAME),
        )
        sweeper.start()
        history = app.state.burrow.metrics_history = MetricsHistory(
            measure=measuring(store, settings),
            namespaces=lambda: sorted(app.state.burrow.known.names),
            interval=server.ui_metrics_interval_seconds,
        )
        history.start()
        try:
            yield
        finally:
            await history.stop()
            await sweeper.stop()
            await outcomes.close()
            await store.close()
            await read_replica.close(app.state.burrow)
            if tap is not None:
                await tap.close()
            if link is not None:
                await link.close()

    app = FastAPI(title="Burrow", lifespan=lifespan, openapi_url=None, docs_url=None)
    api_errors.install(app)
    for module in (
        discovery_routes,
        protocol_spec_routes,
        operator_routes,
        cancellation_routes,
        control_routes,
        activity_routes,
        message_stream_routes,
        workflow_stream_routes,
        external_payload_routes,
        history_export_routes,
        workflow_command_routes,
        query_update_routes,
        worker_lifecycle_routes,
        workflow_task_routes,
        local_activity_routes,
        activity_task_routes,
        worker_session_routes,
        query_task_routes,
        update_validation_routes,
        search_attribute_routes,
        namespace_routes,
        schedule_routes,
    ):
        app.include_router(module.router)
    ui.install(app)

    # Runtime external payload references replaced by their blobs, inside the gate.
    cap = server.request_cap(settings.max_payload_bytes)
    app.add_middleware(ExternalPayloadIngress, max_request_bytes=cap)
    # Token, body cap and version headers, before FastAPI reads a body (gate.py).
    app.add_middleware(RequestGate, settings=server, max_request_bytes=cap)
    return app


class _Server(uvicorn.Server):
    """uvicorn's server, but a graceful stop on SIGTERM or SIGINT ends the process with 0.

    uvicorn raises the signal it caught again once it has shut down, so the process would end
    with 143 (or 130 for SIGINT), which process managers read as a crash.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            # The shutdown completed: nothing to raise again.
            self._captured_signals.clear()


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
    await _Server(config).serve()
    log.info("server stopped", host=server.host, port=server.port)
