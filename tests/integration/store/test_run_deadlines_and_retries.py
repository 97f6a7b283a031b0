"""Workflow timeouts and retries in the store (issue 28; D3, D4, M3, C4).

Deadlines are moved into the past in the database instead of waited for: the assertions read
what the repair pass and the completions recorded, never how long anything took.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.ready import RunChanged
from tests.support.store import QUEUE, claim_wf, execute, open_workflow_tasks, rows, start

POLICY: dict[str, Any] = {"max_attempts": 3, "initial_interval_seconds": 5.0}


async def run_of(store: Store, run_id: str) -> dict[str, Any]:
    [run] = [r for r in await rows(store, s.runs) if str(r["run_id"]) == run_id]
    return run


async def events_of(store: Store, run_id: str) -> list[dict[str, Any]]:
    return await rows(store, s.history_events, run_id)


async def pass_deadline(store: Store, run_id: str, column: str) -> None:
    await execute(
        store,
        f"UPDATE runs SET {column} = now() - interval '1 second' WHERE run_id = :run_id",
        run_id=run_id,
    )


async def fail_current_task(store: Store, run_id: str, **failure: Any) -> Any:
    await make_claimable(store, run_id)
    task = await claim_wf(store)
    assert task.lease.run_id == run_id
    return await store.complete_workflow_task(
        lease=task.lease, commands=[cmd.FailWorkflow(message="boom", **failure)]
    )


async def make_claimable(store: Store, run_id: str) -> None:
    await execute(
        store,
        "UPDATE workflow_tasks SET available_at = now() WHERE run_id = :run_id AND state = 'ready'",
        run_id=run_id,
    )


async def test_run_timeout_closes_the_run_timed_out(
    store: Store, run_changes: list[RunChanged]
) -> None:
    """Issue 28, D3: past its run deadline a run is closed `timed_out` by the repair pass."""
    run_id = await start(store, execution_timeout_seconds=600.0, run_timeout_seconds=60.0)
    assert (await store.sweep()).runs_timed_out == 0
    await pass_deadline(store, run_id, "run_deadline_at")

    swept = await store.sweep()

    assert swept.runs_timed_out == 1
    assert swept.changed >= 1
    run = await run_of(store, run_id)
    assert run["status"] == "timed_out"
    assert run["closed_at"] is not None
    assert run["continued_to_run_id"] is None
    assert run["failure"]["exception_type"] == "WorkflowTimedOut"
    assert run["failure"]["failure_category"] == "timeout"
    assert run["failure"]["timeout_kind"] == "run"
    last = (await events_of(store, run_id))[-1]
    assert last["event_type"] == "WorkflowTimedOut"
    assert last["payload"]["timeout_kind"] == "run"
    assert last["sequence"] == run["last_event_seq"]
    assert await open_workflow_tasks(store, run_id) == []
    [closed] = [c for c in run_changes if c.key == run_id]
    assert closed.outcome is not None and closed.outcome.status == "timed_out"
    assert (await store.sweep()).runs_timed_out == 0  # once only


async def test_execution_timeout_is_not_retried(store: Store) -> None:
    """Issue 28: past the execution deadline the chain is over, retry policy or not."""
    run_id = await start(store, execution_timeout_seconds=600.0, retry_policy=POLICY)
    await pass_deadline(store, run_id, "execution_deadline_at")

    assert (await store.sweep()).runs_timed_out == 1

    run = await run_of(store, run_id)
    assert (run["status"], run["continued_to_run_id"]) == ("timed_out", None)
    assert run["failure"]["timeout_kind"] == "execution"
    [only] = [r for r in await rows(store, s.runs) if r["workflow_id"] == "wf-1"]
    assert str(only["run_id"]) == run_id


async def test_run_timeout_with_retry_policy_retries_after_backoff(store: Store) -> None:
    """Issue 28, M3: a run timed out by its run deadline is retried, claimable after backoff."""
    run_id = await start(
        store, execution_timeout_seconds=600.0, run_timeout_seconds=60.0, retry_policy=POLICY
    )
    first = await run_of(store, run_id)
    await pass_deadline(store, run_id, "run_deadline_at")

    await store.sweep()

    run = await run_of(store, run_id)
    assert run["status"] == "timed_out"
    retry_id = str(run["continued_to_run_id"])
    retry = await run_of(store, retry_id)
    assert (retry["status"], retry["retry_attempt"]) == ("running", 2)
    assert str(retry["retry_of_run_id"]) == run_id
    assert retry["execution_deadline_at"] == first["execution_deadline_at"]
    assert retry["run_deadline_at"] > run["closed_at"]
    [task] = await open_workflow_tasks(store, retry_id)
    assert task["available_at"] >= run["closed_at"] + timedelta(seconds=5)


async def test_failed_run_is_retried_with_attempts_and_backoff(
    store: Store, run_changes: list[RunChanged]
) -> None:
    """Issue 28, M3: a failed run is retried as attempt n+1 after the policy's backoff."""
    run_id = await start(store, retry_policy=POLICY)

    outcome = await fail_current_task(store, run_id)

    failed = await run_of(store, run_id)
    assert outcome.closed_status is not None and outcome.closed_status.value == "failed"
    assert failed["status"] == "failed"
    assert (await events_of(store, run_id))[-1]["event_type"] == "WorkflowFailed"
    second_id = str(failed["continued_to_run_id"])
    second = await run_of(store, second_id)
    assert (second["retry_attempt"], str(second["retry_of_run_id"])) == (2, run_id)
    assert second["input"] == failed["input"]
    assert second["workflow_type"] == failed["workflow_type"]
    assert second["task_queue"] == QUEUE
    [task] = await open_workflow_tasks(store, second_id)
    assert task["available_at"] >= failed["closed_at"] + timedelta(seconds=5)
    [started] = await events_of(store, second_id)
    assert started["payload"]["retry_attempt"] == 2
    assert started["payload"]["retry_of_run_id"] == run_id
    [closed] = [c for c in run_changes if c.key == run_id]
    assert closed.outcome is not None and closed.outcome.continued_to_run_id == second_id

    await fail_current_task(store, second_id)
    third_id = str((await run_of(store, second_id))["continued_to_run_id"])
    [task] = await open_workflow_tasks(store, third_id)
    second_closed = (await run_of(store, second_id))["closed_at"]
    assert task["available_at"] >= second_closed + timedelta(seconds=10)  # 5 s x 2.0

    await fail_current_task(store, third_id)
    third = await run_of(store, third_id)
    assert (third["status"], third["retry_attempt"], third["continued_to_run_id"]) == (
        "failed",
        3,
        None,
    )  # max_attempts 3 reached


@pytest.mark.parametrize(
    ("policy", "failure"),
    [
        ({**POLICY, "non_retryable_error_types": ["Fatal"]}, {"exception_type": "Fatal"}),
        (POLICY, {"non_retryable": True}),
        ({"max_attempts": 1}, {}),
        ({"backoff_seconds": [3600.0]}, {}),  # past the execution deadline
    ],
    ids=["error-type", "non-retryable", "one-attempt", "past-execution-deadline"],
)
async def test_failure_the_policy_does_not_retry_closes_the_chain(
    store: Store, policy: dict[str, Any], failure: dict[str, Any]
) -> None:
    """Issue 28: a non-retryable failure, a spent policy or a late retry ends the chain."""
    run_id = await start(store, retry_policy=policy, execution_timeout_seconds=600.0)

    await fail_current_task(store, run_id, **failure)

    run = await run_of(store, run_id)
    assert (run["status"], run["continued_to_run_id"]) == ("failed", None)
    assert len([r for r in await rows(store, s.runs) if r["workflow_id"] == "wf-1"]) == 1


async def test_cancelled_and_terminated_runs_are_not_retried(store: Store) -> None:
    """Issue 28: only a failure is retried, never a cancellation or a termination."""
    cancelled = await start(store, "wf-c", retry_policy=POLICY)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[cmd.CancelWorkflow(message="stop")]
    )
    terminated = await start(store, "wf-t", retry_policy=POLICY)
    await store.terminate_workflow(namespace="default", workflow_id="wf-t", reason="stop")

    for run_id, status in ((cancelled, "cancelled"), (terminated, "terminated")):
        run = await run_of(store, run_id)
        assert (run["status"], run["continued_to_run_id"]) == (status, None)
    assert len(await rows(store, s.runs)) == 2


async def test_continue_as_new_keeps_the_execution_deadline_and_renews_the_run_one(
    store: Store,
) -> None:
    """Issue 28: the execution deadline covers the chain; each run gets its own run deadline."""
    run_id = await start(store, execution_timeout_seconds=600.0, run_timeout_seconds=60.0)
    await execute(
        store,
        "UPDATE runs SET run_deadline_at = run_deadline_at - interval '30 seconds'"
        " WHERE run_id = :run_id",
        run_id=run_id,
    )
    first = await run_of(store, run_id)
    task = await claim_wf(store)
    continued = cmd.ContinueAsNew(arguments=codec.encode([2]), workflow_type="Flow", queue=QUEUE)

    outcome = await store.complete_workflow_task(lease=task.lease, commands=[continued])

    assert outcome.continued_run_id is not None
    second = await run_of(store, outcome.continued_run_id)
    assert second["execution_deadline_at"] == first["execution_deadline_at"]
    assert second["run_deadline_at"] > first["run_deadline_at"]
    await pass_deadline(store, outcome.continued_run_id, "execution_deadline_at")
    await store.sweep()
    second = await run_of(store, outcome.continued_run_id)
    assert (second["status"], second["failure"]["timeout_kind"]) == ("timed_out", "execution")


async def test_next_timer_at_includes_the_earliest_run_deadline(store: Store) -> None:
    """C4: the repair loop wakes when a run deadline passes, with no timer pending."""
    assert (await store.sweep()).next_timer_at is None
    run_id = await start(store, run_timeout_seconds=60.0)

    swept = await store.sweep()

    assert swept.next_timer_at == (await run_of(store, run_id))["run_deadline_at"]


# -- a child's retries and timeout, as its parent hears them -----------------------------------


async def start_child(store: Store, **options: Any) -> tuple[str, str]:
    """A parent run that started a child (workflow id `child-1`): (parent run, child run)."""
    parent_id = await start(store, "parent-1")
    task = await claim_wf(store)
    child = cmd.StartChildWorkflow(
        workflow_type="Flow",
        queue=QUEUE,
        arguments=codec.encode([1]),
        workflow_id="child-1",
        **options,
    )
    await store.complete_workflow_task(lease=task.lease, commands=[child])
    [child_run] = [r for r in await rows(store, s.runs) if r["workflow_id"] == "child-1"]
    return parent_id, str(child_run["run_id"])


async def child_events(store: Store, parent_id: str) -> list[str]:
    return [
        e["event_type"]
        for e in await rows(store, s.inbox_events, parent_id)
        if e["event_type"].startswith("ChildRun")
    ]


async def test_a_retried_child_reports_only_its_last_run_to_the_parent(store: Store) -> None:
    """Issue 28: the parent waits for the child's chain; a retry is not a close."""
    parent_id, child_id = await start_child(store, retry_policy={"max_attempts": 2})

    await fail_current_task(store, child_id)

    retry_id = str((await run_of(store, child_id))["continued_to_run_id"])
    retry = await run_of(store, retry_id)
    assert (str(retry["parent_run_id"]), retry["retry_attempt"]) == (parent_id, 2)
    assert await child_events(store, parent_id) == []
    await fail_current_task(store, retry_id)
    assert await child_events(store, parent_id) == ["ChildRunFailed"]


async def test_a_timed_out_child_reports_a_timeout_to_the_parent(store: Store) -> None:
    """Issue 28: a child closed by its run timeout reaches its parent as a timeout failure."""
    parent_id, child_id = await start_child(store, run_timeout_seconds=60.0)
    await pass_deadline(store, child_id, "run_deadline_at")

    await store.sweep()

    assert (await run_of(store, child_id))["status"] == "timed_out"
    [event] = [
        e
        for e in await rows(store, s.inbox_events, parent_id)
        if e["event_type"] == "ChildRunFailed"
    ]
    assert event["payload"]["failure_category"] == "timeout"
    assert event["payload"]["exception_type"] == "WorkflowTimedOut"
