"""The default retry policy end to end: client -> store -> real worker process (issue 13 item 6).

Under the old default (3 attempts) this activity failed the run; the default now retries it
until it succeeds. The real 1, 2, 4 and 8 s backoffs make the test take about 15 s.
"""

from __future__ import annotations

import pytest

from burrow import Client
from tests.acceptance.conftest import WorkerFactory
from tests.apps import flows
from tests.support.history import assert_well_formed

pytestmark = pytest.mark.slow


async def test_activity_failing_four_times_succeeds_under_the_default_policy(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 13 item 6, A1, A2: four failures retried 1, 2, 4, 8 s apart, then the result."""
    worker_process("default-retry")
    handle = await client.start_workflow(
        flows.PersistentFlow, 4, id="persistent-1", task_queue=flows.TASK_QUEUE
    )

    assert await handle.result(timeout=60) == 5

    history = await handle.history()
    assert_well_formed(history)
    retries = [e.payload for e in history if e.event_type == "ActivityRetryScheduled"]
    assert [p["retry_after_attempt"] for p in retries] == [1, 2, 3, 4]
    assert [p["retry_backoff_seconds"] for p in retries] == [1, 2, 4, 8]
    assert {p["max_attempts"] for p in retries} == {0}  # unlimited
    assert {p["message"] for p in retries} == {
        f"attempt {n} failed on purpose" for n in range(1, 5)
    }
    [scheduled] = [e.payload for e in history if e.event_type == "ActivityScheduled"]
    assert scheduled["activity"]["retry_policy"]["maximum_interval_seconds"] == 100.0
    assert [e.event_type for e in history].count("ActivityFailed") == 0
