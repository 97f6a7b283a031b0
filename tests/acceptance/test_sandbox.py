"""D1: a real worker runs workflow code that reads the wall clock; the task fails, history stays."""

from __future__ import annotations

from typing import Any

import pytest

from burrow import Client, Worker
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import sandbox_flows

pytestmark = pytest.mark.slow


async def _task_failure(handle: Any) -> dict[str, Any]:
    async def failed() -> dict[str, Any] | None:
        task = (await handle.describe()).workflow_task
        return None if task is None else task.last_failure

    return await assert_eventually(failed, message="workflow task failure recorded")


async def test_datetime_now_in_workflow_code_fails_the_task_and_keeps_the_history(
    client: Client, database_url: str
) -> None:
    """D1: datetime.now() after a durable timer raises WorkflowSandboxError in a real worker.

    The workflow task fails (and retries), never the run: the timer already in history stays.
    """
    async with Worker(sandbox_flows.app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            sandbox_flows.WallClockFlow, id="wall-clock-1", task_queue=sandbox_flows.TASK_QUEUE
        )
        failure = await _task_failure(handle)
        description = await handle.describe()
    assert failure["exception_type"] == "WorkflowSandboxError"
    assert "datetime.datetime.now()" in failure["message"]
    assert "workflow.now()" in failure["message"]
    assert description.run.status == "running"
    events = [e.event_type for e in await handle.history()]
    assert events[:3] == ["WorkflowStarted", "TimerScheduled", "TimerFired"]
    assert "WorkflowFailed" not in events and "WorkflowCompleted" not in events
