"""An activity's result written with the workflow task it wakes: one statement, same outcome.

A worker holding the run warm runs the code on with the result, then writes the attempt's
completion, the ActivityCompleted event and that task's commands at once
(store/completion/at_position.py). What it leaves must be what the two-step path leaves (the
completion, then a claimed follow-up task's completion), and when the run is not idle at the
warm position nothing may be written (store invariants 2-4).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import EagerClaim
from burrow.store.completion import plan
from burrow.store.completion.at_position import WorkflowTaskRun
from burrow.store.models import ClaimedActivityTask, RunPosition, RunStatus
from burrow.store.ready import RunChanged
from burrow.worker.completion import moved_to
from tests.support.store import (
    ACT,
    LEASE,
    WF,
    blob,
    claim_wf,
    db_now,
    durable_outcome,
    rows,
    schedule,
    snapshot,
    start,
)

TTL = timedelta(minutes=5)

NEXT: dict[str, list[dict[str, Any]]] = {
    "complete": [{"type": "complete_workflow", "result": blob(7)}],
    "another activity": [schedule(2)],
    "two activities and a timer": [
        schedule(2),
        schedule(3),
        {"type": "start_timer", "sequence": 4, "delay_seconds": 30},
    ],
    "side effect then complete": [
        {"type": "record_side_effect", "sequence": 2, "result": blob(2)},
        {"type": "complete_workflow", "result": blob(7)},
    ],
    "fail": [{"type": "fail_workflow", "message": "boom", "exception_type": "ValueError"}],
    "nothing": [],
}


async def _waiting(store: Store, workflow_id: str) -> tuple[str, ClaimedActivityTask, RunPosition]:
    """A run waiting on the leased activity of step 1, and where its last completion left it.

    Work is leased eagerly, never claimed from the queue, so runs of one test stay apart.
    """
    run_id = await start(store, workflow_id=workflow_id)
    task = await claim_wf(store)
    assert task.position is not None and task.run.run_id == run_id
    outcome = await store.complete_workflow_task(
        lease=task.lease,
        commands=[schedule(1)],
        eager=EagerClaim(flt=ACT, worker_id="w1", lease=LEASE),
        sticky_ttl=TTL,
        position=task.position,
    )
    [attempt] = outcome.eager_activities  # its ActivityStarted waits in the inbox
    return run_id, attempt, moved_to(task.position, outcome)


def _next_task(store_now: Any, position: RunPosition, name: str) -> WorkflowTaskRun:
    workflow_task_id = str(uuid.uuid4())
    return WorkflowTaskRun(
        workflow_task_id=workflow_task_id,
        run=position.run,
        workflow_time=store_now,
        commands=plan.parse_commands(workflow_task_id, NEXT[name]),
    )


@pytest.mark.parametrize("name", list(NEXT))
async def test_written_together_leaves_what_two_completions_leave(store: Store, name: str) -> None:
    """Store invariant 3: events, run, tasks, activities and timers as the two-step path."""
    together, attempt, position = await _waiting(store, f"together-{name}")
    outcome = await store.complete_activity_with_workflow_task(
        lease=attempt.lease,
        result=blob(5),
        task=_next_task(await db_now(store), position, name),
        sticky_ttl=TTL,
    )
    assert outcome is not None

    apart, attempt, _ = await _waiting(store, f"apart-{name}")
    done = await store.complete_activity_task(
        lease=attempt.lease, result=blob(5), eager=EagerClaim(flt=WF, worker_id="w1", lease=LEASE)
    )
    follow_up = done.follow_up
    assert follow_up is not None
    await store.complete_workflow_task(
        lease=follow_up.lease, commands=NEXT[name], sticky_ttl=TTL, position=follow_up.position
    )

    assert await durable_outcome(store, together) == await durable_outcome(store, apart)
    [run] = await rows(store, s.runs, together)
    assert outcome.last_event_seq == run["last_event_seq"]
    assert outcome.last_step_seq == run["last_step_seq"]


async def test_the_result_and_the_task_events_form_one_activation(store: Store) -> None:
    """S12, D1, D3: the moved inbox, the result and the task's events share the new task's id.

    The result records the time the code saw (`workflow_time`), so a cold replay sees that time
    too; its `recorded_at` is the database's stamp (test_history_stamps.py).
    """
    run_id, attempt, position = await _waiting(store, "activation")
    seen = await db_now(store)
    task = _next_task(seen, position, "complete")

    await store.complete_activity_with_workflow_task(lease=attempt.lease, result=blob(5), task=task)

    events = await rows(store, s.history_events, run_id)
    tail = events[position.run.last_event_seq :]
    assert [e["event_type"] for e in tail] == [
        "ActivityStarted",
        "ActivityCompleted",
        "WorkflowCompleted",
    ]
    assert {e["workflow_task_id"] for e in tail} == {task.workflow_task_id}
    assert datetime.fromisoformat(tail[1]["payload"]["workflow_time"]) == seen
    assert tail[1]["payload"]["result"] == blob(5)["blob"]
    task_rows = {t["task_id"]: t for t in await rows(store, s.workflow_tasks, run_id)}
    assert task_rows[task.workflow_task_id]["state"] == "completed"
    [activity] = await rows(store, s.activity_tasks, run_id)
    assert activity["state"] == "completed"


async def test_a_closing_task_wakes_the_result_waiters(
    store: Store, run_changes: list[RunChanged]
) -> None:
    """The run's close is published after the one commit, with its outcome."""
    run_id, attempt, position = await _waiting(store, "closing")

    await store.complete_activity_with_workflow_task(
        lease=attempt.lease,
        result=blob(5),
        task=_next_task(await db_now(store), position, "complete"),
    )

    [run] = await rows(store, s.runs, run_id)
    assert run["status"] == RunStatus.COMPLETED
    closed = [c for c in run_changes if c.key == run_id and c.outcome is not None]
    assert [c.outcome.result for c in closed if c.outcome] == [blob(7)]


async def test_a_run_with_a_signal_waiting_writes_nothing(store: Store) -> None:
    """Store invariant 4: a task must observe the signal too, so nothing is written together."""
    run_id, attempt, position = await _waiting(store, "signalled")
    await store.signal_workflow(
        namespace="default",
        workflow_id="signalled",
        signal_name="go",
        arguments=blob(1),
        signal_id="go-1",
    )
    before = await snapshot(store, run_id)

    outcome = await store.complete_activity_with_workflow_task(
        lease=attempt.lease,
        result=blob(5),
        task=_next_task(await db_now(store), position, "complete"),
    )

    assert outcome is None
    assert await snapshot(store, run_id) == before


async def test_a_stale_lease_or_a_moved_run_writes_nothing(store: Store) -> None:
    """Store invariant 2: a stale attempt, or a warm position the run has left, writes nothing."""
    run_id, attempt, position = await _waiting(store, "stale")
    before = await snapshot(store, run_id)
    stale = dataclasses.replace(attempt.lease, lease_token=str(uuid.uuid4()))
    behind = dataclasses.replace(position, run=dataclasses.replace(position.run, last_event_seq=1))
    now = await db_now(store)

    for lease, at in ((stale, position), (attempt.lease, behind)):
        outcome = await store.complete_activity_with_workflow_task(
            lease=lease, result=blob(5), task=_next_task(now, at, "complete")
        )
        assert outcome is None
    assert await snapshot(store, run_id) == before


async def test_a_signal_committed_while_waiting_for_the_run_lock_is_not_missed(
    store: Store, database_url: str
) -> None:
    """Store invariant 4: the statement looks afresh once it holds the run (burrow_run_idle).

    A signal's transaction holds the run's lock while the statement starts, so the statement's
    own snapshot predates the signal and its task; only the fresh look sees them.
    """
    run_id, attempt, position = await _waiting(store, "raced")
    task = _next_task(await db_now(store), position, "complete")
    signaller = await asyncpg.connect(database_url)
    try:
        async with signaller.transaction():
            await signaller.execute(
                "SELECT 1 FROM runs WHERE run_id = $1 FOR NO KEY UPDATE", run_id
            )
            await signaller.execute(
                "INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key)"
                " VALUES ($1, 'SignalReceived', '{}', 'signal:raced')",
                run_id,
            )
            await signaller.execute(
                "INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace,"
                " connection, queue) VALUES ($1, $2, 'Flow', 'default', 'default', 'q')",
                uuid.uuid4(),
                run_id,
            )
            racing = asyncio.create_task(
                store.complete_activity_with_workflow_task(
                    lease=attempt.lease, result=blob(5), task=task
                )
            )
            await asyncio.sleep(0.3)  # the statement is waiting for the run's lock
            assert not racing.done()
        outcome = await racing
    finally:
        await signaller.close()

    assert outcome is None
    [activity] = await rows(store, s.activity_tasks, run_id)
    assert activity["state"] == "leased"
    events = await rows(store, s.history_events, run_id)
    assert len(events) == position.run.last_event_seq
