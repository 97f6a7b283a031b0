"""A worker running session attempts: registration and lost session authority (W1, W3, W7)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from structlog.testing import capture_logs

from burrow import Client, Settings, Worker
from burrow.config import WakeSettings
from burrow.protocol import events
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import session_flows
from tests.support.store import execute, rows

pytestmark = pytest.mark.slow


def _settings(database_url: str) -> Settings:
    """Fast settings with the GPU capability, without wakes (no broker involved)."""
    base = fast_settings(database_url)
    worker = base.worker.model_copy(
        update={"capabilities": (session_flows.GPU,), "max_concurrent_worker_sessions": 2}
    )
    return base.model_copy(update={"wakes": WakeSettings(enabled=False), "worker": worker})


async def test_w3_a_worker_registers_its_capabilities_and_session_limit(
    database_url: str, store: Store
) -> None:
    async with Worker(session_flows.app, settings=_settings(database_url), worker_id="gpu-1"):
        [registration] = await rows(store, s.worker_registrations)
    assert registration["capabilities"] == [session_flows.GPU]
    assert registration["max_concurrent_worker_sessions"] == 2


async def test_w1_an_attempt_whose_session_moved_to_another_worker_stops_and_reports_nothing(
    database_url: str, store: Store
) -> None:
    """W1, W7: the heartbeat says the session is another's; the attempt ends without an outcome.

    Its own lease then lapses and the attempt is retried, here by the same worker once the
    session (whose new holder never registered) is found orphaned and reacquired.
    """
    settings = _settings(database_url)
    job = uuid.uuid4().hex[:8]
    with capture_logs() as logs:
        async with Worker(session_flows.app, settings=settings, worker_id="gpu-1"):
            client = await Client.connect(settings=settings)
            try:
                handle = await client.start_workflow(
                    session_flows.GpuPipeline,
                    job,
                    1,
                    id=f"gpu-{job}",
                    task_queue=session_flows.TASK_QUEUE,
                )
                run_id = (await handle.describe()).run.run_id

                async def first_step_leased() -> bool:
                    steps = await rows(store, s.activity_tasks, run_id)
                    return any(r["state"] == "leased" for r in steps)

                await assert_eventually(first_step_leased, timeout=30)
                await execute(
                    store,
                    "UPDATE worker_sessions SET owner_worker_id = 'gpu-elsewhere'"
                    " WHERE session_id = :sid",
                    sid=f"gpu-{job}",
                )

                async def authority_lost() -> list[dict[str, Any]]:
                    return [e for e in logs if e["event"] == "activity_lease_authority_lost"]

                [lost] = await assert_eventually(authority_lost, timeout=30)
                assert lost["reason"] == "session_owner_mismatch"
                assert lost["run_id"] == run_id and lost["worker_id"] == "gpu-1"
                results = await handle.result(timeout=60)
            finally:
                await client.close()
    assert [step for _, step, _ in results] == [1, 2, 3]
    history = await store.read_history(run_id=run_id)
    first_step = [
        e.event
        for e in history
        if isinstance(e.event, events.ActivityCompleted) and e.event.sequence == 1
    ]
    assert [e.attempt_number for e in first_step] == [2]
