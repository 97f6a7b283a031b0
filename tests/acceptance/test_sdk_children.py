"""Child workflows through `burrow server`, judged by the real `durable-workflow` 2.12.0 SDK.

An SDK parent yields `ctx.start_child_workflow(...)`; the server accepts the command as the SDK
sends it, starts the child in the parent's completion, and hands the parent `ChildRun*` history
the SDK's replayer resolves (PROTOCOL.md 7, 8.2; SPEC issue 28).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_workflow import Client, Worker, history_bundle_verify
from durable_workflow.errors import WorkflowTerminated
from durable_workflow.replay_verify import verify_replay

from burrow.testing import assert_eventually
from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.conftest import WorkerFactory
from tests.acceptance.test_sdk_against_server import QUEUE, ROOT, TOKEN, wait_for_event, worker
from tests.apps import child_flows
from tests.apps.sdk_flows import (
    ACTIVITIES,
    NATIVE_QUEUE,
    OTHER_QUEUE,
    WORKFLOWS,
    SdkBoundedParentWorkflow,
    SdkFanOutWorkflow,
    SdkMixedGroupWorkflow,
    SdkParentWorkflow,
)
from tests.support import spawn

pytestmark = [pytest.mark.slow]
sdk_only = pytest.mark.sticky_cache_set_by_test  # SDK workers: no Burrow worker's cache to set
server_url = sdk.server_url  # `burrow server` as a real process (fixture)
client = sdk.client  # the SDK's Client on it (fixture)


async def history_of(client: Client, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    return list((await client.get_history(workflow_id, run_id))["events"])


@sdk_only
async def test_sdk_parent_gets_its_sdk_child_result(client: Client) -> None:
    """Issue 28, PROTOCOL 7/8.2: an SDK parent starts an SDK child on its own queue and gets
    its result; the parent's history records ChildWorkflowScheduled, ChildRunStarted and
    ChildRunCompleted at the child's step, and the SDK's replay verifier accepts it.

    The flow of the Durable Workflow server's `WorkerProtocolSuccessContractTest::
    test_start_child_workflow_completion_uses_worker_protocol_contract` (the parent waits,
    the child completes, the parent's next task carries ChildRunCompleted naming
    `child_workflow_run_id` with `child_status: completed`), here run by the SDK."""
    workflow_id = f"parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == {"child_said": "hello, ada"}
    events = await history_of(client, workflow_id, handle.run_id or "")
    child_events = [e for e in events if e["event_type"].startswith("Child")]
    assert [e["event_type"] for e in child_events] == [
        "ChildWorkflowScheduled",
        "ChildRunStarted",
        "ChildRunCompleted",
    ]
    assert {e["payload"]["sequence"] for e in child_events} == {1}
    report = verify_replay(SdkParentWorkflow, events, start_input=["ada"])
    assert report.status == "replayed", report.to_dict()


@sdk_only
async def test_sdk_parent_sees_its_failed_child_as_child_workflow_failed(client: Client) -> None:
    """Issue 28, PROTOCOL 8.2: a child whose activity fails closes failed; the parent's
    ChildRunFailed carries its message and class, the SDK raises ChildWorkflowFailed at the
    yield, and the parent (which catches it) completes; the replay verifier accepts it."""
    workflow_id = f"parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=["ada", "failing-child"],
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    result = await client.get_result(handle)
    assert result == {"child_failed": "never works", "exception_class": "ValueError"}
    events = await history_of(client, workflow_id, handle.run_id or "")
    [failed] = [e for e in events if e["event_type"] == "ChildRunFailed"]
    assert (failed["payload"]["sequence"], failed["payload"]["child_status"]) == (1, "failed")
    report = verify_replay(SdkParentWorkflow, events, start_input=["ada", "failing-child"])
    assert report.status == "replayed", report.to_dict()
    assert report.observed is not None and report.observed["result"] == result


@pytest.fixture
def other_queue_worker(server_url: str, tmp_path: Path) -> Iterator[spawn.Process]:
    """A second SDK worker process, serving OTHER_QUEUE through the same server."""
    log = (tmp_path / "other-worker.log").open("wb")
    proc = spawn.popen(
        [sys.executable, "-m", "tests.apps.sdk_flows", server_url, TOKEN, OTHER_QUEUE],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield proc
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


@sdk_only
async def test_sdk_child_on_another_queue_runs_on_the_second_worker_process(
    client: Client, other_queue_worker: spawn.Process
) -> None:
    """Issue 28: the child's `task_queue` puts it on another queue, which only a second SDK
    worker process serves; the parent (served in this process) gets the child's result, and
    the child's run is on that queue and names its parent."""
    workflow_id = f"parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=["bo", "greeter", OTHER_QUEUE],
    )
    local = Worker(client, task_queue=QUEUE, workflows=[SdkParentWorkflow], poll_timeout=2)
    await local.run_until(workflow_id=workflow_id, timeout=60.0)
    assert other_queue_worker.poll() is None
    assert await client.get_result(handle) == {"child_said": "hello, bo"}
    events = await history_of(client, workflow_id, handle.run_id or "")
    [scheduled] = [e for e in events if e["event_type"] == "ChildWorkflowScheduled"]
    child = await client.describe_workflow(scheduled["payload"]["child_workflow_instance_id"])
    assert (child.status, child.task_queue) == ("completed", OTHER_QUEUE)


@sdk_only
async def test_sdk_parent_fans_out_children_in_one_parallel_group(client: Client) -> None:
    """Issue 28, PROTOCOL 7 (parallel metadata), 8.3: three children yielded as one list
    arrive as one batch with `parallel_group_*` metadata; each gets the step its
    `base_sequence + index` names, and the parent gets the answers in order."""
    workflow_id = f"fan-out-{uuid.uuid4().hex}"
    names = ["a", "b", "c"]
    handle = await client.start_workflow(
        workflow_type="sdk-fan-out", workflow_id=workflow_id, task_queue=QUEUE, input=[names]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == [f"hello, {n}" for n in names]
    events = await history_of(client, workflow_id, handle.run_id or "")
    scheduled = [e["payload"] for e in events if e["event_type"] == "ChildWorkflowScheduled"]
    assert [p["sequence"] for p in scheduled] == [1, 2, 3]
    report = verify_replay(SdkFanOutWorkflow, events, start_input=[names])
    assert report.status == "replayed", report.to_dict()


async def test_a_native_parent_gets_the_result_of_an_sdk_child(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: a Burrow workflow (in a `burrow worker` process) executes the SDK's `greeter`
    as its child on the SDK workers' queue; the SDK worker runs it over HTTP and the native
    parent gets its result, decoded from the same Avro envelope."""
    worker_process("native-parent", "tests.apps.sdk_flows:native_app")
    workflow_id = f"native-parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="native-parent-of-sdk-child",
        workflow_id=workflow_id,
        task_queue=NATIVE_QUEUE,
        input=["cy"],
    )
    sdk_worker = worker(client)
    await sdk_worker.run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle, timeout=60.0) == "native parent heard: hello, cy"


async def test_an_sdk_parent_gets_the_result_of_a_native_child(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: an SDK parent starts Burrow's `leaf` on the native workers' queue; a `burrow
    worker` process runs it (its activity included) and the SDK parent gets its result
    through ChildRunCompleted; the SDK's replay verifier accepts the parent's history."""
    worker_process("native-children", "tests.apps.child_flows:app")
    workflow_id = f"parent-{uuid.uuid4().hex}"
    start = [21, "leaf", child_flows.TASK_QUEUE]
    handle = await client.start_workflow(
        workflow_type="sdk-parent", workflow_id=workflow_id, task_queue=QUEUE, input=start
    )
    local = Worker(client, task_queue=QUEUE, workflows=[SdkParentWorkflow], poll_timeout=2)
    await local.run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == {"child_said": 42}
    events = await history_of(client, workflow_id, handle.run_id or "")
    report = verify_replay(SdkParentWorkflow, events, start_input=start)
    assert report.status == "replayed", report.to_dict()


@sdk_only
async def test_the_history_export_links_a_parent_and_its_child(client: Client) -> None:
    """Issue 28, PROTOCOL 17 (`export_history`): the SDK client's export of the parent lists
    its child in `links.children` and the child's lists its parent in `links.parents`, with
    the step that started it (the Durable Workflow package's `HistoryExport` link shape);
    both bundles pass the SDK's bundle verifier, checksum included."""
    workflow_id = f"parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent", workflow_id=workflow_id, task_queue=QUEUE, input=["di"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    parent = await client.export_history(workflow_id, handle.run_id or "")
    [child_link] = parent["links"]["children"]
    child_id, child_run = (
        child_link["child_workflow_instance_id"],
        child_link["child_workflow_run_id"],
    )
    assert child_link == child_link | {
        "type": "child_workflow",
        "parent_workflow_instance_id": workflow_id,
        "parent_workflow_run_id": handle.run_id,
        "sequence": 1,
        "workflow_type": "greeter",
        "status": "completed",
    }
    assert parent["links"]["parents"] == []
    child = await client.export_history(child_id, child_run)
    [parent_link] = child["links"]["parents"]
    assert parent_link == parent_link | {
        "parent_workflow_instance_id": workflow_id,
        "parent_workflow_run_id": handle.run_id,
        "child_workflow_instance_id": child_id,
        "child_workflow_run_id": child_run,
        "sequence": 1,
    }
    assert child["links"]["children"] == []
    for bundle in (parent, child):
        report = history_bundle_verify.verify_bundle(bundle)
        assert report["status"] == "ok", report["findings"]
        assert report["integrity"]["checksum_matches"] is True


async def start_waiting_child(client: Client) -> tuple[str, str, str, asyncio.Task[None]]:
    """An SDK parent whose child waits on a long timer, both served by a running SDK worker:
    the parent's id and run, and the child's id."""
    workflow_id = f"parent-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=["eve", "waiting-child"],
    )
    running = asyncio.create_task(worker(client).run_until(workflow_id=workflow_id, timeout=60.0))
    run_id = handle.run_id or ""
    await wait_for_event(client, workflow_id, run_id, "ChildRunStarted")
    events = await history_of(client, workflow_id, run_id)
    [scheduled] = [e for e in events if e["event_type"] == "ChildWorkflowScheduled"]
    child_id = scheduled["payload"]["child_workflow_instance_id"]
    await wait_for_event(
        client, child_id, scheduled["payload"]["child_workflow_run_id"], "TimerScheduled"
    )
    return workflow_id, run_id, child_id, running


@pytest.mark.parametrize(
    ("close", "event", "message"),
    [
        ("cancel", "ChildRunCancelled", "child stop"),
        ("terminate", "ChildRunTerminated", "child stop"),
    ],
)
@sdk_only
async def test_sdk_parent_hears_its_child_closed_by_the_control_plane(
    client: Client, close: str, event: str, message: str
) -> None:
    """Issue 28, PROTOCOL 8.2, 17: the control plane's cancel or terminate of a child reaches
    its SDK parent as ChildRunCancelled / ChildRunTerminated, which the SDK raises as
    ChildWorkflowCancelled / ChildWorkflowTerminated (both ChildWorkflowFailed) at the yield."""
    workflow_id, run_id, child_id, running = await start_waiting_child(client)
    if close == "cancel":
        await client.cancel_workflow(child_id, reason=message)
    else:
        await client.terminate_workflow(child_id, reason=message)
    await running
    result = await client.get_result(await client.describe_workflow(workflow_id))
    assert "child_failed" in result, result
    events = await history_of(client, workflow_id, run_id)
    [closed] = [e for e in events if e["event_type"] == event]
    assert closed["payload"]["sequence"] == 1
    report = verify_replay(SdkParentWorkflow, events, start_input=["eve", "waiting-child"])
    assert report.status == "replayed", report.to_dict()


@sdk_only
@pytest.mark.parametrize("close", ["terminate", "cancel"])
async def test_closing_an_sdk_parent_terminates_its_child_by_close_policy(
    client: Client, close: str
) -> None:
    """Issue 28, PROTOCOL 3.3 (`parent_close_policy`), 17: the SDK parent started its child
    with `terminate`; the control plane terminates or cancels the parent (both close it at
    once) and the server's repair pass terminates the child."""
    workflow_id, _, child_id, running = await start_waiting_child(client)
    if close == "cancel":
        await client.cancel_workflow(workflow_id, reason="parent stop")
    else:
        await client.terminate_workflow(workflow_id, reason="parent stop")
    await running

    async def child_terminated() -> bool:
        return (await client.describe_workflow(child_id)).status == "terminated"

    await assert_eventually(child_terminated, timeout=30, message="child terminated by policy")
    with pytest.raises(WorkflowTerminated):
        await client.get_result(await client.describe_workflow(child_id))


@sdk_only
async def test_an_sdk_parent_with_a_sticky_cache_resumes_warm_on_its_child_close(
    client: Client,
) -> None:
    """Issue 28, S4-S6, PROTOCOL 11: an SDK worker with a sticky cache binds the parent when it
    starts its child; the child's close wakes the parent back on that worker, which resumes it
    from its cache (a hit) with the ChildRunCompleted the task carries."""
    workflow_id = f"parent-warm-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-parent", workflow_id=workflow_id, task_queue=QUEUE, input=["fay"]
    )
    warm = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        poll_timeout=2,
        sticky_cache_capacity=10,
    )
    await warm.run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == {"child_said": "hello, fay"}
    metrics = warm.sticky_cache_metrics()
    assert metrics["hit"] >= 1
    assert metrics["forced_cold_replay"] == 0


@sdk_only
async def test_sdk_parent_yields_a_child_an_activity_and_a_timer_as_one_group(
    client: Client,
) -> None:
    """Issue 28, PROTOCOL 7, 8.3: after a first step, a mixed group (`parallel-calls`) of a
    child, an activity and a timer takes steps 2-4 in member order; the results come back in
    that order and the SDK's replay verifier accepts the history."""
    workflow_id = f"mixed-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sdk-mixed-group", workflow_id=workflow_id, task_queue=QUEUE, input=["gus"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == ["hello, gus jr", "HELLO, GUS", None]
    events = await history_of(client, workflow_id, handle.run_id or "")
    opened = {
        e["event_type"]: e["payload"]["sequence"]
        for e in events
        if e["event_type"] in ("ChildWorkflowScheduled", "TimerScheduled")
    }
    assert opened == {"ChildWorkflowScheduled": 2, "TimerScheduled": 4}
    report = verify_replay(SdkMixedGroupWorkflow, events, start_input=["gus"])
    assert report.status == "replayed", report.to_dict()


@sdk_only
async def test_an_sdk_child_past_its_run_timeout_fails_the_parents_yield(client: Client) -> None:
    """Issue 28, PROTOCOL 7 (`run_timeout_seconds` on start_child_workflow), 8.2: the child
    waits past its 1 s run timeout; the repair pass times it out and the SDK parent gets
    ChildRunFailed (category `timeout`) as ChildWorkflowFailed."""
    workflow_id = f"bounded-{uuid.uuid4().hex}"
    start = ["waiting-child", 1, 1]
    handle = await client.start_workflow(
        workflow_type="sdk-bounded-parent", workflow_id=workflow_id, task_queue=QUEUE, input=start
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    result = await client.get_result(handle)
    assert "child_failed" in result, result
    events = await history_of(client, workflow_id, handle.run_id or "")
    [failed] = [e["payload"] for e in events if e["event_type"] == "ChildRunFailed"]
    assert (failed["failure_category"], failed["child_status"]) == ("timeout", "timed_out")
    report = verify_replay(SdkBoundedParentWorkflow, events, start_input=start)
    assert report.status == "replayed", report.to_dict()


@sdk_only
async def test_an_sdk_child_is_retried_under_its_retry_policy(client: Client) -> None:
    """Issue 28, PROTOCOL 7 (`retry_policy` on start_child_workflow): a child that fails is
    run again as a new run of its id (attempt 2), and the parent hears only the last run's
    failure."""
    workflow_id = f"bounded-{uuid.uuid4().hex}"
    start = ["failing-child", 2, 30]
    handle = await client.start_workflow(
        workflow_type="sdk-bounded-parent", workflow_id=workflow_id, task_queue=QUEUE, input=start
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == {
        "child_failed": "never works",
        "exception_class": "ValueError",
    }
    events = await history_of(client, workflow_id, handle.run_id or "")
    [failed] = [e["payload"] for e in events if e["event_type"] == "ChildRunFailed"]
    [scheduled] = [e["payload"] for e in events if e["event_type"] == "ChildWorkflowScheduled"]
    assert failed["child_workflow_run_id"] != scheduled["child_workflow_run_id"]
    child_id, last_run = scheduled["child_workflow_instance_id"], failed["child_workflow_run_id"]
    assert (await client.describe_workflow(child_id)).run_id == last_run
    [started] = [e for e in await history_of(client, child_id, last_run)][:1]
    assert started["payload"]["retry_attempt"] == 2
