"""A session whose holder is alive but idle between steps stays with that holder (W1, W5)."""

from __future__ import annotations

import uuid

import pytest

from burrow import Client, Settings, Worker
from burrow.config import WakeSettings
from burrow.store import Store
from burrow.store import schema as s
from tests.acceptance.conftest import fast_settings
from tests.apps import session_flows
from tests.support.store import rows

pytestmark = pytest.mark.slow

# The workflow sleeps twice the session's lease between steps; the worker heartbeats every
# second (fast_settings), well within the lease.
LEASE_SECONDS = 3
PAUSE_SECONDS = 2 * LEASE_SECONDS


def _settings(database_url: str) -> Settings:
    """Fast settings with the GPU capability, without wakes (no broker involved)."""
    base = fast_settings(database_url)
    worker = base.worker.model_copy(update={"capabilities": (session_flows.GPU,)})
    return base.model_copy(update={"wakes": WakeSettings(enabled=False), "worker": worker})


@pytest.mark.parametrize("reacquire", [True, False], ids=["reacquirable", "pinned"])
async def test_w1_w5_an_idle_session_outlives_its_lease_while_the_holder_heartbeats(
    database_url: str, store: Store, reacquire: bool
) -> None:
    """W1: between steps no attempt runs, yet the live holder keeps the session: it is never
    expired, failed or reacquired, and every step runs on the one worker."""
    settings = _settings(database_url)
    job = uuid.uuid4().hex[:8]
    async with Worker(session_flows.app, settings=settings, worker_id="gpu-1"):
        client = await Client.connect(settings=settings)
        try:
            handle = await client.start_workflow(
                session_flows.IdleGpuPipeline,
                job,
                PAUSE_SECONDS,
                LEASE_SECONDS,
                reacquire,
                False,
                id=f"idle-{job}",
                task_queue=session_flows.TASK_QUEUE,
            )
            results = await handle.result(timeout=90)
        finally:
            await client.close()
        # Read while the holder still runs: its shutdown hands the session over (W5).
        [session] = [
            r for r in await rows(store, s.worker_sessions) if r["session_id"] == f"idle-{job}"
        ]
    # One process, reusing what the first step loaded (uses 1, 2, 3).
    assert [(step, uses) for _, step, uses in results] == [(1, 1), (2, 2), (3, 3)]
    assert len({pid for pid, _, _ in results}) == 1
    assert (session["state"], session["owner_worker_id"]) == ("active", "gpu-1")
    assert (session["reacquire_count"], session["failure_reason"]) == (0, None)
