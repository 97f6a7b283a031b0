"""The scale benches' seeding (bench/store_seed.py) makes a store the engine accepts as its own.

A few real runs are cloned at a tiny scale, as bench/store_scale.py and bench/timer_scale.py do
by the million; then the copies are read and driven through the public client and a real
worker process, so a schema change the cloning misses fails here rather than in a bench.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench import store_seed
from bench.app import SIGNAL
from burrow import Client
from burrow.store.engine import async_url
from tests.acceptance.conftest import WorkerFactory

COPIES = 3


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    instance = create_async_engine(async_url(database_url), poolclass=NullPool)
    yield instance
    await instance.dispose()


async def test_cloned_runs_are_listed_described_and_driven_to_completion(
    client: Client, engine: AsyncEngine, worker_process: WorkerFactory
) -> None:
    """D1, D3, D4: cloned closed runs list and describe with their results, memo and search
    attribute; cloned open runs complete when signalled or when their cloned timer comes due."""
    worker_process("seed-w0", "bench.app:app")
    templates = await store_seed.run_templates(client, engine, tag="seed")
    await store_seed.clone_runs(engine, templates.closed, COPIES, spread_days=1.0)
    await store_seed.clone_runs(engine, templates.open, COPIES)
    soon = store_seed.TimerSpread(first=datetime.now(UTC) + timedelta(seconds=1), step_seconds=0.2)
    await store_seed.clone_runs(
        engine, templates.sleeping, COPIES, first_copy=COPIES + 1, timers=soon
    )
    await store_seed.analyze(engine)

    counted = await client.count_workflows(query="ExecutionStatus = 'Completed'")
    assert counted.count == 3 * (COPIES + 1)
    listed = await client.list_workflows(query="CustomerId = 'c-one-activity'")
    assert len(listed) == COPIES + 1
    copy = client.get_handle(f"seed-one-activity-{COPIES}")
    assert await copy.result(timeout=10) == 2
    described = await copy.describe()
    assert described.memo == {"seeded_from": "one-activity"}
    assert described.search_attributes == {store_seed.SEARCH_ATTRIBUTE: "c-one-activity"}
    assert described.run.created_at < datetime.now(UTC) - timedelta(hours=7)

    waiting = client.get_handle("seed-waiting-2")
    await waiting.signal(SIGNAL)
    assert await waiting.result(timeout=30) == 1
    for number in range(COPIES + 1, 2 * COPIES + 1):
        napped = client.get_handle(f"seed-sleeping-{number}")
        assert await napped.result(timeout=30) == store_seed.OPEN_NAP_SECONDS
    sleeping_copy = await client.get_handle("seed-sleeping-1").describe()
    assert sleeping_copy.run.status == "running"
