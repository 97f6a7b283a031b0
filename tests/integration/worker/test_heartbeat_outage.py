"""Activity heartbeats during a Postgres restart: ridden out within the lease (issue 25 item 3)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from burrow import App, Client, Settings, Worker, activity, workflow
from burrow.config import WakeSettings
from tests.acceptance.conftest import fast_settings
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.slow

QUEUE = "heartbeat-outage"


class Restart:
    """Activity code beats; Postgres is stopped, then started again; the code sees both."""

    def __init__(self) -> None:
        self.beating = threading.Event()
        self.down = threading.Event()
        self.up = threading.Event()
        self.beats_while_down = 0
        self.attempts = 0

    def run(self, server: PrivatePostgres, seconds: float) -> None:
        """In a thread: once the activity beats, stop Postgres for `seconds`, then start it."""
        if not self.beating.wait(30):
            return
        server.stop("fast")
        self.down.set()
        time.sleep(seconds)
        server.start()
        self.up.set()


RESTART = Restart()


@activity.defn
async def beat_through_restart(value: int) -> int:
    """Beats with `aheartbeat()` until Postgres is back, counting the beats made while down."""
    RESTART.attempts += 1
    ctx = activity.context()
    beat = 0
    while not RESTART.up.is_set():
        down = RESTART.down.is_set()
        await ctx.aheartbeat(beat)
        beat += 1
        RESTART.beats_while_down += down
        RESTART.beating.set()
        await asyncio.sleep(0.02)  # pace the beats; the outage thread decides when this ends
    return value * 2


@workflow.defn
class BeatingFlow:
    """One activity with a single attempt: any error raised into it fails the run."""

    @workflow.run
    async def run(self, value: int) -> int:
        result: int = await workflow.activity(
            beat_through_restart,
            value,
            start_to_close_timeout=60,
            retry_policy=workflow.RetryPolicy(max_attempts=1),
        )
        return result


beating = App(task_queue=QUEUE, workflows=[BeatingFlow], activities=[beat_through_restart])


def _long_lease(database_url: str) -> Settings:
    """No broker, and a lease far longer than the outage: it holds throughout."""
    settings = fast_settings(database_url).model_copy(update={"wakes": WakeSettings(enabled=False)})
    worker = settings.worker.model_copy(update={"lease_seconds": 30})
    return settings.model_copy(update={"worker": worker})


@pytest.fixture
def restart() -> Iterator[Restart]:
    global RESTART
    RESTART = Restart()
    yield RESTART


async def test_aheartbeat_during_a_postgres_restart_does_not_raise_into_the_activity(
    pg: PrivatePostgres, restart: Restart
) -> None:
    """Issue 25 item 3 (W7): `aheartbeat()` rides out a restart within the lease.

    The attempt (its only one) beats while Postgres is down, sees no StoreUnavailable, and its
    result lands once Postgres is back.
    """
    settings = _long_lease(pg.url())
    with capture_logs() as logs:
        async with Worker(beating, settings=settings):
            client = await Client.connect(settings=settings)
            try:
                handle = await client.start_workflow(BeatingFlow.run, 21, task_queue=QUEUE)
                outage = asyncio.create_task(asyncio.to_thread(restart.run, pg, 1.0))
                result = await handle.result(timeout=60)
                await outage
            finally:
                await client.close()
    assert result == 42
    assert restart.attempts == 1
    assert restart.beats_while_down >= 1
    assert [e for e in logs if e["event"] == "activity_failed"] == []
    assert any(e["event"] == "activity_heartbeat_unavailable" for e in logs)
