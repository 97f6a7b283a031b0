"""Standalone activities through the real SDK 2.12.0 against `burrow server` (PROTOCOL.md 17).

The SDK's `Client.start_activity` starts them, its ordinary `Worker` runs them from the queue
(no workflow involved), and `StandaloneActivityHandle.result()` / `list_activities` read them.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from durable_workflow import Client, Worker
from durable_workflow.errors import WorkflowFailed

from burrow.store import Store
from burrow.store import schema as s
from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import QUEUE
from tests.apps.sdk_flows import ACTIVITIES

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)


async def test_sdk_standalone_activity_runs_on_an_sdk_worker(client: Client) -> None:
    """PROTOCOL.md 17 `start_activity`, `get_activity_result`, `describe_activity`,
    `list_activities`: an SDK worker runs a started activity; its result and a final failure
    reach the SDK's handle."""
    # The one that fails is queued first: the worker runs it before the one it waits for.
    doomed = await client.start_activity(
        activity_type="doomed", task_queue=QUEUE, input=[], retry_policy={"max_attempts": 1}
    )
    greeted = await client.start_activity(
        activity_type="greet",
        task_queue=QUEUE,
        activity_id=f"greet-{uuid.uuid4().hex}",
        input=["ada"],
        business_key="order-1",
    )
    # An activity worker only: no workflow polls for it to hold open.
    activity_worker = Worker(client, task_queue=QUEUE, activities=ACTIVITIES, poll_timeout=2)
    await activity_worker.run_until(workflow_id=greeted.activity_id, timeout=30.0)
    assert await greeted.result(poll_interval=0.05, timeout=5.0) == "hello, ada"
    described = await greeted.describe()
    assert (described.status, described.activity_status) == ("completed", "completed")
    assert (described.business_key, described.attempt_count) == ("order-1", 1)
    assert doomed.activity_id
    with pytest.raises(WorkflowFailed):
        await doomed.result(poll_interval=0.05, timeout=5.0)

    listed = await client.list_activities(status="completed")
    assert [a.activity_id for a in listed.activities] == [greeted.activity_id]


async def test_sdk_large_payloads_travel_as_external_payload_references(
    client: Client, database_url: str
) -> None:
    """PROTOCOL.md 10 (runtime external payloads): the SDK negotiates the advertised transport,
    uploads an input and a result above the threshold and sends references; the server serves
    them as the blobs, so the activity sees its whole input and the caller its whole result."""
    name = "n" * (300 * 1024)
    handle = await client.start_activity(
        activity_type="greet", task_queue=QUEUE, input=[name], retry_policy={"max_attempts": 1}
    )
    activity_worker = Worker(client, task_queue=QUEUE, activities=ACTIVITIES, poll_timeout=2)
    await activity_worker.run_until(workflow_id=handle.activity_id, timeout=30.0)
    assert await handle.result(poll_interval=0.05, timeout=5.0) == f"hello, {name}"
    store = Store.connect(database_url)
    try:
        async with store.engine.begin() as conn:
            count = sa.select(sa.func.count()).select_from(s.external_payloads)
            uploaded = (await conn.execute(count)).scalar_one()
    finally:
        await store.close()
    assert uploaded == 2  # the input, and the result
