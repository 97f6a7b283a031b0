"""`ctx.wait_condition` through `burrow server`, judged by the real `durable-workflow` 2.12.0 SDK.

The SDK's `open_condition_wait` becomes ConditionWaitOpened and a durable timer; a signal that
leaves the predicate false re-opens the wait, one that makes it true gets ConditionWaitSatisfied,
and a timer that fires first gets ConditionWaitTimedOut (PROTOCOL.md 7, 8.2). Each history is
replayed by the SDK's own `replay()`, with the worker's sticky cache off and on (S4-S6).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from durable_workflow import Client, Worker
from durable_workflow.workflow import CompleteWorkflow, replay

from burrow.testing import assert_eventually
from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import QUEUE, wait_for_event
from tests.apps.sdk_flows import ACTIVITIES, WORKFLOWS, SdkGateWorkflow

pytestmark = [pytest.mark.slow]
sdk_only = pytest.mark.sticky_cache_set_by_test  # SDK workers: no Burrow worker's cache to set
server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)
CACHES = pytest.mark.parametrize("cache", [0, 10], ids=["cold", "warm"])


def sdk_worker(client: Client, cache: int) -> Worker:
    options: dict[str, Any] = {"sticky_cache_capacity": cache} if cache else {}
    return Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        poll_timeout=2,
        **options,
    )


async def events_of(client: Client, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    return list((await client.get_history(workflow_id, run_id))["events"])


def replayed_result(events: list[dict[str, Any]], start: list[Any], workflow_id: str) -> Any:
    """What the SDK's own replay of the recorded history returns."""
    replayed = replay(SdkGateWorkflow, events, start, workflow_id=workflow_id)
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow), replayed.commands
    return completion.result


async def reopened(client: Client, workflow_id: str, run_id: str) -> None:
    """Until the wait was opened a second time (the SDK found the predicate still false)."""

    async def twice() -> bool:
        kinds = [e["event_type"] for e in await events_of(client, workflow_id, run_id)]
        return kinds.count("ConditionWaitOpened") >= 2

    await assert_eventually(twice, timeout=30, message="the wait was not re-opened")


@sdk_only
@CACHES
async def test_condition_waits_released_by_a_signal_and_by_their_timeout(
    client: Client, cache: int
) -> None:
    """PROTOCOL 7, 8.2. Released: the first bump leaves the predicate false (the SDK re-opens
    the wait: a second ConditionWaitOpened), the second makes it true (ConditionWaitSatisfied
    naming the signal, before WorkflowCompleted). Timed out: with no signal the 1 s timeout's
    timer fires, ConditionWaitTimedOut wakes the run and `wait_condition` returns False. The
    SDK's own replay of each history returns the result the run returned."""
    released, start = f"gate-{uuid.uuid4().hex}", [2, 3600]
    handle = await client.start_workflow(
        workflow_type="sdk-gate", workflow_id=released, task_queue=QUEUE, input=start
    )
    run_id = handle.run_id or ""
    worker = sdk_worker(client, cache)
    running = asyncio.create_task(worker.run_until(workflow_id=released, timeout=60.0))
    await wait_for_event(client, released, run_id, "ConditionWaitOpened")
    await client.signal_workflow(released, "bump")
    await reopened(client, released, run_id)
    await client.signal_workflow(released, "bump")
    await running
    if cache:  # the re-open and the release resumed from the worker's cache
        assert worker.sticky_cache_metrics()["hit"] >= 2

    result = await client.get_result(handle)
    assert result == {"opened": True, "bumps": 2}
    events = await events_of(client, released, run_id)
    kinds = [e["event_type"] for e in events]
    assert kinds.count("ConditionWaitOpened") == 2
    [satisfied] = [e["payload"] for e in events if e["event_type"] == "ConditionWaitSatisfied"]
    assert (satisfied["sequence"], satisfied["signal_name"]) == (2, "bump")
    assert kinds.index("ConditionWaitSatisfied") < kinds.index("WorkflowCompleted")
    assert replayed_result(events, start, released) == result

    timed_out, start = f"gate-{uuid.uuid4().hex}", [1, 1]
    handle = await client.start_workflow(
        workflow_type="sdk-gate", workflow_id=timed_out, task_queue=QUEUE, input=start
    )
    await sdk_worker(client, cache).run_until(workflow_id=timed_out, timeout=60.0)

    result = await client.get_result(handle)
    assert result == {"opened": False, "bumps": 0}
    events = await events_of(client, timed_out, handle.run_id or "")
    kinds = [e["event_type"] for e in events]
    assert "ConditionWaitTimedOut" in kinds and "ConditionWaitSatisfied" not in kinds
    assert replayed_result(events, start, timed_out) == result
