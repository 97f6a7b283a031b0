"""Waits beside other waits, with the real `durable-workflow` 2.12.0 SDK through `burrow server`.

* A message stream read before any message arrived: the SDK opens a condition wait keyed on the
  stream and its cursor (`message-stream:<name>:<cursor>`); the Client's `append_message_stream`
  records the message as the stream's signal, which releases the wait (PROTOCOL.md 7, 17).
* A select (PROTOCOL.md 7, 8.2) of two activities with a signal arriving while both still run:
  the workflow task the signal makes finds the group still open. SDK 2.12.0 does not send the
  group's commands again on it (unlike a partly resolved plain list, which
  `burrow.server.parallel_groups.check` takes back as a no-op): that task reports no commands.
* A stream read on across continue-as-new. The SDK reports its cursors (`through_position`)
  with the completion that continues as new; the new run is handed them (the SDK's cursor
  checkpoint) and every message the old run had not read, and positions count across the runs
  (store/message_streams.py): a message appended around the continue-as-new is read once, by
  the new run.

Each runs warm (the SDK worker keeps a sticky cache) and cold (none), S12; the SDK's own
`replay()` of the recorded history must give back the run's result. One `burrow server`
process serves the whole module, on a database of its own.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from durable_workflow import Client, Worker
from durable_workflow.workflow import CompleteWorkflow, ContinueAsNew, replay

from burrow import codec
from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance import test_sdk_parallel_groups as groups
from tests.apps.sdk_parallel_flows import PARALLEL_QUEUE
from tests.apps.sdk_wait_flows import (
    WAIT_ACTIVITIES,
    WAIT_WORKFLOWS,
    SdkInboxRelayWorkflow,
    SdkInboxWorkflow,
    SdkSignalledRaceWorkflow,
)

pytestmark = [pytest.mark.slow]
server_url = groups.server_url  # one `burrow server` process for the module (fixture)
client = sdk.client  # the SDK's Client on it (fixture)
full_history = groups.full_history


async def _until_recorded(client: Client, workflow_id: str, run_id: str, event_type: str) -> None:
    """Until the run's history holds an `event_type` event."""
    async with asyncio.timeout(10):
        while True:
            events = await full_history(client, workflow_id, run_id)
            if any(e["event_type"] == event_type for e in events):
                return
            await asyncio.sleep(0.05)


def _record_batches(client: Client) -> list[list[str]]:
    """The command types of each workflow task completion the client sends from now on."""
    sent: list[list[str]] = []
    complete = client.complete_workflow_task

    async def recording(*args: Any, **kwargs: Any) -> Any:
        sent.append([str(command.get("type")) for command in kwargs.get("commands") or []])
        return await complete(*args, **kwargs)

    client.complete_workflow_task = recording  # type: ignore[method-assign]
    return sent


async def _run(
    client: Client,
    workflow_cls: type,
    start: list[Any],
    sticky_mode: str,
    meanwhile: Callable[[str, str], Awaitable[None]],
) -> tuple[Any, list[dict[str, Any]], list[list[str]]]:
    """Run the workflow on an SDK worker, doing `meanwhile(workflow id, run id)` while it runs:
    its result, its history (which the SDK's `replay()` must complete with the same result)
    and the command types of each workflow task the worker completed."""
    workflow_type = workflow_cls.__workflow_name__  # type: ignore[attr-defined]
    workflow_id = f"{workflow_type}-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type=workflow_type, workflow_id=workflow_id, task_queue=PARALLEL_QUEUE, input=start
    )
    run_id = handle.run_id or ""
    worker = Worker(
        client,
        task_queue=PARALLEL_QUEUE,
        workflows=WAIT_WORKFLOWS,
        activities=WAIT_ACTIVITIES,
        poll_timeout=1,
        sticky_cache_capacity=groups.capacity_of(sticky_mode),
    )
    sent = _record_batches(client)
    running = asyncio.create_task(worker.run())
    try:
        await meanwhile(workflow_id, run_id)
        result = await client.get_result(handle, poll_interval=0.1, timeout=30.0)
    finally:
        await worker.stop()
        await running
    events = await full_history(client, workflow_id, run_id)
    replayed = replay(workflow_cls, events, start, workflow_id=workflow_id, run_id=run_id)
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow), replayed.commands
    assert completion.result == result
    return result, events, sent


async def test_a_message_appended_releases_the_stream_wait(
    client: Client, sticky_mode: str
) -> None:
    """PROTOCOL 7, 17: the workflow reads its empty `inbox` stream, so the SDK opens the
    condition wait `message-stream:inbox:0`; `append_message_stream` records the message as the
    stream's signal, the wait is satisfied and the workflow returns the message (position 1)."""

    async def append(workflow_id: str, run_id: str) -> None:
        await _until_recorded(client, workflow_id, run_id, "ConditionWaitOpened")
        receipt = await client.append_message_stream(
            workflow_id, "inbox", "m-1", args=[{"text": "hi"}]
        )
        assert (receipt["position"], receipt["outcome"]) == (1, "message_appended")

    result, events, _ = await _run(client, SdkInboxWorkflow, [], sticky_mode, append)

    assert result == {"message_id": "m-1", "position": 1, "arguments": [{"text": "hi"}]}
    opened = [e["payload"] for e in events if e["event_type"] == "ConditionWaitOpened"]
    assert [p["condition_key"] for p in opened] == ["message-stream:inbox:0"]
    assert [e["event_type"] for e in events if e["event_type"].startswith("ConditionWait")] == [
        "ConditionWaitOpened",
        "ConditionWaitSatisfied",
    ]


async def test_a_stream_read_on_after_continue_as_new(client: Client, sticky_mode: str) -> None:
    """PROTOCOL 17, SPEC D3: a run reads messages 1 and 2 of its stream and continues as new
    (the SDK reports its cursor, `through_position` 2); message 3, appended right after them,
    reaches the new run whether it came before or after the continue-as-new: the new run is
    handed the cursor and reads message 3 at position 3. Each message is read once, and the
    SDK's `replay()` completes each run's history as it ran."""
    workflow_id = f"sdk-inbox-relay-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-inbox-relay",
        workflow_id=workflow_id,
        task_queue=PARALLEL_QUEUE,
        input=[3, 2, []],
    )
    first_run = handle.run_id or ""
    sent = _record_batches(client)
    worker = Worker(
        client,
        task_queue=PARALLEL_QUEUE,
        workflows=WAIT_WORKFLOWS,
        activities=WAIT_ACTIVITIES,
        poll_timeout=1,
        sticky_cache_capacity=groups.capacity_of(sticky_mode),
    )
    running = asyncio.create_task(worker.run())
    try:
        await _until_recorded(client, workflow_id, first_run, "ConditionWaitOpened")
        for message_id, argument in (("m-1", "a"), ("m-2", "b"), ("m-3", "c")):
            await client.append_message_stream(workflow_id, "inbox", message_id, args=[argument])
        result = await client.get_result(
            client.get_workflow_handle(workflow_id), poll_interval=0.1, timeout=30.0
        )
    finally:
        await worker.stop()
        await running

    assert result == [[1, "a"], [2, "b"], [3, "c"]]
    assert ["continue_as_new"] in sent
    first = await full_history(client, workflow_id, first_run)
    [second_run] = [
        e["payload"]["continued_to_run_id"]
        for e in first
        if e["event_type"] == ("WorkflowContinuedAsNew")
    ]
    assert second_run != first_run
    second = await full_history(client, workflow_id, second_run)
    signalled = [
        codec.decode(e["payload"]["arguments"])[0]
        for e in second
        if e["event_type"] == "SignalReceived"
    ]
    assert [s.get("through_position", s.get("position")) for s in signalled] == [2, 3]
    carried_on = replay(
        SdkInboxRelayWorkflow, first, [3, 2, []], workflow_id=workflow_id, run_id=first_run
    )
    assert isinstance(carried_on.commands[-1], ContinueAsNew), carried_on.commands
    assert carried_on.commands[-1].arguments == [3, 2, result[:2]]
    ended = replay(
        SdkInboxRelayWorkflow,
        second,
        [3, 2, result[:2]],
        workflow_id=workflow_id,
        run_id=second_run,
    )
    assert isinstance(ended.commands[-1], CompleteWorkflow), ended.commands
    assert ended.commands[-1].result == result


async def test_a_signal_while_a_select_waits_leaves_the_select_as_it_was(
    client: Client, sticky_mode: str
) -> None:
    """PROTOCOL 7, 8.2: a select of two napping activities; a signal arrives while both nap, so
    a workflow task runs with the group still open. The group stays one group (one
    SelectionGroupOpened, two activities: the SDK sends it once), the first member to close
    wins, the signal's value is in the result."""

    async def poke(workflow_id: str, run_id: str) -> None:
        await _until_recorded(client, workflow_id, run_id, "SelectionGroupOpened")
        await client.signal_workflow(workflow_id, "poke", args=["now"])
        await _until_recorded(client, workflow_id, run_id, "SignalReceived")

    result, events, sent = await _run(
        client, SdkSignalledRaceWorkflow, ["ada", [0.4, 0.6]], sticky_mode, poke
    )

    assert result == {"winner": "first", "value": "hello, ada 1", "pokes": ["now"]}
    kinds = [e["event_type"] for e in events]
    assert kinds.count("SelectionGroupOpened") == 1
    assert kinds.count("ActivityScheduled") == 2
    assert kinds.index("SignalReceived") < kinds.index("SelectionResolved")
    # The SDK does not send the open group again: the signal's task reports no commands (the
    # SDK then fails it as waiting for history), and the last one completes the run.
    assert sent == [["schedule_activity", "schedule_activity"], [], ["complete_workflow"]]
