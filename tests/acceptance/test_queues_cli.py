"""`burrow queues` shows durable backlog and the wake queue side by side (M8, M9)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import pytest

from burrow import Client, Settings
from burrow.config import WakeSettings
from tests.apps import flows
from tests.support import spawn

pytestmark = pytest.mark.slow


async def test_queues_reports_ready_depth_age_and_wake_queue(database_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=database_url, wakes=WakeSettings(prefix=prefix))
    client = await Client.connect(settings=settings)
    try:
        for i in range(3):
            await client.start_workflow(flows.OrderFlow, "x", id=f"q-{i}", task_queue="nobody-home")
    finally:
        await client.close()
    env = {**os.environ, "BURROW_DATABASE_URL": database_url, "BURROW_AMQP_PREFIX": prefix}
    done = await asyncio.to_thread(
        spawn.run,
        [sys.executable, "-m", "burrow", "queues", "--json"],
        env=env,
        timeout=60,
        check=True,
    )
    [row] = [r for r in json.loads(done.stdout) if r["queue"] == "nobody-home"]
    assert row["kind"] == "workflow"
    assert row["ready"] == 3 and row["leased"] == 0 and row["live_workers"] == 0
    assert row["oldest_ready_seconds"] >= 0
    assert row["wake_queue"] == f"{prefix}.wake.default.default.nobody-home.workflow"
    # Nobody declared that wake queue: the wakes had nowhere to go, which the report shows.
    assert row["wake_messages"] is None and row["wake_consumers"] is None
