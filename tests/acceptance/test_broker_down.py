"""The broker being down never stops progress: durable polling carries on (C4, M5)."""

from __future__ import annotations

import pytest

from burrow import Client, Worker
from tests.acceptance.conftest import fast_settings
from tests.apps import flows

pytestmark = pytest.mark.slow

UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/"


async def test_workflows_complete_when_rabbitmq_is_unreachable(database_url: str) -> None:
    settings = fast_settings(database_url).model_copy(update={"amqp_url": UNREACHABLE})
    client = await Client.connect(settings=settings)
    try:
        async with Worker(flows.app, settings=settings) as worker:
            assert worker.wakes is not None and not worker.wakes.healthy
            handles = [
                await client.start_workflow(
                    flows.CountdownFlow, 1, id=f"down-{i}", task_queue=flows.TASK_QUEUE
                )
                for i in range(5)
            ]
            for handle in handles:
                assert await handle.result(timeout=30) == "liftoff"
            assert not worker.wakes.healthy  # every one of them came through durable polling
    finally:
        await client.close()
