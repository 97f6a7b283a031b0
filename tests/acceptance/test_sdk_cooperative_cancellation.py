"""Cooperative cancellation with the real SDK 2.12.0 against `burrow server` (PROTOCOL.md 6.5).

`Client.request_workflow_cancellation` records the request; the SDK worker (opted into
`cooperative_cancellation`) names the call its workflow waits in, the server delivers the
cancellation there, the workflow's cleanup step runs and the run closes as cancelled. The
history the server kept replays through the SDK's own `replay()`.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from durable_workflow import Client, Worker
from durable_workflow.workflow import FailWorkflow, replay

from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import wait_for_event
from tests.apps.sdk_cancel_flows import ACTIVITIES, WORKFLOWS, ReserveThenHold, ReserveThenWait

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]
QUEUE = "cancel-workers"
server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)


def cooperative_worker(client: Client, *, sticky: bool) -> Worker:
    options: dict[str, Any] = {"sticky_cache_capacity": 10} if sticky else {}
    return Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        poll_timeout=2,
        capabilities=["cooperative_cancellation"],
        **options,
    )


async def history_of(client: Client, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    return list((await client.get_history(workflow_id, run_id))["events"])


async def cancel_with_cleanup(client: Client, *, sticky: bool) -> None:
    workflow_id = f"coop-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="reserve-then-wait", workflow_id=workflow_id, task_queue=QUEUE, input=["o-1"]
    )
    run_id = handle.run_id or ""
    running = asyncio.create_task(
        cooperative_worker(client, sticky=sticky).run_until(workflow_id=workflow_id, timeout=30.0)
    )
    await wait_for_event(client, workflow_id, run_id, "TimerScheduled")
    first = await client.request_workflow_cancellation(
        workflow_id, reason="customer left", cleanup_timeout_seconds=60
    )
    again = await client.request_workflow_cancellation(workflow_id)
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["cancellation_request"] == first["cancellation_request"]
    await running
    described = await client.describe_workflow(workflow_id)
    assert described.status == "cancelled"
    events = await history_of(client, workflow_id, run_id)
    types = [e["event_type"] for e in events]
    requested = types.index("CooperativeCancellationRequested")
    delivered = types.index("CooperativeCancellationDelivered")
    assert requested < delivered < types.index("ActivityScheduled")
    assert types[-2:] == ["ActivityCompleted", "WorkflowCancelled"]  # the cleanup step ran
    delivery = events[delivered]["payload"]
    assert delivery["call_kind"] == "timer"
    assert delivery["workflow_command_id"] == first["cancellation_request"]["request_id"]
    replayed = replay(ReserveThenWait, events, ["o-1"], workflow_id=workflow_id, run_id=run_id)
    [closing] = replayed.commands
    assert isinstance(closing, FailWorkflow)
    assert closing.exception_type == "WorkflowCancelled"


async def test_cooperative_cancellation_runs_cleanup_then_cancels(client: Client) -> None:
    """PROTOCOL 6.5, 8.2, S12: request -> delivery at the pending timer -> the cleanup activity
    -> the run closes as cancelled, with the SDK worker's sticky cache on (warm) and off (cold);
    a repeated request answers the original id and deadline; the SDK's `replay()` of the
    recorded history ends in the same cancellation."""
    await cancel_with_cleanup(client, sticky=True)
    await cancel_with_cleanup(client, sticky=False)


async def test_cancellation_waits_for_the_activity_it_interrupts(client: Client) -> None:
    """PROTOCOL 6.2, 6.5, 7: at an activity with `wait_cancellation_completed`, the first
    delivery releases its claim while the SDK activity worker stops the attempt (status, then
    acknowledge-cancellation: ActivityCancelled); the next claim delivers, cleanup runs after
    it, the run closes as cancelled and the SDK's `replay()` agrees."""
    workflow_id = f"hold-{uuid.uuid4().hex}"
    arguments = ["o-2", "wait_cancellation_completed"]
    handle = await client.start_workflow(
        workflow_type="reserve-then-hold",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=arguments,
    )
    run_id = handle.run_id or ""
    # An SDK worker runs an activity inline with its polling: activities get a worker of their own.
    activities = Worker(
        client,
        task_queue=QUEUE,
        workflows=[],
        activities=ACTIVITIES,
        poll_timeout=2,
        capabilities=["cooperative_cancellation"],
    )
    serving = asyncio.create_task(activities.run())
    workflows = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=[],
        poll_timeout=2,
        capabilities=["cooperative_cancellation"],
    )
    running = asyncio.create_task(workflows.run_until(workflow_id=workflow_id, timeout=30.0))
    try:
        await wait_for_event(client, workflow_id, run_id, "ActivityScheduled")
        await asyncio.sleep(1.0)  # the attempt is running (its callback process started)
        await client.request_workflow_cancellation(workflow_id, cleanup_timeout_seconds=60)
        await running
    finally:
        await activities.stop()
        await asyncio.gather(serving, return_exceptions=True)
    assert (await client.describe_workflow(workflow_id)).status == "cancelled"
    events = await history_of(client, workflow_id, run_id)
    types = [e["event_type"] for e in events]
    assert types.index("CooperativeCancellationRequested") < types.index("ActivityCancelled")
    assert types.index("ActivityCancelled") < types.index("CooperativeCancellationDelivered")
    assert types[-2:] == ["ActivityCompleted", "WorkflowCancelled"]  # the cleanup step ran
    replayed = replay(ReserveThenHold, events, arguments, workflow_id=workflow_id, run_id=run_id)
    [closing] = replayed.commands
    assert isinstance(closing, FailWorkflow) and closing.exception_type == "WorkflowCancelled"
