"""Postgres going away under a worker is an outage to wait out, never a crash (issue 13)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import asyncpg
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from burrow import App, Client, Settings, Worker, activity, workflow
from burrow.config import WakeSettings
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import flows
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.slow


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


async def _sleep_in_store(store: Store) -> None:
    async with store.transactions.begin() as conn:
        await conn.execute(sa.text("SELECT pg_sleep(30)"))


async def _sleeping_backends(admin: asyncpg.Connection) -> int:
    return int(
        await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'burrow' AND query = 'SELECT pg_sleep(30)'"
        )
    )


async def test_an_admin_shutdown_of_the_connection_is_store_unavailable(
    pg: PrivatePostgres,
) -> None:
    """Issue 13 item 5: a backend ended by the administrator (57P01) is StoreUnavailable.

    Ended mid-statement: one ended while pooled is replaced before use (issue 25 item 10).
    """
    store = Store.connect(pg.url(), pool_size=1)
    admin = await asyncpg.connect(pg.url())
    try:
        sleeping = asyncio.create_task(_sleep_in_store(store))
        await assert_eventually(lambda: _sleeping_backends(admin), message="statement running")
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'burrow'"
        )
        with pytest.raises(store_errors.StoreUnavailable):
            await sleeping
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


# -- work in hand rides out an outage (issue 13 item 4) --------------------------------------------


class OutageGate:
    """Workflow or activity code reaches the gate; Postgres goes down; the code then returns.

    The code blocks on a thread event (not the event loop's clock), so the outage starts after the
    claim and before the completion: the completion is what meets it.
    """

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.down = threading.Event()
        self.runs = 0

    def pass_through(self) -> None:
        self.runs += 1
        self.reached.set()
        self.down.wait(30)

    def outage(self, server: PrivatePostgres, seconds: float) -> None:
        """In a thread: once the gate is reached, stop Postgres, open the gate, start it again."""
        if not self.reached.wait(30):
            return
        server.stop("fast")
        self.down.set()
        time.sleep(seconds)
        server.start()


GATE = OutageGate()


@activity.defn
def gated_activity(value: int) -> int:
    GATE.pass_through()
    return value * 2


@workflow.defn
class GatedDecisionFlow:
    """Completes in its first workflow task, whose completion meets the outage."""

    @workflow.run
    async def run(self, value: int) -> int:
        GATE.pass_through()  # blocks the activation until Postgres is down
        return value + 1


@workflow.defn
class GatedActivityFlow:
    """One activity whose result meets the outage."""

    @workflow.run
    async def run(self, value: int) -> int:
        result: int = await workflow.activity(
            gated_activity, value, start_to_close_timeout=60, retry_policy=workflow.RetryPolicy()
        )
        return result


gated = App(
    task_queue="outage-gated",
    workflows=[GatedDecisionFlow, GatedActivityFlow],
    activities=[gated_activity],
)


def _long_lease(database_url: str) -> Settings:
    """A lease far longer than the outage, so only the retry (not a re-lease) explains success."""
    settings = _settings(database_url)
    worker = settings.worker.model_copy(update={"lease_seconds": 30})
    return settings.model_copy(update={"worker": worker})


@pytest.fixture
def gate() -> Iterator[OutageGate]:
    global GATE
    GATE = OutageGate()
    yield GATE


async def _run_through_outage(
    pg: PrivatePostgres, gate: OutageGate, workflow_type: type, value: int
) -> tuple[object, list[dict[str, object]]]:
    settings = _long_lease(pg.url())
    with capture_logs() as logs:
        async with Worker(gated, settings=settings):
            client = await Client.connect(settings=settings)
            # The outage thread runs before the workflow starts: the gate blocks the event loop,
            # so a thread started from a task on that loop could begin only after the gate's
            # own 30 s wait, when the lease has run out.
            outage = threading.Thread(target=gate.outage, args=(pg, 1.0), daemon=True)
            outage.start()
            try:
                handle = await client.start_workflow(
                    workflow_type, value, task_queue="outage-gated"
                )
                result = await handle.result(timeout=60)
            finally:
                await asyncio.to_thread(outage.join, 60)
                await client.close()
    return result, logs


async def test_a_workflow_task_completion_is_retried_through_an_outage(
    pg: PrivatePostgres, gate: OutageGate
) -> None:
    """Issue 13 item 4: a completion that met the outage lands once Postgres is back.

    The decision ran once: its completion was not dropped and left to wait out its lease.
    """
    result, logs = await _run_through_outage(pg, gate, GatedDecisionFlow, 41)
    assert result == 42
    assert gate.runs == 1
    retried = [e for e in logs if e["event"] == "store_unavailable_retrying"]
    assert {e["what"] for e in retried} == {"complete_workflow_task"}
    assert [e for e in logs if e["event"] == "workflow_task_store_unavailable"] == []


async def test_an_activity_result_is_retried_through_an_outage(
    pg: PrivatePostgres, gate: OutageGate
) -> None:
    """Issue 13 item 4: an activity result that met the outage is reported, not re-run."""
    result, logs = await _run_through_outage(pg, gate, GatedActivityFlow, 21)
    assert result == 42
    assert gate.runs == 1
    retried = [e for e in logs if e["event"] == "store_unavailable_retrying"]
    # Written alone, or with the workflow task it wakes when the run is warm (worker/completion.py).
    completions = {"complete_activity_task", "complete_activity_with_workflow_task"}
    assert completions & {e["what"] for e in retried}
    assert [e for e in logs if e["event"] == "activity_task_store_unavailable"] == []
