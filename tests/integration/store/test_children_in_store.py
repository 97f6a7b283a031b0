"""Child workflows in the store, without a worker (issue 28).

The parent's completion starts the child in its own transaction; the child's close reaches the
parent's inbox and makes its next task; the parent's close marks its children and the repair
pass, not a worker, applies each close policy exactly once.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import QueueFilter
from burrow.store.errors import InvalidCommandReference
from burrow.store.models import RunStatus
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    blob,
    claim_wf,
    open_workflow_tasks,
    rows,
    start,
)

CHILD_QUEUE = "children-q"


def child(policy: str = "terminate", child_id: str | None = None) -> dict[str, Any]:
    command: dict[str, Any] = {
        "type": "start_child_workflow",
        "workflow_type": "Leaf",
        "queue": CHILD_QUEUE,
        "arguments": blob(2),
        "parent_close_policy": policy,
    }
    if child_id is not None:
        command["workflow_id"] = child_id
    return command


COMPLETE = {"type": "complete_workflow", "result": blob(9)}


async def types(store: Store, run_id: str) -> list[str]:
    return [e.event_type for e in await store.read_history(run_id=run_id)]


async def inbox(store: Store, run_id: str) -> list[str]:
    """The events waiting in the run's inbox."""
    waiting = [row for row in await rows(store, s.inbox_events, run_id) if not row["applied"]]
    return [row["event_type"] for row in waiting]


async def next_parent_task(store: Store) -> Any:
    """A signal gives the waiting parent (wf-1) its next workflow task, claimed."""
    await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s1"
    )
    return await claim_wf(store)


async def parent_with_child(store: Store, policy: str = "terminate") -> tuple[str, str]:
    """A parent whose first task started one child (step 1): (parent run, child run)."""
    parent = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[child(policy, "kid")])
    run = await store.get_run(namespace=NS, workflow_id="kid")
    return parent, run.run_id


async def test_the_completion_starts_the_child_with_its_parent_named(store: Store) -> None:
    """Issue 28: the child's first run, its task and the parent's two events, in one commit."""
    parent, kid = await parent_with_child(store)
    assert (await types(store, parent))[-2:] == ["ChildWorkflowScheduled", "ChildRunStarted"]
    started = (await store.read_history(run_id=kid))[0].payload
    assert started["parent_workflow_run_id"] == parent and started["parent_sequence"] == 1
    run = await store.get_run(namespace=NS, workflow_id="kid")
    assert run.parent_run_id == parent and run.parent_workflow_id == "wf-1"
    assert [t["queue"] for t in await open_workflow_tasks(store, kid)] == [CHILD_QUEUE]


async def test_a_child_close_wakes_its_parent_with_the_result(store: Store) -> None:
    """Issue 28: ChildRunCompleted joins the parent's inbox and a parent task is made."""
    parent, _ = await parent_with_child(store)
    assert await open_workflow_tasks(store, parent) == []
    leaf = QueueFilter(namespace=NS, queue=CHILD_QUEUE, types=["Leaf"])
    kid_task = await store.claim_workflow_task(flt=leaf, worker_id="w2", lease=LEASE)
    assert kid_task is not None
    await store.complete_workflow_task(lease=kid_task.lease, commands=[COMPLETE])
    assert await inbox(store, parent) == ["ChildRunCompleted"]
    assert len(await open_workflow_tasks(store, parent)) == 1
    claimed = await claim_wf(store)
    closed = [e for e in claimed.history if e.event_type == "ChildRunCompleted"]
    assert closed[0].payload["output"] == blob(9)["blob"] and closed[0].payload["sequence"] == 1


@pytest.mark.parametrize(("policy", "status"), [("terminate", "terminated"), ("abandon", None)])
async def test_the_parent_close_policy_is_applied_once_by_the_repair_pass(
    store: Store, policy: str, status: str | None
) -> None:
    """Issue 28: the close marks the child; sweeps (no worker) apply it once, or never."""
    parent, kid = await parent_with_child(store, policy)
    task = await next_parent_task(store)
    await store.complete_workflow_task(lease=task.lease, commands=[COMPLETE])
    [row] = await rows(store, s.child_workflows)
    assert row["policy_state"] == ("pending" if status else "none")
    for _ in range(3):
        await store.sweep()
    run = await store.get_run(namespace=NS, workflow_id="kid")
    if status is None:
        assert run.status == RunStatus.RUNNING
        return
    assert run.status == status
    assert (await types(store, kid)).count("WorkflowTerminated") == 1
    [row] = await rows(store, s.child_workflows)
    assert row["policy_state"] == "applied" and row["state"] == "closed"
    assert await inbox(store, parent) == []  # a closed parent hears nothing more


async def test_continue_as_new_keeps_the_children_running(store: Store) -> None:
    """Issue 28: a parent that continues as new applies no close policy."""
    await parent_with_child(store)
    task = await next_parent_task(store)
    again = {
        "type": "continue_as_new",
        "arguments": blob(),
        "workflow_type": "Flow",
        "queue": QUEUE,
    }
    await store.complete_workflow_task(lease=task.lease, commands=[again])
    await store.sweep()
    [row] = await rows(store, s.child_workflows)
    assert row["policy_state"] == "none"
    assert (await store.get_run(namespace=NS, workflow_id="kid")).status == RunStatus.RUNNING


async def test_a_running_child_id_fails_the_start_and_creates_nothing(store: Store) -> None:
    """Issue 28: the second start of a running id is a ChildRunFailed for the parent."""
    await start(store, "kid")  # a run of the id, started by someone else
    parent = await start(store)
    task = await claim_wf(store)  # the oldest ready task: kid's
    await store.complete_workflow_task(lease=task.lease, commands=[])
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[child("terminate", "kid")])
    assert await inbox(store, parent) == ["ChildRunFailed"]
    failed = (await rows(store, s.inbox_events, parent))[0]["payload"]
    assert failed["exception_type"] == "ChildWorkflowAlreadyStarted"
    assert await rows(store, s.child_workflows) == []
    assert len(await open_workflow_tasks(store, parent)) == 1


async def test_signalling_or_cancelling_a_step_that_started_no_child_is_refused(
    store: Store,
) -> None:
    """Issue 28, issue 25 item 6: a child reference to nothing writes nothing."""
    await start(store)
    task = await claim_wf(store)
    signal = {
        "type": "signal_child_workflow",
        "child_sequence": 7,
        "signal_name": "go",
        "arguments": blob(),
    }
    with pytest.raises(InvalidCommandReference, match="started no child"):
        await store.complete_workflow_task(lease=task.lease, commands=[signal])
    with pytest.raises(InvalidCommandReference, match="started no child"):
        await store.complete_workflow_task(
            lease=task.lease, commands=[{"type": "cancel_child_workflow", "sequence": 7}]
        )


async def test_a_child_close_in_one_statement_reports_to_its_parent(store: Store) -> None:
    """Issue 28: the one-statement completion of a child's close queues its parent's event,
    with the policies of the parent's row, and makes the parent's next task."""
    parent, kid = await parent_with_child(store, "request_cancel")
    leaf = QueueFilter(namespace=NS, queue=CHILD_QUEUE, types=["Leaf"])
    kid_task = await store.claim_workflow_task(flt=leaf, worker_id="w2", lease=LEASE)
    assert kid_task is not None and kid_task.position is not None
    done = await store.complete_workflow_task(
        lease=kid_task.lease, commands=[COMPLETE], position=kid_task.position
    )
    assert done.task is None, "written by the one-statement form, not the transactional one"
    [event] = [r for r in await rows(store, s.inbox_events, parent) if not r["applied"]]
    assert event["event_type"] == "ChildRunCompleted"
    assert event["idempotency_key"] == "child:1:closed"
    payload = event["payload"]
    assert payload["parent_close_policy"] == "request_cancel"
    assert payload["child_workflow_run_id"] == kid and payload["output"] == blob(9)["blob"]
    assert len(await open_workflow_tasks(store, parent)) == 1
    [row] = await rows(store, s.child_workflows)
    assert row["state"] == "closed" and row["closed_status"] == "completed"


async def test_a_child_close_flags_the_parent_task_already_leased(store: Store) -> None:
    """Issue 28: a parent busy in a task when its child closes gets a follow-up task."""
    await parent_with_child(store)
    busy = await next_parent_task(store)
    leaf = QueueFilter(namespace=NS, queue=CHILD_QUEUE, types=["Leaf"])
    kid_task = await store.claim_workflow_task(flt=leaf, worker_id="w2", lease=LEASE)
    assert kid_task is not None
    await store.complete_workflow_task(
        lease=kid_task.lease, commands=[COMPLETE], position=kid_task.position
    )
    outcome = await store.complete_workflow_task(
        lease=busy.lease, commands=[], position=busy.position
    )
    assert outcome.workflow_task_created
    follow = await claim_wf(store)
    assert "ChildRunCompleted" in [e.event_type for e in follow.history]
