"""A waking event never waits without a workflow task, however its writer's snapshot was stale.

Store invariant 4. The writers that queue an event and lock the run in one statement (an
activity's result, a child's close) read the run's workflow task as of the statement's start.
A claim that leased the task while such a writer waited for the run is invisible to it: the
writer neither makes a task (one is open) nor flags the leased one. If the leased task's
completion is itself one statement that started before the writer committed, its snapshot
misses the event too. The completion reads the inbox afresh once it holds the run, so the event
gets its task whatever either snapshot saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import sqlalchemy as sa

from burrow.store import Store, runs, signals
from burrow.store import schema as s
from burrow.store.claims import QueueFilter
from burrow.store.transactions import Txn
from burrow.testing.helpers import assert_eventually
from tests.support.store import (
    LEASE,
    NS,
    blob,
    claim_act,
    claim_wf,
    rows,
    start,
    start_with_activity,
)

CHILD_QUEUE = "children-q"


def _lock_waits(store: Store, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        async with store.engine.connect() as conn:
            waiting = await conn.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        return bool(waiting == count)

    return check


async def _write_between_a_claim_and_a_completion(
    store: Store, run_id: str, key: str, write: Callable[[], Awaitable[object]]
) -> None:
    """Run `write` (a one-statement inbox writer for `run_id` under idempotency key `key`) so
    that a claim of the run's ready task commits while it waits for the run, and the claimed
    task's one-statement completion starts before it commits. The run has an unapplied event
    (the claim stops on its row) and a ready workflow task."""
    async with store.engine.connect() as inbox_row, store.engine.connect() as held_key:
        # The claim stops on the waiting event's inbox row, holding the ready task and the run.
        await inbox_row.execute(
            sa.text("SELECT id FROM inbox_events WHERE run_id = CAST(:r AS uuid) FOR UPDATE"),
            {"r": run_id},
        )
        claiming = asyncio.ensure_future(claim_wf(store))
        await assert_eventually(_lock_waits(store, 1), message="the claim waits")
        # The writer will stop on its own inbox key once it holds the run.
        await held_key.execute(
            sa.text(
                "INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key)"
                " VALUES (CAST(:r AS uuid), 'Held', '{}', :key)"
            ),
            {"r": run_id, "key": key},
        )
        writing = asyncio.ensure_future(write())
        await assert_eventually(_lock_waits(store, 2), message="the writer waits for the run")
        await inbox_row.rollback()
        task = await claiming  # leased; the writer now holds the run
        await assert_eventually(_lock_waits(store, 1), message="the writer waits on its key")
        completing = asyncio.ensure_future(
            store.complete_workflow_task(lease=task.lease, commands=[], position=task.position)
        )
        await assert_eventually(_lock_waits(store, 2), message="the completion waits")
        await held_key.rollback()
        await writing
        await completing


async def _observed_by_the_next_task(store: Store, run_id: str, event_type: str) -> None:
    tasks = await rows(store, s.workflow_tasks, run_id)
    assert [t["state"] for t in tasks].count("ready") == 1, tasks
    inbox = await rows(store, s.inbox_events, run_id)
    assert [e["event_type"] for e in inbox if not e["applied"]] == [event_type]
    history = (await claim_wf(store)).history
    assert history[-1].event_type == event_type


async def _signal(store: Store, run_id: str) -> None:
    """A signal: an inbox event and a ready workflow task for the run."""
    async with store.transactions.begin() as conn:
        run = await runs.lock_run(conn, run_id=run_id)
        await signals.signal_run(
            Txn(conn), run=run, signal_name="go", arguments=blob(1), signal_id="go-1"
        )


async def test_an_activity_result_written_past_a_claim_and_before_a_completion_gets_a_task(
    store: Store,
) -> None:
    """Store invariant 4, D3: the result's statement saw the task ready (a claim leased it
    while the statement waited for the run), and the task's one-statement completion started
    before the result committed: the completion still makes the task that observes it."""
    run_id = await start_with_activity(store)
    attempt = await claim_act(store)
    await _signal(store, run_id)
    [activity] = await rows(store, s.activity_tasks, run_id)

    await _write_between_a_claim_and_a_completion(
        store,
        run_id,
        f"activity:{activity['activity_execution_id']}:closed",
        lambda: store.complete_activity_task(lease=attempt.lease, result=blob(2)),
    )

    await _observed_by_the_next_task(store, run_id, "ActivityCompleted")


async def test_a_child_close_written_past_a_claim_and_before_a_completion_gets_a_task(
    store: Store,
) -> None:
    """Store invariant 4, D3: the same race with the other one-statement writer, a child's
    close reported to its parent by the child's own completion."""
    parent = await start(store)
    task = await claim_wf(store)
    start_child = {
        "type": "start_child_workflow",
        "workflow_type": "Leaf",
        "queue": CHILD_QUEUE,
        "workflow_id": "kid",
        "arguments": blob(2),
        "parent_close_policy": "terminate",
    }
    await store.complete_workflow_task(lease=task.lease, commands=[start_child])
    leaf = QueueFilter(namespace=NS, queue=CHILD_QUEUE, types=["Leaf"])
    kid_task = await store.claim_workflow_task(flt=leaf, worker_id="w2", lease=LEASE)
    assert kid_task is not None
    await _signal(store, parent)
    close_kid = {"type": "complete_workflow", "result": blob(9)}

    await _write_between_a_claim_and_a_completion(
        store,
        parent,
        "child:1:closed",
        lambda: store.complete_workflow_task(
            lease=kid_task.lease, commands=[close_kid], position=kid_task.position
        ),
    )

    await _observed_by_the_next_task(store, parent, "ChildRunCompleted")
