"""The repair pass survives rows it cannot repair (issue 25 item 1; store invariant 5).

Rows are poisoned with SQL, bypassing every check, as rows written before the bounds existed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from structlog.testing import capture_logs

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.activities import MAX_DURATION_SECONDS
from burrow.store.ready import ReadyTask
from tests.support.store import (
    claim_act,
    claim_wf,
    db_now,
    execute,
    rows,
    start,
    start_with_activity,
)

INT_MAX = 2**31 - 1  # an attempt counter that cannot be incremented any more


async def due_timer(store: Store, workflow_id: str = "timer-run") -> str:
    """A run whose timer (step 1) is due now."""
    run_id = await start(store, workflow_id)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )
    await execute(
        store, "UPDATE timers SET fire_at = now() - interval '1 second' WHERE run_id = :r", r=run_id
    )
    return run_id


async def leased_activity(store: Store, workflow_id: str, set_sql: str) -> str:
    """A run whose activity attempt is leased, then changed by `SET {set_sql}`."""
    run_id = await start_with_activity(store, workflow_id)
    await claim_act(store)
    await execute(store, f"UPDATE activity_tasks SET {set_sql} WHERE run_id = :r", r=run_id)
    return run_id


async def expired_workflow_lease(store: Store, workflow_id: str, attempt: int = 1) -> str:
    """A run whose workflow task is leased with a lease that ran out (at `attempt`)."""
    run_id = await start(store, workflow_id)
    await claim_wf(store)
    await execute(
        store,
        "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 second', attempt = :a"
        " WHERE run_id = :r",
        r=run_id,
        a=attempt,
    )
    return run_id


async def one(store: Store, table: Any, run_id: str) -> dict[str, Any]:
    [row] = await rows(store, table, run_id)
    return row


async def marks(store: Store) -> list[dict[str, Any]]:
    return sorted(await rows(store, s.repair_failures), key=lambda mark: mark["step"])


def heartbeat_due(policy: dict[str, Any]) -> str:
    """SET clause: `policy` as retry policy, and a 1 s heartbeat timeout that has passed."""
    return (
        f"retry_policy = '{json.dumps(policy)}', heartbeat_seconds = 1,"
        " started_at = now() - interval '5 seconds'"
    )


async def test_huge_stored_durations_are_clamped_and_a_due_timer_fires_in_the_same_pass(
    store: Store,
) -> None:
    """Issue 25 item 1 (store invariant 5): a start-to-close of 1e14 s and retry intervals of
    1e12 s with a heartbeat timeout, stored before the bounds, neither fail the pass nor stop an
    unrelated due timer; the retry is scheduled at most 100 years out."""
    stuck = await leased_activity(store, "huge-s2c", "start_to_close_seconds = 1e14")
    huge = {"initial_interval_seconds": 1e12, "maximum_interval_seconds": 1e12}
    retried = await leased_activity(store, "huge-retry", heartbeat_due(huge))
    timer_run = await due_timer(store)

    result = await store.sweep()

    assert (result.timers_fired, result.activity_timeouts, result.isolated) == (1, 1, 0)
    assert (await one(store, s.timers, timer_run))["state"] == "fired"
    assert (await one(store, s.activity_tasks, stuck))["state"] == "leased"
    retry = await one(store, s.activity_tasks, retried)
    assert (retry["state"], retry["attempt"]) == ("ready", 2)
    out = retry["available_at"] - await db_now(store)
    assert timedelta(days=365 * 99) < out <= timedelta(seconds=MAX_DURATION_SECONDS)
    [scheduled] = [
        e["payload"]
        for e in await rows(store, s.inbox_events, retried)
        if e["event_type"] == "ActivityRetryScheduled"
    ]
    assert scheduled["retry_backoff_seconds"] == MAX_DURATION_SECONDS


async def test_rows_whose_repair_raises_are_isolated_and_the_rest_of_the_pass_goes_on(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """Issue 25 item 1 (store invariant 5): a Python error (retry policy), a database error
    (attempt overflow) and a timer of a missing run are each rolled back, logged with their ids,
    marked and counted; the healthy lease and timer beside them are repaired in the same pass."""
    bad_policy = await leased_activity(
        store, "bad-policy", heartbeat_due({"initial_interval_seconds": "soon"})
    )
    overflow = await expired_workflow_lease(store, "overflow", attempt=INT_MAX)
    healthy = await expired_workflow_lease(store, "healthy")
    timer_run = await due_timer(store)
    await execute(
        store,
        "INSERT INTO timers (run_id, step_seq, namespace, fire_at, delay_seconds)"
        " VALUES ('00000000-0000-4000-8000-000000000000', 1, 'default', now(), 1)",
    )
    noticed.clear()

    with capture_logs() as logs:
        result = await store.sweep()

    assert result.isolated == 3
    assert (result.timers_fired, result.expired_workflow_leases) == (1, 1)
    assert result.activity_timeouts == 0
    assert (await one(store, s.timers, timer_run))["state"] == "fired"
    assert (await one(store, s.workflow_tasks, healthy))["attempt"] == 2
    assert (await one(store, s.workflow_tasks, overflow))["state"] == "leased"
    assert (await one(store, s.activity_tasks, bad_policy))["attempt"] == 1
    isolated = {(e["step"], e["run_id"]) for e in logs if e["event"] == "repair_row_isolated"}
    orphan = "00000000-0000-4000-8000-000000000000"
    expected = {("activity_timeout", bad_policy), ("workflow_lease", overflow), ("timer", orphan)}
    assert isolated == expected
    assert {(m["step"], m["run_id"], m["failures"]) for m in await marks(store)} == {
        (step, run_id, 1) for step, run_id in expected
    }
    # What the rolled-back batch had made ready is not announced; the healthy task is, once.
    healthy_task = (await one(store, s.workflow_tasks, healthy))["task_id"]
    overflow_task = (await one(store, s.workflow_tasks, overflow))["task_id"]
    announced = [n.task_id for n in noticed if n.kind == "workflow"]
    assert announced.count(healthy_task) == 1
    assert overflow_task not in announced


async def test_an_isolated_row_is_held_out_until_its_retry_time_and_unmarked_once_repaired(
    store: Store,
) -> None:
    """Issue 25 item 1 (store invariant 5): a marked row is not retried every pass; when its
    retry time comes it is tried again, backed off further if it still fails, unmarked once
    repaired."""
    bad_policy = await leased_activity(
        store, "bad-policy", heartbeat_due({"initial_interval_seconds": "soon"})
    )
    overflow = await expired_workflow_lease(store, "overflow", attempt=INT_MAX)
    assert (await store.sweep()).isolated == 2
    first = {m["step"]: m for m in await marks(store)}

    assert (await store.sweep()).isolated == 0  # held out: not tried again
    assert {m["step"]: m for m in await marks(store)} == first

    await execute(store, "UPDATE repair_failures SET retry_after = now()")
    await execute(
        store,
        "UPDATE activity_tasks SET retry_policy = '{\"max_attempts\": 3}' WHERE run_id = :r",
        r=bad_policy,
    )
    result = await store.sweep()

    assert (result.activity_timeouts, result.isolated) == (1, 1)
    assert (await one(store, s.activity_tasks, bad_policy))["attempt"] == 2
    [mark] = await marks(store)
    assert (mark["step"], mark["run_id"], mark["failures"]) == ("workflow_lease", overflow, 2)
    assert mark["retry_after"] - await db_now(store) > timedelta(seconds=90)
    assert "out of range" in mark["error"]
    assert await store.repair_failures(namespace="default") == 1


async def test_held_out_rows_do_not_wake_the_repair_loop(store: Store) -> None:
    """Store invariant 5: a due timer or run deadline held out after a failure is left out of
    `next_timer_at`, or the loop that sleeps until then would wake at once every pass."""
    timer_run = await due_timer(store)
    deadline_run = await start(store, "deadline-run")
    await execute(
        store,
        "UPDATE runs SET run_deadline_at = now() - interval '1 second' WHERE run_id = :r",
        r=deadline_run,
    )
    mark = (
        "INSERT INTO repair_failures (step, row_key, namespace, run_id, error, retry_after)"
        " VALUES (:step, :key, 'default', :r, 'poisoned', now() + interval '1 hour')"
    )
    await execute(store, mark, step="timer", key=f"{timer_run}:1", r=timer_run)
    await execute(store, mark, step="run_deadline", key=deadline_run, r=deadline_run)
    result = await store.sweep()
    assert (result.timers_fired, result.runs_timed_out) == (0, 0)
    assert result.next_timer_at is None
    await execute(store, "DELETE FROM repair_failures")
    woken = await store.sweep()
    assert (woken.timers_fired, woken.runs_timed_out) == (1, 1)
