"""The real `durable-workflow` 2.12.0 SDK (client and worker) against `burrow server` (SPEC M4b).

`burrow server` runs as a real process on a free port and the test database; the SDK's own
`Client` and `Worker` drive it over HTTP (PROTOCOL.md 21). The SDK workers keep no sticky
cache unless a test says so, so their scenarios replay cold (S12); one test runs an SDK worker
with a warm cache, and the scenario served by a `burrow worker` runs warm and cold.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from durable_workflow import Client, Worker
from durable_workflow.errors import (
    NamespaceNotFound,
    QueryFailed,
    Unauthorized,
    UpdateFailed,
    UpdateRejected,
    WorkflowAlreadyStarted,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
)
from durable_workflow.workflow import CompleteWorkflow, replay

from burrow import Worker as BurrowWorker
from burrow.store import Store
from tests.acceptance.conftest import fast_settings
from tests.apps import flows
from tests.apps.sdk_flows import ACTIVITIES, GPU, WORKFLOWS, CartWorkflow, GuardedCartWorkflow
from tests.support import spawn

pytestmark = [pytest.mark.slow]
sdk_worker = pytest.mark.sticky_cache_set_by_test

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token"
QUEUE = "python-workers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def running_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """`burrow server` as a real process with `env`, on a free port, until the block ends."""
    port = free_port()
    log = log_path.open("wb")
    proc = spawn.popen(
        [sys.executable, "-m", "burrow", "server", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log_path.read_text()
        try:
            httpx.get(f"{url}/api/cluster/info", headers={"Authorization": f"Bearer {TOKEN}"})
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "burrow server did not start"
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture
def server_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """`burrow server` as a real process, with a bearer token, on the test database."""
    env = {**os.environ, "BURROW_DATABASE_URL": database_url, "BURROW_AUTH_TOKEN": TOKEN}
    with running_server(env, tmp_path / "server.log") as url:
        yield url


@pytest.fixture
async def client(server_url: str) -> AsyncIterator[Client]:
    async with Client(server_url, token=TOKEN, namespace="default") as instance:
        yield instance


def worker(client: Client) -> Worker:
    return Worker(
        client, task_queue=QUEUE, workflows=WORKFLOWS, activities=ACTIVITIES, poll_timeout=2
    )


@sdk_worker
async def test_sdk_readme_quickstart_runs_against_the_server(client: Client) -> None:
    """M4b, PROTOCOL 21: the README quickstart completes with `hello, world`."""
    workflow_id = f"greet-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="greeter", workflow_id=workflow_id, task_queue=QUEUE, input=["world"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == "hello, world"
    described = await client.describe_workflow(workflow_id)
    assert described.status == "completed"
    assert described.output == "hello, world"


@sdk_worker
async def test_sdk_workflow_with_activity_timer_and_signal(client: Client) -> None:
    """M4b, PROTOCOL 5.5/17: activities, a durable timer and a signal through the real SDK.

    The signal lands while a timer is pending: the SDK has nothing new to schedule and answers
    with the waiting-for-history acknowledgement; the run goes on when the timer fires.
    """
    workflow_id = f"approval-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="approval", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    running = asyncio.create_task(worker(client).run_until(workflow_id=workflow_id, timeout=90.0))
    # Signal once the first timer is in history, so the signal arrives mid-run.
    deadline = time.monotonic() + 60
    while True:
        history = await client.get_history(workflow_id, handle.run_id or "")
        if any(e["event_type"] == "TimerScheduled" for e in history["events"]):
            break
        assert time.monotonic() < deadline, "the workflow never started its timer"
        await asyncio.sleep(0.1)
    receipt = await client.signal_workflow(workflow_id, "approve", args=["grace"])
    assert receipt["outcome"] == "signal_received"
    await running
    assert await client.get_result(handle) == "HELLO, ADA (approved by grace)"
    events = [
        e["event_type"]
        for e in (await client.get_history(workflow_id, handle.run_id or ""))["events"]
    ]
    assert "SignalReceived" in events
    assert "TimerFired" in events
    assert events.count("ActivityCompleted") == 2
    assert events[-1] == "WorkflowCompleted"


@sdk_worker
async def test_sdk_client_with_a_wrong_token_is_unauthorized(server_url: str) -> None:
    """PROTOCOL 2.2/2.4: a wrong bearer token is refused with 401 (`Unauthorized`)."""
    async with Client(server_url, token="not-the-token", namespace="default") as wrong:
        with pytest.raises(Unauthorized):
            await wrong.describe_workflow("anything")


@sdk_worker
async def test_sdk_activity_retry_then_success(client: Client) -> None:
    """PROTOCOL 6.2: a failed attempt is retried under the activity's retry policy."""
    workflow_id = f"retrying-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="retrying", workflow_id=workflow_id, task_queue=QUEUE, input=["bob"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == "made it, bob"
    history = await client.get_history(workflow_id, handle.run_id or "")
    types = [e["event_type"] for e in history["events"]]
    assert types.count("ActivityRetryScheduled") == 1


@sdk_worker
async def test_sdk_failed_activity_fails_the_workflow(client: Client) -> None:
    """PROTOCOL 6.2, 17: an exhausted activity fails the run; get_result raises."""
    workflow_id = f"doomed-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="doomed", workflow_id=workflow_id, task_queue=QUEUE, input=[]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    with pytest.raises(WorkflowFailed, match="never works"):
        await client.get_result(handle)


@sdk_worker
async def test_sdk_duplicate_start_and_terminate(client: Client) -> None:
    """PROTOCOL 17: a second start is WorkflowAlreadyStarted; terminate closes the run."""
    workflow_id = f"sleeper-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sleeper", workflow_id=workflow_id, task_queue=QUEUE, input=[]
    )
    with pytest.raises(WorkflowAlreadyStarted):
        await client.start_workflow(
            workflow_type="sleeper", workflow_id=workflow_id, task_queue=QUEUE, input=[]
        )
    same = await client.start_workflow(
        workflow_type="sleeper",
        workflow_id=workflow_id,
        task_queue=QUEUE,
        input=[],
        duplicate_policy="use-existing",
    )
    assert same.run_id == handle.run_id
    await client.terminate_workflow(workflow_id, reason="no longer needed")
    with pytest.raises(WorkflowTerminated):
        await client.get_result(handle)


@sdk_worker
async def test_sdk_unknown_namespace_is_namespace_not_found(server_url: str) -> None:
    """PROTOCOL 2.2: an unknown namespace maps to the SDK's NamespaceNotFound."""
    async with Client(server_url, token=TOKEN, namespace="elsewhere") as other:
        with pytest.raises(NamespaceNotFound):
            await other.describe_workflow("anything")


async def test_sdk_client_drives_a_burrow_worker_through_the_server(
    client: Client, worker_process: Any
) -> None:
    """M4b, S12: same store and broker: a run started and signalled over HTTP by the SDK
    client is served by a `burrow worker` process (warm and cold), and its result is read
    back through the server."""
    worker_process("sdk-order-1")
    handle = await client.start_workflow(
        workflow_type="OrderFlow", workflow_id="sdk-order-1", task_queue="test-flows", input=["ada"]
    )
    deadline = time.monotonic() + 60
    while True:
        history = await client.get_history("sdk-order-1", handle.run_id or "")
        if any(e["event_type"] == "TimerFired" for e in history["events"]):
            break
        assert time.monotonic() < deadline, "the order flow never reached its signal wait"
        await asyncio.sleep(0.1)
    await client.signal_workflow("sdk-order-1", "approve", args=["grace"])
    result = await client.get_result(handle, timeout=60.0)
    assert result["greeting"] == "hello, ada"
    assert result["approved_by"] == "grace"
    assert result["total"] == 5


async def test_a_burrow_worker_and_an_sdk_worker_share_one_server_and_store(
    client: Client, worker_process: Any
) -> None:
    """M4b: at the same time, a `burrow worker` process and an SDK worker serve their own task
    queues through one server and one store; each run completes on its worker."""
    worker_process("shared-burrow-worker")
    sdk_id, burrow_id = f"greet-{uuid.uuid4().hex}", f"countdown-{uuid.uuid4().hex}"
    sdk_run = await client.start_workflow(
        workflow_type="greeter", workflow_id=sdk_id, task_queue=QUEUE, input=["both"]
    )
    burrow_run = await client.start_workflow(
        workflow_type="CountdownFlow", workflow_id=burrow_id, task_queue="test-flows", input=[0]
    )
    await worker(client).run_until(workflow_id=sdk_id, timeout=60.0)
    assert await client.get_result(sdk_run) == "hello, both"
    assert await client.get_result(burrow_run, timeout=60.0) == "liftoff"
    sdk_history = await client.get_history(sdk_id, sdk_run.run_id or "")
    assert [e["event_type"] for e in sdk_history["events"]][-1] == "WorkflowCompleted"


@sdk_worker
async def test_sdk_cancel_closes_the_run(client: Client) -> None:
    """PROTOCOL 17: the control plane's cancel closes a running SDK workflow as cancelled (no
    workflow code runs); the SDK worker's run_until ends and get_result raises."""
    workflow_id = f"sleeper-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="sleeper", workflow_id=workflow_id, task_queue=QUEUE, input=[]
    )
    running = asyncio.create_task(worker(client).run_until(workflow_id=workflow_id, timeout=60.0))
    deadline = time.monotonic() + 60
    while True:
        history = await client.get_history(workflow_id, handle.run_id or "")
        if any(e["event_type"] == "TimerScheduled" for e in history["events"]):
            break
        assert time.monotonic() < deadline, "the workflow never started its timer"
        await asyncio.sleep(0.1)
    await client.cancel_workflow(workflow_id, reason="changed my mind")
    await running
    with pytest.raises(WorkflowCancelled):
        await client.get_result(handle)


@sdk_worker
async def test_sdk_local_activity_is_recorded_in_history(client: Client) -> None:
    """A3, PROTOCOL 13, 5.4: a local activity runs in the workflow task (its heartbeat renews
    the task lease) and is recorded as activity history with `execution_mode: local`."""
    workflow_id = f"local-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="local-greeter", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    assert await client.get_result(handle) == "hello, ADA"
    history = await client.get_history(workflow_id, handle.run_id or "")
    local = [
        e
        for e in history["events"]
        if e["event_type"] == "ActivityCompleted" and e["payload"].get("execution_mode") == "local"
    ]
    assert len(local) == 1


@sdk_worker
async def test_sdk_side_effect_version_marker_and_continue_as_new(client: Client) -> None:
    """PROTOCOL 7, 17: side effects, version markers and continue-as-new from the SDK; the
    workflow id resolves to its newest run, whose result get_result reads."""
    workflow_id = f"counter-{uuid.uuid4().hex}"
    first = await client.start_workflow(
        workflow_type="counter", workflow_id=workflow_id, task_queue=QUEUE, input=[0, 6]
    )
    await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
    described = await client.describe_workflow(workflow_id)
    assert described.status == "completed"
    assert described.run_id != first.run_id
    assert described.output == 6
    first_history = await client.get_history(workflow_id, first.run_id or "")
    types = [e["event_type"] for e in first_history["events"]]
    assert types[-1] == "WorkflowContinuedAsNew"
    assert "SideEffectRecorded" in types
    assert "VersionMarkerRecorded" in types


@sdk_worker
async def test_sdk_worker_session_runs_on_the_capable_worker_w3_w6(
    client: Client, server_url: str, database_url: str
) -> None:
    """W2-W6, W8: an SDK workflow's two session steps need `gpu:l4`; of two SDK workers on the
    queue, only the one registered with that capability is admitted, so both steps run there.
    At shutdown the SDK worker closes the session it holds over HTTP (W8)."""
    workflow_id = f"session-{uuid.uuid4().hex}"
    session_id = f"gpu-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="session-steps", workflow_id=workflow_id, task_queue=QUEUE, input=[session_id]
    )
    async with Client(server_url, token=TOKEN, namespace="default") as gpu_client:
        plain = Worker(
            client, task_queue=QUEUE, workflows=WORKFLOWS, activities=ACTIVITIES, poll_timeout=2
        )
        gpu = Worker(
            gpu_client,
            task_queue=QUEUE,
            activities=ACTIVITIES,
            capabilities=[GPU],
            poll_timeout=2,
        )
        await asyncio.gather(
            plain.run_until(workflow_id=workflow_id, timeout=60.0),
            gpu.run_until(workflow_id=workflow_id, timeout=60.0),
        )
    assert await client.get_result(handle) == [gpu.worker_id, gpu.worker_id]
    store = Store.connect(database_url)
    try:
        session = await store.get_worker_session(namespace="default", session_id=session_id)
    finally:
        await store.close()
    assert session is not None
    assert (session.state, session.lease_owner) == ("closed", gpu.worker_id)
    assert session.close_reason == "worker_shutdown"
    assert session.requirements == [GPU]


async def wait_for_event(client: Client, workflow_id: str, run_id: str, event_type: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        history = await client.get_history(workflow_id, run_id)
        if any(e["event_type"] == event_type for e in history["events"]):
            return
        assert time.monotonic() < deadline, f"the workflow never recorded {event_type}"
        await asyncio.sleep(0.1)


@sdk_worker
async def test_sdk_client_queries_an_sdk_worker(client: Client) -> None:
    """PROTOCOL 6.3, 17: the SDK client's query becomes a query task the SDK worker's query
    poller answers from replayed state; an unknown query is QueryFailed."""
    workflow_id = f"inspectable-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="inspectable", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    running = asyncio.create_task(worker(client).run_until(workflow_id=workflow_id, timeout=60.0))
    await wait_for_event(client, workflow_id, handle.run_id or "", "TimerScheduled")
    answer = await client.query_workflow(workflow_id, "stage", args=["!"])
    assert answer["result"] == "greeted (hello, ada)!"
    with pytest.raises(QueryFailed):
        await client.query_workflow(workflow_id, "no-such-query")
    await client.terminate_workflow(workflow_id, reason="done")
    await running
    history = await client.get_history(workflow_id, handle.run_id or "")
    assert not any("Query" in e["event_type"] for e in history["events"])


async def test_sdk_client_updates_and_queries_a_burrow_worker(
    client: Client, database_url: str, tmp_path: Path
) -> None:
    """PROTOCOL 17, M4b: the SDK client's updates and queries reach a workflow that a Burrow
    worker runs, through the same store calls as Burrow's own client."""
    workflow_id = f"cart-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="CartFlow",
        workflow_id=workflow_id,
        task_queue="test-extras",
        input=[str(tmp_path / "cart.log")],
    )
    async with BurrowWorker(flows.extras, settings=fast_settings(database_url)):
        added = await client.update_workflow(
            workflow_id, "add_item", args=["apple"], wait_for="completed"
        )
        assert (added["update_status"], added["result"]) == ("completed", 1)
        with pytest.raises(UpdateFailed, match="empty item"):
            await client.update_workflow(workflow_id, "add_item", args=[""], wait_for="completed")
        contents = await client.query_workflow(workflow_id, "contents")
        assert contents["result"] == ["apple"]
        with pytest.raises(QueryFailed):
            await client.query_workflow(workflow_id, "item", args=[5])
        await client.signal_workflow(workflow_id, "checkout")
        assert await client.get_result(handle, timeout=30.0) == ["apple"]


@sdk_worker
async def test_sdk_worker_with_a_sticky_cache_resumes_warm_s4_s6(client: Client) -> None:
    """S3-S7, PROTOCOL 11: an SDK worker with a sticky cache binds the run when it completes a
    task; the run's next task comes back to it as a sticky hit and it resumes from its cache."""
    workflow_id = f"sticky-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="greeter", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
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
    assert await client.get_result(handle) == "hello, ada"
    metrics = warm.sticky_cache_metrics()
    assert metrics["hit"] >= 1
    assert metrics["forced_cold_replay"] == 0


@sdk_worker
async def test_sdk_worker_runs_updates_and_replays_them_from_history(client: Client) -> None:
    """M4b, PROTOCOL 5.1, 7, 8.2, 17: an update to an SDK-run workflow becomes a workflow task
    carrying `workflow_update_id`; the SDK worker runs the handler and `wait_for: completed`
    returns its result. The run's state shows it (query), a failing handler is UpdateFailed,
    and the cold replays after it (no sticky cache) run each handler where `UpdateApplied`
    recorded it: the workflow finishes with the items, and replaying its whole history gives
    back the result it recorded."""
    workflow_id = f"cart-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="cart", workflow_id=workflow_id, task_queue=QUEUE, input=["ada"]
    )
    run_id = handle.run_id or ""
    running = asyncio.create_task(worker(client).run_until(workflow_id=workflow_id, timeout=90.0))
    await wait_for_event(client, workflow_id, run_id, "TimerScheduled")

    added = await client.update_workflow(
        workflow_id, "add_item", args=["apple"], wait_for="completed"
    )
    assert (added["update_status"], added["result"]) == ("completed", 1)
    assert (await client.query_workflow(workflow_id, "items"))["result"] == ["apple"]
    with pytest.raises(UpdateFailed, match="an item needs a name"):
        await client.update_workflow(workflow_id, "add_item", args=[""], wait_for="completed")
    second = await client.update_workflow(
        workflow_id, "add_item", args=["pear"], wait_for="completed"
    )
    assert second["result"] == 2
    checked_out = await client.update_workflow(workflow_id, "checkout", wait_for="completed")
    assert checked_out["result"] == ["apple", "pear"]
    await running

    result = await client.get_result(handle)
    assert (result["items"], result["receipt"]) == (["apple", "pear"], "hello, ada")
    events = (await client.get_history(workflow_id, run_id))["events"]
    applied = [e["payload"]["update_name"] for e in events if e["event_type"] == "UpdateApplied"]
    assert applied == ["add_item", "add_item", "checkout"]  # not the failed one
    assert [e["event_type"] for e in events].count("UpdateCompleted") == 4
    replayed = replay(CartWorkflow, events, ["ada"], workflow_id=workflow_id, run_id=run_id)
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow)
    assert completion.result == result


@sdk_worker
async def test_sdk_worker_with_a_sticky_cache_runs_updates_s4(client: Client) -> None:
    """S4, M4b, PROTOCOL 5.1, 11: an update task completed by a worker that keeps a sticky
    cache binds the run like any task; its later tasks resume warm and still see the update."""
    workflow_id = f"cart-warm-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type="cart", workflow_id=workflow_id, task_queue=QUEUE, input=["bo"]
    )
    warm = Worker(
        client,
        task_queue=QUEUE,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        poll_timeout=2,
        sticky_cache_capacity=10,
    )
    running = asyncio.create_task(warm.run_until(workflow_id=workflow_id, timeout=90.0))
    await wait_for_event(client, workflow_id, handle.run_id or "", "TimerScheduled")
    added = await client.update_workflow(
        workflow_id, "add_item", args=["fig"], wait_for="completed"
    )
    assert added["result"] == 1
    checked_out = await client.update_workflow(workflow_id, "checkout", wait_for="completed")
    assert checked_out["result"] == ["fig"]
    await running
    result = await client.get_result(handle)
    assert (result["items"], result["receipt"]) == (["fig"], "hello, bo")
    assert warm.sticky_cache_metrics()["hit"] >= 1


@sdk_worker
async def test_sdk_worker_validates_updates_before_acceptance(client: Client) -> None:
    """PROTOCOL 6.5, 3.3, 2.4: an SDK worker that declares an update validator registers,
    takes validation tasks on its multiplexed workflow poll and runs the validator against the
    replayed run. Approved, the update is accepted and applied; rejected, the caller gets
    `UpdateRejected` and the run's history is exactly as it was. With no cache, then warm."""
    for sticky_cache_capacity in (0, 10):
        workflow_id = f"guarded-{sticky_cache_capacity}-{uuid.uuid4().hex}"
        handle = await client.start_workflow(
            workflow_type="guarded-cart", workflow_id=workflow_id, task_queue=QUEUE, input=["a"]
        )
        run_id = handle.run_id or ""
        guarded = Worker(
            client,
            task_queue=QUEUE,
            workflows=[GuardedCartWorkflow],
            activities=ACTIVITIES,
            poll_timeout=1,
            sticky_cache_capacity=sticky_cache_capacity,
        )
        running = asyncio.create_task(guarded.run_until(workflow_id=workflow_id, timeout=60.0))
        await wait_for_event(client, workflow_id, run_id, "TimerScheduled")
        added = await client.update_workflow(
            workflow_id, "add_item", args=["apple"], wait_for="completed"
        )
        assert (added["update_status"], added["result"]) == ("completed", 1)
        before = (await client.get_history(workflow_id, run_id))["events"]
        with pytest.raises(UpdateRejected, match="apple is in the cart already"):
            await client.update_workflow(
                workflow_id, "add_item", args=["apple"], wait_for="completed"
            )
        with pytest.raises(UpdateRejected, match="an item needs a name"):
            await client.update_workflow(workflow_id, "add_item", args=[""])
        assert (await client.get_history(workflow_id, run_id))["events"] == before
        await client.terminate_workflow(workflow_id, reason="done")
        await running
        if sticky_cache_capacity:
            assert guarded.sticky_cache_metrics()["hit"] >= 1
