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
from burrow.store.transactions import Txn
from burrow.testing.helpers import assert_eventually
from tests.support.store import blob, claim_act, claim_wf, rows, start_with_activity


def _lock_waits(store: Store, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        async with store.engine.connect() as conn:
            waiting = await conn.scalar(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
        return waiting == count

    return check


async def test_an_activity_result_written_past_a_claim_and_before_a_completion_gets_a_task(
    store: Store,
) -> None:
    """Store invariant 4, D3: the result's statement saw the task ready (a claim leased it
    while the statement waited for the run), and the task's one-statement completion started
    before the result committed: the completion still makes the task that observes it."""
    run_id = await start_with_activity(store)
    attempt = await claim_act(store)
    async with store.transactions.begin() as conn:
        run = await runs.lock_run(conn, run_id=run_id)
        await signals.signal_run(
            Txn(conn), run=run, signal_name="go", arguments=blob(1), signal_id="go-1"
        )
    [activity] = await rows(store, s.activity_tasks, run_id)
    closed_key = f"activity:{activity['activity_execution_id']}:closed"

    async with store.engine.connect() as inbox_row, store.engine.connect() as result_key:
        # The claim stops on the signal's inbox row, holding the ready task and the run.
        await inbox_row.execute(
            sa.text("SELECT id FROM inbox_events WHERE run_id = CAST(:r AS uuid) FOR UPDATE"),
            {"r": run_id},
        )
        claiming = asyncio.ensure_future(claim_wf(store))
        await assert_eventually(_lock_waits(store, 1), message="the claim waits")
        # The result's statement will stop on its own inbox key once it holds the run.
        await result_key.execute(
            sa.text(
                "INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key)"
                " VALUES (CAST(:r AS uuid), 'ActivityCompleted', '{}', :key)"
            ),
            {"r": run_id, "key": closed_key},
        )
        completing_activity = asyncio.ensure_future(
            store.complete_activity_task(lease=attempt.lease, result=blob(2))
        )
        await assert_eventually(_lock_waits(store, 2), message="the result waits for the run")
        await inbox_row.rollback()
        task = await claiming  # leased; the result's statement now holds the run
        await assert_eventually(_lock_waits(store, 1), message="the result waits on its key")
        completing = asyncio.ensure_future(
            store.complete_workflow_task(lease=task.lease, commands=[], position=task.position)
        )
        await assert_eventually(_lock_waits(store, 2), message="the completion waits")
        await result_key.rollback()
        await completing_activity
        await completing

    tasks = await rows(store, s.workflow_tasks, run_id)
    assert [t["state"] for t in tasks].count("ready") == 1, tasks
    pending = [
        e["event_type"] for e in await rows(store, s.inbox_events, run_id) if not e["applied"]
    ]
    assert pending == ["ActivityCompleted"]
    history = (await claim_wf(store)).history
    assert [e.event_type for e in history][-1] == "ActivityCompleted"
