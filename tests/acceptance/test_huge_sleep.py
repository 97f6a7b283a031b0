"""A duration past the maximum fails its workflow task visibly (issue 25 items 1 and 5).

Before the bound, `workflow.sleep(1e12)` gave a timer the store could not date: the commit
raised in the worker, nothing was recorded, and the task came back only as a lease expiry.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow import App, Client, Worker, workflow
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings

pytestmark = pytest.mark.slow
QUEUE = "hostile-durations"


@workflow.defn(name="SleepsForAges")
class SleepsForAges:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(1e12)


async def test_a_sleep_past_the_maximum_fails_the_workflow_task_with_its_error(
    client: Client, database_url: str
) -> None:
    """Issue 25 item 5: describe() names the ValueError at once; the run stays open to a fix."""
    app = App(task_queue=QUEUE, workflows=[SleepsForAges])
    async with Worker(app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(SleepsForAges, id="ages-1", task_queue=QUEUE)

        async def failure() -> dict[str, Any] | None:
            task = (await handle.describe()).workflow_task
            return None if task is None else task.last_failure

        failed = await assert_eventually(failure, message="workflow task failure recorded")
    assert failed["exception_type"] == "ValueError", failed
    assert "at most 3153600000 seconds (100 years)" in failed["message"]
    assert (await handle.describe()).run.status == "running"
