"""Run output streams through the real SDK 2.12.0 against `burrow server` (PROTOCOL.md 7, 17).

An SDK workflow publishes with `ctx.append_workflow_stream` / `ctx.close_workflow_stream` on its
ordinary `Worker`; a `Client` subscribed before the run opened the stream reads every item and
stops at the close.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Generator
from typing import Any

import pytest
from durable_workflow import Client, Worker, workflow
from durable_workflow.client import WorkflowStreamAppendItem

from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import QUEUE

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)


@workflow.defn(name="token-publisher")
class TokenPublisher:
    """Publishes its words one append each to its `tokens` stream, then closes it."""

    def run(self, ctx: Any, words: list[str]) -> Generator[Any, Any, Any]:
        for word in words:
            yield ctx.append_workflow_stream("tokens", [WorkflowStreamAppendItem(payload=word)])
        yield ctx.close_workflow_stream("tokens")
        return len(words)


async def test_sdk_workflow_publishes_to_a_subscribed_client(client: Client) -> None:
    """PROTOCOL.md 7 `record_side_effect.workflow_stream`, 17 `iter_workflow_stream`: a
    subscriber held on the stream before the worker runs receives the workflow's items in order
    and ends at its close."""
    workflow_id = f"publisher-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="token-publisher",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=[["one", "two", "three"]],
    )
    run_id = handle.run_id or ""

    async def read() -> list[Any]:
        items = client.iter_workflow_stream(workflow_id, run_id, "tokens", wait_seconds=5)
        return [(item.offset, item.payload) async for item in items]

    reading = asyncio.create_task(read())
    worker = Worker(client, task_queue=QUEUE, workflows=[TokenPublisher], poll_timeout=2)
    await worker.run_until(workflow_id=workflow_id, timeout=30.0)
    assert await client.get_result(handle) == 3
    assert await asyncio.wait_for(reading, 10) == [(0, "one"), (1, "two"), (2, "three")]
