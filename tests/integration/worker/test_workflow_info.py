"""`workflow.info()` beyond the ids: parent, retry attempt, timeouts and deadlines (S12, issue 28).

The values come from the run's `WorkflowStarted` event, so a worker that resumes the instance
from its sticky cache and one that replays it cold report the same, in every workflow task.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from burrow import Client, Worker
from burrow.protocol import events as ev
from tests.acceptance.conftest import fast_settings
from tests.apps import info_flows
from tests.support.history import recorded_per_activation, replay_each_activation


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


async def _run_family(client: Client, database_url: str, *, capacity: int) -> dict[str, Any]:
    settings = fast_settings(database_url)
    worker_settings = settings.worker.model_copy(update={"sticky_cache_capacity": capacity})
    settings = settings.model_copy(update={"worker": worker_settings})
    worker = Worker(info_flows.app, settings=settings)
    async with worker:
        handle = await client.start_workflow(
            info_flows.InfoParent.run, task_queue=info_flows.TASK_QUEUE
        )
        result: dict[str, Any] = await handle.result(timeout=30)
    assert (worker.sticky_cache.hits > 0) is (capacity > 0)
    return result


async def test_info_shows_parent_attempt_and_timeouts_warm_and_cold(
    client: Client, database_url: str
) -> None:
    """Temporal's `info().parent` / `attempt`, from WorkflowStarted: same warm and cold (S12)."""
    for capacity in (100, 0):
        result = await _run_family(client, database_url, capacity=capacity)
        parent = result["parent"]
        assert parent["parent"] is None and parent["attempt"] == 1
        assert parent["execution_timeout"] is None and parent["run_deadline"] is None
        first, after_timer = result["child"]
        assert first == after_timer  # read in the run's first task, then in a later one
        assert first["parent"] == {"workflow_id": parent["workflow_id"], "run_id": parent["run_id"]}
        assert first["attempt"] == 2
        assert (first["execution_timeout"], first["run_timeout"]) == (300, 120)
        child = client.get_handle(first["workflow_id"])
        history = await child.history()  # the retry's: the id's newest run
        assert history[0].payload["workflow_run_id"] == first["run_id"]
        started = ev.parse(history[0].event_type, history[0].payload)
        assert isinstance(started, ev.WorkflowStarted)
        assert started.execution_deadline_at is not None and started.run_deadline_at is not None
        assert first["execution_deadline"] == started.execution_deadline_at.isoformat()
        assert first["run_deadline"] == started.run_deadline_at.isoformat()
        # Re-derived from history alone, resumed activation by activation or replayed cold.
        run = (await child.describe()).run
        recorded = recorded_per_activation(history)
        for warm in (True, False):
            assert replay_each_activation(info_flows.app, run, history, warm=warm) == recorded
