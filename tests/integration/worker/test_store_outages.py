"""Postgres going away under a worker is an outage to wait out, never a crash (issue 13)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import pytest
from structlog.testing import capture_logs

from burrow import Settings, Worker
from burrow.config import WakeSettings
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import flows
from tests.support.private_postgres import PrivatePostgres, private_postgres

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A private server this module stops and restarts (the shared one is never touched)."""
    with private_postgres() as instance:
        yield instance


@pytest.fixture
def pg(server: PrivatePostgres) -> PrivatePostgres:
    """The private server, running at the start of each test."""
    if not server.is_running():
        server.start()
    return server


def _settings(database_url: str) -> Settings:
    """Fast settings on the private server, without wakes (no broker involved)."""
    return fast_settings(database_url).model_copy(update={"wakes": WakeSettings(enabled=False)})


async def _ping(store: Store) -> None:
    with pytest.raises(store_errors.NotFound):
        await store.get_run(namespace="default", workflow_id="no-such-run")


async def test_a_server_shutting_down_is_store_unavailable(pg: PrivatePostgres) -> None:
    """Issue 13 item 5: "the database system is shutting down" (57P03) is StoreUnavailable."""
    held = await asyncpg.connect(pg.url())  # a smart shutdown waits for this client
    store = Store.connect(pg.url(), pool_size=1)
    try:
        pg.stop("smart", wait=False)
        with pytest.raises(store_errors.StoreUnavailable, match="shutting down"):
            await store.get_run(namespace="default", workflow_id="any")
    finally:
        await held.close()
        await store.close()
        await asyncio.to_thread(pg.ensure_stopped)


async def test_an_admin_shutdown_of_the_connection_is_store_unavailable(
    pg: PrivatePostgres,
) -> None:
    """Issue 13 item 5: a backend ended by the administrator (57P01) is StoreUnavailable."""
    store = Store.connect(pg.url(), pool_size=1)
    admin = await asyncpg.connect(pg.url())
    try:
        await _ping(store)
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'burrow'"
        )
        with pytest.raises(store_errors.StoreUnavailable):
            await store.get_run(namespace="default", workflow_id="any")
        await _ping(store)  # the pool reconnects on the next call
    finally:
        await admin.close()
        await store.close()


async def test_a_connection_refused_is_store_unavailable(pg: PrivatePostgres) -> None:
    """Issue 13 item 5: a stopped server (connection refused) is StoreUnavailable."""
    pg.stop("fast")
    store = Store.connect(pg.url(), pool_size=1)
    try:
        with pytest.raises(store_errors.StoreUnavailable, match="unavailable"):
            await store.get_run(namespace="default", workflow_id="any")
    finally:
        await store.close()


async def test_worker_loops_log_a_restart_as_store_unavailable_not_a_crash(
    pg: PrivatePostgres,
) -> None:
    """Issue 13 item 5: a restart is logged as store_unavailable, never worker_loop_crashed."""
    with capture_logs() as logs:
        async with Worker(flows.app, settings=_settings(pg.url())):
            await asyncio.sleep(0.3)
            await asyncio.to_thread(pg.stop, "fast")

            async def noticed() -> bool:
                return any(e["event"] == "store_unavailable" for e in logs)

            await assert_eventually(noticed, timeout=10)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(pg.start)
            await asyncio.sleep(0.5)
    crashed = [e for e in logs if e["event"] == "worker_loop_crashed"]
    assert crashed == []
