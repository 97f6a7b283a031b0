"""`ctx.select` through `burrow server`, judged by the real `durable-workflow` 2.12.0 SDK.

The SDK's select group arrives as steps with `parallel_group_mode: "select"`; the server records
the group, appends SelectionResolved once the first member closes, and records the loser's
`cancel_selection_operation` as SelectionOperationCancelled after cancelling its timer
(PROTOCOL.md 7, 8.2). The history is replayed by the SDK's own `replay()`, with the worker's
sticky cache off and on (S4-S6).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from durable_workflow import Client, Worker
from durable_workflow.workflow import CompleteWorkflow, replay

from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import QUEUE
from tests.apps.sdk_flows import ACTIVITIES, WORKFLOWS, SdkRaceWorkflow

pytestmark = [pytest.mark.slow]
sdk_only = pytest.mark.sticky_cache_set_by_test  # SDK workers: no Burrow worker's cache to set
server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)


@sdk_only
@pytest.mark.parametrize("cache", [0, 10], ids=["cold", "warm"])
async def test_the_first_member_to_close_wins_and_the_loser_is_cancelled(
    client: Client, cache: int
) -> None:
    """PROTOCOL 7, 8.2: the activity member closes first and wins (SelectionResolved names it,
    its execution id and its ActivityCompleted); the timer member is cancelled (TimerCancelled,
    SelectionOperationCancelled); the SDK's replay returns the same result."""
    workflow_id = f"race-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-race", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    options: dict[str, Any] = {"sticky_cache_capacity": cache} if cache else {}
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        poll_timeout=2,
        **options,
    )
    await worker.run_until(workflow_id=workflow_id, timeout=30.0)

    result = await client.get_result(handle)
    assert result == {"winner": "greeting", "value": "hello, ada"}
    events = list((await client.get_history(workflow_id, handle.run_id or ""))["events"])
    by_type = {e["event_type"]: e["payload"] for e in events}
    resolved = by_type["SelectionResolved"]
    assert (resolved["member_key"], resolved["outcome"]) == ("greeting", "completed")
    assert resolved["operation_identity"] == by_type["ActivityScheduled"]["activity_execution_id"]
    assert resolved["resolution_event_type"] == "ActivityCompleted"
    assert by_type["SelectionOperationCancelled"]["member_key"] == "deadline"
    assert "TimerCancelled" in by_type and "TimerFired" not in by_type
    replayed = replay(SdkRaceWorkflow, events, ["ada"], workflow_id=workflow_id)
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow), replayed.commands
    assert completion.result == result
