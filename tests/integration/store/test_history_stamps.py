"""History timestamps: every insert path stamps the database's clock, monotonic in a run (D3).

`recorded_at` is written by the database when the row is inserted (trigger
history_events_stamp, migration 0011), never earlier than the run's previous event, whatever the
statement or the worker's clock. Each test below pushes the run's last event into the future
(as a database clock stepped back, or a history written by an older release, would leave it),
then writes through one insert path: the new events must not be stamped before it. The
attempt's own times travel as payload fields: `started_at` on ActivityStarted, `finished_at`
on ActivityCompleted.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import EagerClaim
from burrow.store.completion import plan
from burrow.store.completion.at_position import WorkflowTaskRun
from burrow.store.models import ClaimedActivityTask, RunPosition
from burrow.worker.completion import moved_to
from tests.support.store import (
    ACT,
    LEASE,
    WF,
    blob,
    claim_act,
    claim_wf,
    db_now,
    execute,
    rows,
    schedule,
    start,
)

AHEAD = timedelta(hours=1)
TTL = timedelta(minutes=5)


async def _history(store: Store, run_id: str) -> list[dict[str, Any]]:
    return await rows(store, s.history_events, run_id)


def _assert_monotonic(events: list[dict[str, Any]]) -> None:
    """D3: recorded_at never decreases along the run's sequence."""
    stamps = [(e["sequence"], e["event_type"], e["recorded_at"]) for e in events]
    for before, after in itertools.pairwise(stamps):
        assert after[2] >= before[2], f"{after} is stamped before {before}"


async def _push_last_event_ahead(store: Store, run_id: str) -> tuple[int, datetime]:
    """Move the run's last event AHEAD into the future; returns its sequence and new stamp."""
    last = (await _history(store, run_id))[-1]
    ahead = last["recorded_at"] + AHEAD
    await execute(
        store,
        "UPDATE history_events SET recorded_at = :at WHERE run_id = :run_id AND sequence = :seq",
        at=ahead,
        run_id=run_id,
        seq=last["sequence"],
    )
    return last["sequence"], ahead


async def _after_future_event(
    store: Store, run_id: str, write: Callable[[], Awaitable[object]]
) -> list[dict[str, Any]]:
    """Run `write` after pushing the last event ahead; the events it wrote, checked."""
    last_seq, ahead = await _push_last_event_ahead(store, run_id)
    await write()
    events = await _history(store, run_id)
    written = [e for e in events if e["sequence"] > last_seq]
    assert written, "the path wrote no event"
    assert all(e["recorded_at"] >= ahead for e in written), written
    _assert_monotonic(events)
    return written


async def test_d3_the_start_is_stamped_by_the_database_clock(store: Store) -> None:
    """D3: WorkflowStarted (the start's own insert) is stamped at the database's clock."""
    before = await db_now(store)
    run_id = await start(store, workflow_id="stamp-start")
    after = await db_now(store)
    [started] = await _history(store, run_id)
    assert before <= started["recorded_at"] <= after + timedelta(seconds=1)


async def test_d3_a_transactional_completion_is_stamped_after_the_previous_event(
    store: Store,
) -> None:
    """D3: the transactional completion's append (history.APPENDED_CTE)."""
    run_id = await start(store, workflow_id="stamp-transactional")
    task = await claim_wf(store)
    await _after_future_event(
        store,
        run_id,
        lambda: store.complete_workflow_task(lease=task.lease, commands=[schedule(1)]),
    )


async def test_d3_a_completion_at_position_is_stamped_after_the_previous_event(
    store: Store,
) -> None:
    """D3: the one-statement completion (COMPLETE_AT_POSITION)."""
    run_id = await start(store, workflow_id="stamp-at-position")
    task = await claim_wf(store)
    written = await _after_future_event(
        store,
        run_id,
        lambda: store.complete_workflow_task(
            lease=task.lease, commands=[schedule(1)], position=task.position
        ),
    )
    assert [e["event_type"] for e in written] == ["ActivityScheduled"]


async def test_d3_a_terminate_is_stamped_after_the_previous_event(store: Store) -> None:
    """D3: an append outside any workflow task (history.append_events)."""
    run_id = await start(store, workflow_id="stamp-terminate")
    written = await _after_future_event(
        store,
        run_id,
        lambda: store.terminate_workflow(namespace="default", workflow_id="stamp-terminate"),
    )
    assert [e["event_type"] for e in written] == ["WorkflowTerminated"]


async def _activity_done(store: Store, workflow_id: str) -> tuple[str, ClaimedActivityTask]:
    """A run whose activity of step 1 is claimed (its ActivityStarted waits in the inbox)."""
    run_id = await start(store, workflow_id=workflow_id)
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)])
    return run_id, await claim_act(store)


async def test_d3_a_claim_stamps_the_inbox_it_moves_after_the_previous_event(
    store: Store,
) -> None:
    """D3: a workflow task claim moves the inbox into history (claims.open_runs_sql)."""
    run_id, attempt = await _activity_done(store, "stamp-claim")
    await store.complete_activity_task(lease=attempt.lease, result=blob(5))
    written = await _after_future_event(store, run_id, lambda: claim_wf(store))
    assert [e["event_type"] for e in written] == ["ActivityStarted", "ActivityCompleted"]


async def test_d3_an_eager_activity_completion_stamps_after_the_previous_event(
    store: Store,
) -> None:
    """D3: a completion that leases its follow-up moves the inbox in the same statement."""
    run_id, attempt = await _activity_done(store, "stamp-eager")
    written = await _after_future_event(
        store,
        run_id,
        lambda: store.complete_activity_task(
            lease=attempt.lease,
            result=blob(5),
            eager=EagerClaim(flt=WF, worker_id="w1", lease=LEASE),
        ),
    )
    assert [e["event_type"] for e in written] == ["ActivityStarted", "ActivityCompleted"]


async def _warm(store: Store, workflow_id: str) -> tuple[str, ClaimedActivityTask, RunPosition]:
    """A run waiting on its eagerly leased activity, and where that completion left it."""
    run_id = await start(store, workflow_id=workflow_id)
    task = await claim_wf(store)
    assert task.position is not None
    outcome = await store.complete_workflow_task(
        lease=task.lease,
        commands=[schedule(1)],
        eager=EagerClaim(flt=ACT, worker_id="w1", lease=LEASE),
        sticky_ttl=TTL,
        position=task.position,
    )
    [attempt] = outcome.eager_activities
    return run_id, attempt, moved_to(task.position, outcome)


def _fused_task(position: RunPosition, workflow_time: datetime) -> WorkflowTaskRun:
    workflow_task_id = str(uuid.uuid4())
    return WorkflowTaskRun(
        workflow_task_id=workflow_task_id,
        run=position.run,
        workflow_time=workflow_time,
        commands=plan.parse_commands(
            workflow_task_id, [{"type": "complete_workflow", "result": blob(7)}]
        ),
    )


@pytest.mark.parametrize("skew", [-AHEAD, AHEAD], ids=["worker behind", "worker ahead"])
async def test_d3_s12_the_fused_path_stamps_the_database_clock_not_the_workers(
    store: Store, skew: timedelta
) -> None:
    """D3, S12: a result written with its workflow task is stamped by the database.

    The worker's clock (the time its code ran with) is kept as `workflow_time`, so a cold
    replay hands the code the same time; it never becomes the record's `recorded_at`.
    """
    run_id, attempt, position = await _warm(store, f"stamp-fused-{skew.total_seconds()}")
    before = await db_now(store)
    seen = before + skew
    await store.complete_activity_with_workflow_task(
        lease=attempt.lease, result=blob(5), task=_fused_task(position, seen)
    )
    after = await db_now(store)
    events = await _history(store, run_id)
    _assert_monotonic(events)
    tail = events[position.run.last_event_seq :]
    assert [e["event_type"] for e in tail] == [
        "ActivityStarted",
        "ActivityCompleted",
        "WorkflowCompleted",
    ]
    assert all(before <= e["recorded_at"] <= after + timedelta(seconds=1) for e in tail), tail
    completed = tail[1]["payload"]
    assert datetime.fromisoformat(completed["workflow_time"]) == seen


async def test_d3_the_fused_path_stamps_after_the_previous_event(store: Store) -> None:
    """D3: the fused statement's three inserts (inbox, result, task events) stay monotonic."""
    run_id, attempt, position = await _warm(store, "stamp-fused-ahead")
    seen = await db_now(store)
    await _after_future_event(
        store,
        run_id,
        lambda: store.complete_activity_with_workflow_task(
            lease=attempt.lease, result=blob(5), task=_fused_task(position, seen)
        ),
    )


async def test_d3_activity_events_carry_the_attempts_own_times(store: Store) -> None:
    """D3: ActivityStarted has the attempt's `started_at`, ActivityCompleted its `finished_at`."""
    run_id, attempt = await _activity_done(store, "stamp-payload-times")
    finished = (await db_now(store)) - timedelta(seconds=3)  # as the worker saw it
    await store.complete_activity_task(lease=attempt.lease, result=blob(5), finished_at=finished)
    await claim_wf(store)
    by_type = {e["event_type"]: e for e in await _history(store, run_id)}
    [row] = await rows(store, s.activity_tasks, run_id)
    started = by_type["ActivityStarted"]["payload"]
    assert datetime.fromisoformat(started["started_at"]) == row["started_at"]
    completed = by_type["ActivityCompleted"]["payload"]
    assert datetime.fromisoformat(completed["finished_at"]) == finished


async def test_d3_a_completion_without_a_finish_time_takes_the_database_clock(
    store: Store,
) -> None:
    """D3: a completion that names no finish time (HTTP workers) gets the database's clock."""
    run_id, attempt = await _activity_done(store, "stamp-payload-default")
    before = await db_now(store)
    await store.complete_activity_task(lease=attempt.lease, result=blob(5))
    after = await db_now(store)
    await claim_wf(store)
    [completed] = [
        e for e in await _history(store, run_id) if e["event_type"] == "ActivityCompleted"
    ]
    finished = datetime.fromisoformat(completed["payload"]["finished_at"])
    assert before <= finished <= after + timedelta(seconds=1)
