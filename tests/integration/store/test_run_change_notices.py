"""Result wakes start at the store: a commit reports what clients wait on, after it commits.

Issue 12: a run closing, an update completing and a query answered each give a `RunChanged`
notice keyed by what the waiter binds (run id, or query task id), only once the transaction
committed (broker invariant 1); a refused completion reports nothing.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest

from burrow.store import Store
from burrow.store.claims import QueueFilter
from burrow.store.errors import StaleLease
from burrow.store.ready import (
    MAX_OUTCOME_BYTES,
    Change,
    RunChanged,
    RunChangeMessage,
    RunOutcome,
)
from tests.support.store import LEASE, NS, QUEUE, blob, claim_wf, start

COMPLETE = {"type": "complete_workflow", "result": blob(7)}


def changes(recorded: list[RunChanged]) -> list[tuple[str, Change]]:
    return [(n.key, n.change) for n in recorded]


async def test_a_closing_completion_reports_the_run_closed(
    store: Store, run_changes: list[RunChanged]
) -> None:
    run_id = await start(store)
    task = await claim_wf(store)
    assert run_changes == []
    await store.complete_workflow_task(lease=task.lease, commands=[COMPLETE])
    assert changes(run_changes) == [(run_id, Change.CLOSED)]
    assert run_changes[0].namespace == NS
    # The outcome rides along, as committed: the waiter need not read it back.
    run = await store.get_run(namespace=NS, workflow_id="wf-1")
    assert run_changes[0].outcome == RunOutcome(status="completed", result=run.result)
    message = RunChangeMessage.decode(run_changes[0].message())
    assert message is not None and message.outcome == run_changes[0].outcome


def test_an_outcome_too_large_for_a_wake_is_left_out() -> None:
    big = RunOutcome(status="completed", result={"blob": "x" * MAX_OUTCOME_BYTES})
    message = RunChangeMessage.decode(RunChanged(NS, "run", Change.CLOSED, big).message())
    assert message == RunChangeMessage(change=Change.CLOSED, outcome=None)
    assert RunChangeMessage.decode(b"closed") is None  # not a message: still a wake


async def test_a_completion_that_leaves_the_run_open_reports_nothing(
    store: Store, run_changes: list[RunChanged]
) -> None:
    await start(store)
    task = await claim_wf(store)
    timer = {"type": "start_timer", "sequence": 1, "delay_seconds": 60}
    await store.complete_workflow_task(lease=task.lease, commands=[timer])
    assert run_changes == []


async def test_a_refused_completion_reports_nothing(
    store: Store, run_changes: list[RunChanged]
) -> None:
    await start(store)
    task = await claim_wf(store)
    stale = dataclasses.replace(task.lease, lease_token=str(uuid.uuid4()))
    with pytest.raises(StaleLease):
        await store.complete_workflow_task(lease=stale, commands=[COMPLETE])
    assert run_changes == []


async def test_terminate_reports_the_run_closed(
    store: Store, run_changes: list[RunChanged]
) -> None:
    run_id = await start(store)
    await store.terminate_workflow(namespace=NS, workflow_id="wf-1", reason="test")
    assert changes(run_changes) == [(run_id, Change.CLOSED)]
    outcome = run_changes[0].outcome
    assert outcome is not None and outcome.status == "terminated"
    assert outcome.failure == {"message": "test", "exception_type": "Terminated"}


async def test_an_update_completion_reports_the_update(
    store: Store, run_changes: list[RunChanged]
) -> None:
    run_id = await start(store)
    await store.submit_update(
        namespace=NS, workflow_id="wf-1", update_name="bump", arguments=blob(), update_id="u1"
    )
    task = await claim_wf(store)
    done = {"type": "complete_update", "update_id": "u1", "result": blob(2)}
    await store.complete_workflow_task(lease=task.lease, commands=[done])
    assert changes(run_changes) == [(run_id, Change.UPDATE)]


async def test_a_query_answer_reports_the_query_task(
    store: Store, run_changes: list[RunChanged]
) -> None:
    await start(store)
    task_id = await store.submit_query(
        namespace=NS,
        workflow_id="wf-1",
        query_name="status",
        arguments=blob(),
        timeout=timedelta(seconds=30),
    )
    flt = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"])
    claimed = await store.claim_query_task(flt=flt, worker_id="w1", lease=LEASE)
    assert claimed is not None
    await store.answer_query_task(lease=claimed.lease, result=blob(3), failure=None)
    assert changes(run_changes) == [(task_id, Change.QUERY)]


async def test_closed_runs_answers_for_many_runs_in_one_query(store: Store) -> None:
    """The fallback poll's question: which of these runs have closed, and how."""
    open_id = await start(store, "wf-open")
    closed_id = await start(store, "wf-closed")
    await store.terminate_workflow(namespace=NS, workflow_id="wf-closed")
    closed = await store.closed_runs([open_id, closed_id])
    assert list(closed) == [closed_id]
    run = await store.get_run(namespace=NS, workflow_id="wf-closed")
    assert closed[closed_id] == RunOutcome(status="terminated", failure=run.failure)
    assert await store.closed_runs([]) == {}
