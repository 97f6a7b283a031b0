"""Due-only repair passes between full ones (store invariant 5, D3).

Between its full passes the repair loop wakes when a timer, deadline or schedule fire is due and
runs those steps alone (`Store.sweep_due`); leases, sessions and the rest wait for the full pass.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.worker.repair import RepairLoop
from tests.support.store import claim_wf, execute, rows, start


async def inbox_types(store: Store, run_id: str) -> list[str]:
    return [e["event_type"] for e in await rows(store, s.inbox_events, run_id)]


async def _a_due_timer_and_an_expired_lease(store: Store) -> tuple[str, str]:
    """A run whose timer is due and another whose workflow task lease has expired."""
    timer_run = await start(store, "wf-timer")
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )
    await execute(store, "UPDATE timers SET fire_at = now() - interval '1 second'")
    lease_run = await start(store, "wf-lease")
    await claim_wf(store, lease=timedelta(hours=1))
    await execute(
        store,
        "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 second'"
        " WHERE run_id = CAST(:run_id AS uuid)",
        run_id=lease_run,
    )
    return timer_run, lease_run


async def test_a_due_only_pass_fires_timers_and_leaves_the_other_steps_to_the_full_pass(
    store: Store,
) -> None:
    """D3, store invariant 5: `sweep_due` runs the time-driven steps alone; the full pass the
    rest."""
    timer_run, lease_run = await _a_due_timer_and_an_expired_lease(store)

    due = await store.sweep_due()

    assert (due.timers_fired, due.expired_workflow_leases) == (1, 0)
    assert await inbox_types(store, timer_run) == ["TimerFired"]
    [leased] = await rows(store, s.workflow_tasks, lease_run)
    assert leased["state"] == "leased"
    full = await store.sweep()
    assert (full.timers_fired, full.expired_workflow_leases) == (0, 1)
    assert await inbox_types(store, timer_run) == ["TimerFired"]


async def test_the_repair_loop_runs_due_only_passes_between_full_ones(store: Store) -> None:
    """Store invariant 5: after a full pass the loop wakes for a due timer with the time-driven
    steps alone, as after a poke for a started timer; a full poke (or `interval` passing)
    brings the full pass back."""
    loop = RepairLoop(
        store=store,
        worker_id="sweeper",
        interval=timedelta(hours=1),
        republish_after=timedelta(hours=1),
        owner_stale=timedelta(hours=1),
    )
    assert await loop.sweep_once() == pytest.approx(3600, abs=5)  # the first pass is full
    timer_run, lease_run = await _a_due_timer_and_an_expired_lease(store)

    assert await loop.sweep_once() == pytest.approx(3600, abs=5)

    assert await inbox_types(store, timer_run) == ["TimerFired"]
    [leased] = await rows(store, s.workflow_tasks, lease_run)
    assert leased["state"] == "leased"
    loop.poke(full=False)  # a timer started: when the next is due is read again, no more
    await loop.sweep_once()
    [leased] = await rows(store, s.workflow_tasks, lease_run)
    assert leased["state"] == "leased"
    loop.poke()
    await loop.sweep_once()
    [expired] = await rows(store, s.workflow_tasks, lease_run)
    assert expired["state"] == "ready"
