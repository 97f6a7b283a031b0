"""The `durable-workflow` SDK's timeouts against `burrow server` (issue 28, SPEC M4b).

The SDK sends `execution_timeout_seconds` / `run_timeout_seconds` on every start; the server's
sweeper closes the run at its deadline and `get_result` raises the SDK's `WorkflowTimedOut`.
"""

from __future__ import annotations

import uuid

import pytest
from durable_workflow import Client
from durable_workflow.errors import WorkflowTimedOut

from tests.acceptance.test_sdk_against_server import QUEUE, client, server_url

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]
__all__ = ["client", "server_url"]  # the fixtures this module uses


async def test_sdk_get_result_raises_workflow_timed_out(client: Client) -> None:
    """Issue 28: a run past its run timeout (no worker ever took it) is WorkflowTimedOut."""
    workflow_id = f"unserved-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sleeper",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=[],
        execution_timeout_seconds=60,
        run_timeout_seconds=1,
    )

    with pytest.raises(WorkflowTimedOut):
        await client.get_result(handle, timeout=60.0)

    described = await client.describe_workflow(workflow_id)
    assert described.status == "failed"
