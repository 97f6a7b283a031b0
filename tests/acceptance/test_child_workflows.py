"""Child workflows through real worker processes, warm and forced cold (issue 28, D1-D3, S12).

Each scenario runs twice (acceptance conftest: `sticky_mode`); the histories replay to the
commands they recorded, so a child step is as deterministic as an activity.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from burrow import Client, WorkflowFailureError, WorkflowTimedOutError
from burrow.replay.verify import RecordedRun, Verdict
from burrow.replay_verify import bundle_of, verify_recorded
from burrow.store.models import RunStatus
from burrow.testing import assert_eventually
from burrow.worker.workflow_tasks import run_context
from tests.acceptance.conftest import WorkerFactory, fetchval, log_tail
from tests.apps import child_flows
from tests.support.history import (
    assert_well_formed,
    recorded_per_activation,
    replay_each_activation,
)

pytestmark = pytest.mark.slow
APP = "tests.apps.child_flows:app"


def _id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_a_parent_executes_starts_signals_and_fails_children(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: results, parallel children, a signal, and a failure's cause chain; replays."""
    worker_process("children-1", APP)
    handle = await client.start_workflow(
        child_flows.Family, 5, id=_id("family"), task_queue=child_flows.TASK_QUEUE
    )
    result = await handle.result(timeout=60)
    assert result["first"] == 10 and result["pair"] == [12, 14] and result["released"] == "go"
    assert result["failure"] == {"status": "failed", "type": "LeafBroke", "details": ["detail"]}
    history = await handle.history()
    assert_well_formed(history)
    types = [e.event_type for e in history]
    assert types.count("ChildWorkflowScheduled") == 5
    assert types.count("ChildRunCompleted") == 4 and types.count("ChildRunFailed") == 1
    assert "ChildSignalled" in types
    run = (await handle.describe()).run
    recorded = recorded_per_activation(history)
    assert replay_each_activation(child_flows.app, run, history, warm=False) == recorded
    assert replay_each_activation(child_flows.app, run, history, warm=True) == recorded
    child = await client.get_handle(result["waiting_id"]).describe()
    assert child.run.parent_workflow_id == handle.workflow_id
    assert child.run.parent_run_id == run.run_id
    described = await handle.describe()
    assert [c.state for c in described.children] == ["closed"] * 5
    assert described.children[4].closed_status == "failed"
    # The history export names the children and the child's names its parent; both replay.
    bundle = bundle_of(run, history)
    assert [c["sequence"] for c in bundle["links"]["children"]] == [1, 2, 3, 4, 6]
    child_history = await client.get_handle(result["waiting_id"]).history()
    assert bundle_of(child.run, child_history)["links"]["parents"] == [
        {"workflow_instance_id": handle.workflow_id, "workflow_run_id": run.run_id, "sequence": 4}
    ]
    report = verify_recorded(
        child_flows.app,
        [
            RecordedRun(run=run_context(run), events=history, source="parent"),
            RecordedRun(run=run_context(child.run), events=child_history, source="child"),
        ],
    )
    assert [v.verdict for v in report.runs] == [Verdict.OK, Verdict.OK], report


async def test_a_three_level_chain_returns_through_every_parent(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: grandparent -> parent -> child, each waiting on the next."""
    worker_process("children-chain", APP)
    root = _id("chain")
    handle = await client.start_workflow(
        child_flows.Chain, 2, id=root, task_queue=child_flows.TASK_QUEUE
    )
    ids = await handle.result(timeout=60)
    assert len(ids) == 3 and ids[0] == root and len(set(ids)) == 3


async def test_a_child_on_another_queue_runs_in_another_worker_process(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28, M7: the child's tasks go to its own queue, served by another process."""
    worker_process("children-parent-q", APP)
    handle = await client.start_workflow(
        child_flows.CrossQueueParent, 7, id=_id("cross"), task_queue=child_flows.TASK_QUEUE
    )

    async def child_waits() -> bool:
        return "ChildRunStarted" in [e.event_type for e in await handle.history()]

    await assert_eventually(child_waits, message="child started on the other queue")
    worker_process("children-other-q", "tests.apps.child_flows:other")
    assert await handle.result(timeout=60) == 1007


async def test_a_second_child_with_a_running_id_fails_typed(
    client: Client, worker_process: WorkerFactory, database_url: str
) -> None:
    """Issue 28: a child id already running fails the start in the parent, nothing twice."""
    worker_process("children-dup", APP)
    child_id = _id("dup-child")
    handle = await client.start_workflow(
        child_flows.DuplicateChildParent, child_id, id=_id("dup"), task_queue=child_flows.TASK_QUEUE
    )
    assert await handle.result(timeout=60) == "ChildWorkflowAlreadyStartedError"
    child = client.get_handle(child_id)

    async def terminated() -> bool:  # the parent's close policy (terminate), by the repair pass
        return (await child.describe()).run.status == RunStatus.TERMINATED

    await assert_eventually(terminated, message="the first child was terminated")
    assert (
        await fetchval(database_url, f"SELECT count(*) FROM runs WHERE workflow_id = '{child_id}'")
        == 1
    ), "the refused start created no run"


@pytest.mark.parametrize(
    ("policy", "how", "expected"),
    [
        ("terminate", "complete", RunStatus.TERMINATED),
        ("terminate", "fail", RunStatus.TERMINATED),
        ("terminate", "terminate", RunStatus.TERMINATED),
        ("terminate", "timeout", RunStatus.TERMINATED),
        ("request_cancel", "complete", RunStatus.CANCELLED),
        ("request_cancel", "fail", RunStatus.CANCELLED),
        ("request_cancel", "terminate", RunStatus.CANCELLED),
        ("request_cancel", "timeout", RunStatus.CANCELLED),
        ("abandon", "complete", RunStatus.RUNNING),
        ("abandon", "fail", RunStatus.RUNNING),
        ("abandon", "terminate", RunStatus.RUNNING),
        ("abandon", "timeout", RunStatus.RUNNING),
    ],
)
async def test_parent_close_policies_apply_once_whatever_closes_the_parent(
    client: Client, worker_process: WorkerFactory, policy: str, how: str, expected: RunStatus
) -> None:
    """Issue 28: each policy, for each close reason, applied by the store (repair pass)."""
    worker_process(f"children-policy-{policy}-{how}", APP)
    child_id = _id("left-child")
    handle = await client.start_workflow(
        child_flows.LeavingParent,
        policy,
        "wait" if how in ("terminate", "timeout") else how,
        child_id,
        id=_id("leaving"),
        task_queue=child_flows.TASK_QUEUE,
        run_timeout=2 if how == "timeout" else None,
    )
    child = client.get_handle(child_id)

    async def child_exists() -> bool:
        return "ChildRunStarted" in [e.event_type for e in await handle.history()]

    await assert_eventually(child_exists, message="the child was started")
    if how == "terminate":
        await handle.terminate(reason="operator")
    elif how == "timeout":  # the run timeout, enforced by the repair pass
        with pytest.raises(WorkflowTimedOutError):
            await handle.result(timeout=60)
    elif how == "fail":
        with pytest.raises(WorkflowFailureError):
            await handle.result(timeout=60)
    else:
        assert await handle.result(timeout=60) == "done"

    async def child_settled() -> bool:
        status = (await child.describe()).run.status
        return status == expected if expected != RunStatus.RUNNING else True

    await assert_eventually(child_settled, message=f"child became {expected}")
    if expected == RunStatus.RUNNING:
        assert (await child.describe()).run.status == RunStatus.RUNNING
        states = [c.policy_state for c in (await handle.describe()).children]
        assert states == ["none"], "abandon marks nothing for the repair pass"
        await child.signal("release", "later")
        assert await child.result(timeout=60) == "later"
    else:
        child_types = [e.event_type for e in await child.history()]
        closing = "WorkflowTerminated" if expected == RunStatus.TERMINATED else "WorkflowCancelled"
        assert child_types.count(closing) == 1


@pytest.mark.parametrize(
    ("policy", "child_status"),
    [
        ("try_cancel", RunStatus.CANCELLED),
        ("wait_cancellation_completed", RunStatus.CANCELLED),
        ("abandon", RunStatus.RUNNING),
    ],
)
async def test_cancelling_a_parent_reaches_its_child_per_cancellation_policy(
    client: Client, worker_process: WorkerFactory, policy: str, child_status: RunStatus
) -> None:
    """Issue 28: parent cancellation propagates per the child's cancellation policy."""
    worker_process(f"children-cancel-{policy}", APP)
    child_id = _id("cancel-child")
    handle = await client.start_workflow(
        child_flows.CancellingParent,
        policy,
        child_id,
        id=_id("cancelling"),
        task_queue=child_flows.TASK_QUEUE,
    )
    child = client.get_handle(child_id)

    async def child_exists() -> bool:
        return "ChildRunStarted" in [e.event_type for e in await handle.history()]

    await assert_eventually(child_exists, message="the child was started")
    await handle.cancel(reason="customer left")
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result(timeout=60)
    assert caught.value.status == "cancelled"

    async def child_settled() -> bool:
        return (await child.describe()).run.status == child_status

    await assert_eventually(child_settled, message=f"child became {child_status}")
    parent_types = [e.event_type for e in await handle.history()]
    if policy == "wait_cancellation_completed":
        # The parent closed only after its child's cancellation came back as history.
        assert parent_types.index("ChildRunCancelled") < parent_types.index("WorkflowCancelled")
    if policy == "abandon":
        assert "ChildCancelRequested" not in parent_types
        await child.signal("release", "alone")
        assert await child.result(timeout=60) == "alone"


async def test_kill_9_between_starting_a_child_and_recording_it_starts_it_once(
    client: Client, worker_process: WorkerFactory, database_url: str, tmp_path: Path
) -> None:
    """Issue 28, D3: the child start is written with its workflow task or not at all."""
    notes = tmp_path / "pause.txt"
    first = worker_process("children-kill-a", APP)
    child_id = _id("kill-child")
    handle = await client.start_workflow(
        child_flows.KilledParent,
        str(notes),
        child_id,
        id=_id("killed"),
        task_queue=child_flows.TASK_QUEUE,
    )

    async def pausing() -> bool:
        # The file appears before its line is flushed: a kill in between would leave the
        # second worker thinking it is the first start, and it would pause for the full minute.
        return notes.exists() and "start" in notes.read_text()

    await assert_eventually(pausing, interval=0.01, message="the task is inside its local step")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert await fetchval(database_url, "SELECT count(*) FROM child_workflows") == 0
    worker_process("children-kill-b", APP)
    try:
        assert await handle.result(timeout=60) == 8
    except TimeoutError:
        tasks = await fetchval(
            database_url,
            "SELECT json_agg(w)::text FROM workflow_tasks w",
        )
        raise AssertionError(f"{tasks}\n{log_tail(tmp_path, 40)}") from None
    count = f"SELECT count(*) FROM runs WHERE workflow_id = '{child_id}'"
    assert await fetchval(database_url, count) == 1
    types = [e.event_type for e in await handle.history()]
    assert types.count("ChildWorkflowScheduled") == 1 and types.count("ChildRunCompleted") == 1
    assert notes.read_text().count("start") == 2
