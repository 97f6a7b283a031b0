"""The repair sweep on a real Postgres: store invariant 5, A1, D2, M6."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from burrow.protocol.shapes import Failure
from burrow.store import Store, timer_repair
from burrow.store import schema as s
from burrow.store.errors import StaleLease
from tests.support.store import (
    ACT,
    LEASE,
    NS,
    QUEUE,
    blob,
    claim_act,
    claim_wf,
    db_now,
    execute,
    open_workflow_tasks,
    rows,
    start,
    start_with_activity,
    sweep_until,
)

SHORT = timedelta(seconds=0.3)
ACTIVITY_EVENTS = {
    "ActivityScheduled",
    "ActivityStarted",
    "ActivityRetryScheduled",
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityTimedOut",
}


async def nothing_to_claim(store: Store) -> bool:
    return await store.claim_activity_tasks(flt=ACT, worker_id="wx", lease=LEASE, limit=10) == []


async def activity(store: Store, run_id: str) -> dict[str, Any]:
    [row] = await rows(store, s.activity_tasks, run_id)
    return row


async def inbox_types(store: Store, run_id: str) -> list[str]:
    return [e["event_type"] for e in await rows(store, s.inbox_events, run_id)]


def activity_state_is(
    store: Store, run_id: str, state: str, attempt: int | None = None
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        row = await activity(store, run_id)
        return row["state"] == state and (attempt is None or row["attempt"] == attempt)

    return check


async def activity_history(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Claim the workflow task the outcome woke and return its activity events."""
    task = await claim_wf(store)
    return [(e.event_type, e.payload) for e in task.history if e.event_type in ACTIVITY_EVENTS]


# -- workflow task leases ----------------------------------------------------------------------


async def test_expired_workflow_task_lease_returns_to_ready_with_next_attempt(
    store: Store,
) -> None:
    """Store invariant 5, M6: a dead worker's workflow task becomes ready again, attempt + 1."""
    run_id = await start(store)
    first = await claim_wf(store, lease=SHORT)

    async def ready_again() -> bool:
        [task] = await rows(store, s.workflow_tasks, run_id)
        return bool(task["state"] == "ready")

    await sweep_until(store, ready_again)

    [task] = await rows(store, s.workflow_tasks, run_id)
    assert task["attempt"] == 2
    assert task["lease_owner"] is None
    assert task["lease_token"] is None
    assert task["lease_expires_at"] is None
    assert task["last_failure"]["exception_type"] == "LeaseExpired"
    second = await claim_wf(store, worker_id="w2")
    assert second.lease.task_id == first.lease.task_id
    assert second.attempt == second.lease.attempt == 2
    assert [e.event_type for e in second.history] == ["WorkflowStarted"]
    with pytest.raises(StaleLease):
        await store.complete_workflow_task(lease=first.lease, commands=[])


async def test_live_workflow_task_lease_is_left_alone_by_the_sweep(store: Store) -> None:
    """Store invariant 5, M6: the sweep only touches leases that have actually expired."""
    run_id = await start(store)
    claimed = await claim_wf(store, lease=timedelta(hours=1))
    before = await rows(store, s.workflow_tasks, run_id)

    result = await store.sweep()

    assert result.expired_workflow_leases == 0
    assert await rows(store, s.workflow_tasks, run_id) == before
    await store.complete_workflow_task(lease=claimed.lease, commands=[])


# -- activity leases, retries and failures -----------------------------------------------------


async def test_expired_activity_lease_is_retried_until_max_attempts_then_times_out(
    store: Store,
) -> None:
    """A1, A2, D2, store invariant 5: each lost attempt is retried with a new id, then fails."""
    run_id = await start_with_activity(store, max_attempts=3)
    attempt_ids = []
    for attempt in (1, 2):
        claimed = await claim_act(store, worker_id=f"w{attempt}", lease=SHORT)
        assert claimed.attempt_number == attempt
        attempt_ids.append(claimed.activity_attempt_id)
        await sweep_until(store, activity_state_is(store, run_id, "ready", attempt + 1))
        row = await activity(store, run_id)
        assert row["activity_attempt_id"] != claimed.activity_attempt_id
        assert row["lease_owner"] is None and row["lease_token"] is None
        assert row["last_failure"]["exception_type"] == "LeaseExpired"
        # Retries are not workflow-visible outcomes: no workflow task is woken for them.
        assert await open_workflow_tasks(store, run_id) == []
    last = await claim_act(store, worker_id="w3", lease=SHORT)
    assert last.attempt_number == 3
    attempt_ids.append(last.activity_attempt_id)

    await sweep_until(store, activity_state_is(store, run_id, "timed_out"))

    assert len(set(attempt_ids)) == 3
    assert await nothing_to_claim(store)
    assert len(await open_workflow_tasks(store, run_id)) == 1
    events = await activity_history(store)
    assert [kind for kind, _ in events] == [
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityRetryScheduled",
        "ActivityStarted",
        "ActivityRetryScheduled",
        "ActivityStarted",
        "ActivityTimedOut",
    ]
    started = [p for kind, p in events if kind == "ActivityStarted"]
    assert [p["activity_attempt_id"] for p in started] == attempt_ids
    retries = [p for kind, p in events if kind == "ActivityRetryScheduled"]
    assert [p["retry_after_attempt"] for p in retries] == [1, 2]
    assert [p["activity_attempt_id"] for p in retries] == attempt_ids[:2]
    assert all(p["retry_reason"] == "timeout" for p in retries)
    timed_out = events[-1][1]
    assert timed_out["attempt_number"] == 3
    assert timed_out["activity_attempt_id"] == attempt_ids[2]
    assert timed_out["timeout_kind"] == "start_to_close"
    assert timed_out["sequence"] == 1
    with pytest.raises(StaleLease):
        await store.complete_activity_task(lease=last.lease, result=blob())


async def test_failed_activity_is_retried_until_max_attempts_then_fails(store: Store) -> None:
    """A1, D2: reported failures are retried by policy; the last one reaches history."""
    run_id = await start_with_activity(store, max_attempts=3)
    outcomes = []
    for attempt in (1, 2, 3):
        claimed = await claim_act(store)
        assert claimed.attempt_number == attempt
        failed = await store.fail_activity_task(
            lease=claimed.lease,
            failure=Failure(exception_type="ValueError", message=f"boom {attempt}"),
        )
        outcomes.append(failed.retried)
        if attempt < 3:
            assert await open_workflow_tasks(store, run_id) == []

    assert outcomes == [True, True, False]
    row = await activity(store, run_id)
    assert (row["state"], row["attempt"]) == ("failed", 3)
    assert await nothing_to_claim(store)
    events = await activity_history(store)
    assert [kind for kind, _ in events].count("ActivityRetryScheduled") == 2
    kind, failed = events[-1]
    assert kind == "ActivityFailed"
    assert (failed["exception_type"], failed["message"]) == ("ValueError", "boom 3")
    assert failed["attempt_number"] == 3


async def test_retry_backoff_sets_available_at_in_the_future(store: Store) -> None:
    """A1, M3: a retried attempt is not claimable before its backoff has passed."""
    run_id = await start_with_activity(
        store, retry_policy={"max_attempts": 3, "backoff_seconds": [3600]}
    )
    claimed = await claim_act(store)

    failed = await store.fail_activity_task(
        lease=claimed.lease, failure=Failure(exception_type="ValueError", message="later")
    )
    retried = failed.retried

    assert retried is True
    row = await activity(store, run_id)
    assert (row["state"], row["attempt"]) == ("ready", 2)
    assert row["available_at"] - await db_now(store) > timedelta(minutes=50)
    assert await nothing_to_claim(store)
    await store.sweep()
    assert await nothing_to_claim(store)
    [retry] = [
        e
        for e in await rows(store, s.inbox_events, run_id)
        if e["event_type"] == "ActivityRetryScheduled"
    ]
    assert retry["payload"]["retry_backoff_seconds"] == 3600
    assert retry["payload"]["retry_reason"] == "failure"

    await execute(
        store, "UPDATE activity_tasks SET available_at = now() WHERE run_id = :r", r=run_id
    )
    again = await claim_act(store)
    assert again.attempt_number == 2
    assert again.activity_attempt_id != claimed.activity_attempt_id


NON_RETRYABLE = {
    "flagged-non-retryable": (
        {"max_attempts": 5, "backoff_seconds": [0]},
        {"exception_type": "ValueError", "message": "no", "non_retryable": True},
    ),
    "type-in-non-retryable-list": (
        {"max_attempts": 5, "backoff_seconds": [0], "non_retryable_error_types": ["BadCard"]},
        {"exception_type": "BadCard", "message": "declined"},
    ),
}


@pytest.mark.parametrize(
    ("policy", "failure"), list(NON_RETRYABLE.values()), ids=list(NON_RETRYABLE)
)
async def test_non_retryable_failure_fails_the_activity_at_once(
    store: Store, policy: dict[str, Any], failure: dict[str, Any]
) -> None:
    """A1: a non-retryable failure is final on the first attempt, whatever max_attempts says."""
    run_id = await start_with_activity(store, retry_policy=policy)
    claimed = await claim_act(store)

    failed = await store.fail_activity_task(lease=claimed.lease, failure=Failure.of(failure))
    retried = failed.retried

    assert retried is False
    row = await activity(store, run_id)
    assert (row["state"], row["attempt"]) == ("failed", 1)
    assert await nothing_to_claim(store)
    assert "ActivityRetryScheduled" not in await inbox_types(store, run_id)
    assert len(await open_workflow_tasks(store, run_id)) == 1
    kind, payload = (await activity_history(store))[-1]
    assert kind == "ActivityFailed"
    assert payload["exception_type"] == failure["exception_type"]
    assert payload["attempt_number"] == 1


async def test_retry_that_would_start_after_schedule_to_close_fails_at_once(store: Store) -> None:
    """A1: no retry is scheduled whose backoff ends past the schedule-to-close deadline."""
    run_id = await start_with_activity(
        store,
        retry_policy={"max_attempts": 5, "backoff_seconds": [7200]},
        schedule_to_close_timeout=3600,
    )
    claimed = await claim_act(store)

    failed = await store.fail_activity_task(
        lease=claimed.lease, failure=Failure(exception_type="ValueError", message="m")
    )
    retried = failed.retried

    assert retried is False
    assert (await activity(store, run_id))["state"] == "failed"
    assert (await activity_history(store))[-1][0] == "ActivityFailed"


# -- timers ------------------------------------------------------------------------------------


async def test_due_timer_fires_exactly_once_across_many_and_concurrent_sweeps(
    store: Store, database_url: str
) -> None:
    """D3, store invariant 5: a due timer yields one TimerFired however often the sweep runs."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 0.2}]
    )

    async def fired() -> bool:
        [timer] = await rows(store, s.timers, run_id)
        return bool(timer["state"] == "fired")

    await sweep_until(store, fired)
    sweepers = [Store.connect(database_url, pool_size=1) for _ in range(5)]
    try:
        for _ in range(3):
            results = await asyncio.gather(*(other.sweep() for other in sweepers), store.sweep())
            assert all(result.timers_fired == 0 for result in results)
    finally:
        await asyncio.gather(*(other.close() for other in sweepers))

    assert await inbox_types(store, run_id) == ["TimerFired"]
    assert len(await open_workflow_tasks(store, run_id)) == 1
    history = (await claim_wf(store)).history
    timer_fired = [e for e in history if e.event_type == "TimerFired"]
    assert len(timer_fired) == 1
    assert timer_fired[0].payload["sequence"] == 1
    assert timer_fired[0].payload["timer_id"] == f"{run_id}:1"
    await store.sweep()
    assert await store.read_history(run_id=run_id) == history


async def test_concurrent_sweeps_fire_a_due_timer_once(store: Store, database_url: str) -> None:
    """D3, store invariant 5: racing repair passes (workers + matching role) fire a timer once."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )
    await execute(store, "UPDATE timers SET fire_at = now() - interval '1 second'")
    sweepers = [Store.connect(database_url, pool_size=1) for _ in range(8)]
    try:
        results = await asyncio.gather(*(other.sweep() for other in sweepers))
    finally:
        await asyncio.gather(*(other.close() for other in sweepers))

    assert sum(result.timers_fired for result in results) == 1
    await store.sweep()
    assert await inbox_types(store, run_id) == ["TimerFired"]
    history = (await claim_wf(store)).history
    assert [e.event_type for e in history].count("TimerFired") == 1


async def test_a_backlog_of_due_timers_fires_the_earliest_due_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store invariant 5: with more timers due than one pass fires, the pass takes those due
    longest, whatever their runs' ids (it reads them in due order, not by run)."""
    monkeypatch.setattr(timer_repair, "BATCH", 1)
    run_ids = []
    for workflow_id in ("wf-1", "wf-2"):
        run_ids.append(await start(store, workflow_id))
        task = await claim_wf(store)
        await store.complete_workflow_task(
            lease=task.lease,
            commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}],
        )
    later, earlier = sorted(run_ids)  # by run id, the later-due timer would come first
    await execute(
        store,
        "UPDATE timers SET fire_at = now() - CASE WHEN run_id = CAST(:earlier AS uuid)"
        " THEN interval '2 minutes' ELSE interval '1 minute' END",
        earlier=earlier,
    )

    result = await store.sweep()

    assert result.timers_fired == 1
    assert await inbox_types(store, earlier) == ["TimerFired"]
    assert await inbox_types(store, later) == []
    assert (await store.sweep()).timers_fired == 1
    assert await inbox_types(store, later) == ["TimerFired"]


async def test_timer_that_is_not_due_does_not_fire(store: Store) -> None:
    """Store invariant 5: the sweep leaves a future timer pending and reports when it is due."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )

    result = await store.sweep()

    [timer] = await rows(store, s.timers, run_id)
    assert timer["state"] == "pending"
    assert result.timers_fired == 0
    assert result.next_timer_at == timer["fire_at"]
    assert await inbox_types(store, run_id) == []
    assert await open_workflow_tasks(store, run_id) == []


# -- activity timeouts -------------------------------------------------------------------------


async def test_start_to_close_timeout_is_enforced(store: Store) -> None:
    """A1, store invariant 5: an attempt running past start-to-close times out, lease or not."""
    run_id = await start_with_activity(store, max_attempts=1, start_to_close_timeout=0.3)
    claimed = await claim_act(store, lease=timedelta(hours=1))

    await sweep_until(store, activity_state_is(store, run_id, "timed_out"))

    kind, payload = (await activity_history(store))[-1]
    assert kind == "ActivityTimedOut"
    assert payload["timeout_kind"] == "start_to_close"
    assert payload["activity_attempt_id"] == claimed.activity_attempt_id
    with pytest.raises(StaleLease):
        await store.complete_activity_task(lease=claimed.lease, result=blob())


async def test_heartbeat_timeout_is_enforced_and_the_retry_keeps_heartbeat_details(
    store: Store,
) -> None:
    """A1, A2, store invariant 5: a silent attempt times out; the next sees the last details."""
    run_id = await start_with_activity(
        store, max_attempts=2, heartbeat_timeout=3600, start_to_close_timeout=7200
    )
    claimed = await claim_act(store, lease=timedelta(hours=1))
    await store.sweep()
    assert (await activity(store, run_id))["state"] == "leased"
    beat = await store.heartbeat_activity_task(
        lease=claimed.lease, details={"progress": 7}, lease_duration=timedelta(hours=1)
    )
    assert beat.cancel_requested is False
    await execute(
        store,
        "UPDATE activity_tasks SET heartbeat_at = now() - interval '2 hours' WHERE run_id = :r",
        r=run_id,
    )

    await sweep_until(store, activity_state_is(store, run_id, "ready", 2))

    row = await activity(store, run_id)
    assert row["last_failure"]["timeout_kind"] == "heartbeat"
    [retry] = [
        e
        for e in await rows(store, s.inbox_events, run_id)
        if e["event_type"] == "ActivityRetryScheduled"
    ]
    assert retry["payload"]["timeout_kind"] == "heartbeat"
    again = await claim_act(store)
    assert again.attempt_number == 2
    assert again.heartbeat_details == {"progress": 7}
    with pytest.raises(StaleLease):
        await store.heartbeat_activity_task(
            lease=claimed.lease, details=None, lease_duration=timedelta(hours=1)
        )


async def test_heartbeat_timeout_with_real_time_is_enforced(store: Store) -> None:
    """A1, store invariant 5: an attempt that never heartbeats times out (heartbeat kind)."""
    run_id = await start_with_activity(store, max_attempts=1, heartbeat_timeout=0.3)
    await claim_act(store, lease=timedelta(hours=1))

    await sweep_until(store, activity_state_is(store, run_id, "timed_out"))

    kind, payload = (await activity_history(store))[-1]
    assert (kind, payload["timeout_kind"]) == ("ActivityTimedOut", "heartbeat")


async def test_schedule_to_start_timeout_is_enforced(store: Store) -> None:
    """A1, M6, store invariant 5: an attempt no worker picks up in time times out, finally."""
    run_id = await start_with_activity(store, max_attempts=5, schedule_to_start_timeout=0.3)

    await sweep_until(store, activity_state_is(store, run_id, "timed_out"))

    assert await nothing_to_claim(store)
    assert len(await open_workflow_tasks(store, run_id)) == 1
    events = await activity_history(store)
    assert [kind for kind, _ in events] == ["ActivityScheduled", "ActivityTimedOut"]
    assert events[-1][1]["timeout_kind"] == "schedule_to_start"


async def test_activity_past_schedule_to_close_is_never_claimed(store: Store) -> None:
    """A1, M3, store invariant 5: a ready attempt past its deadline is not run; it times out."""
    run_id = await start_with_activity(store, schedule_to_close_timeout=3600)
    await execute(
        store,
        "UPDATE activity_tasks SET schedule_to_close_deadline = now() - interval '1 second'"
        " WHERE run_id = :r",
        r=run_id,
    )

    assert await nothing_to_claim(store)
    await store.sweep()

    row = await activity(store, run_id)
    assert row["state"] == "timed_out"
    assert row["attempt"] == 1
    assert await nothing_to_claim(store)
    events = await activity_history(store)
    assert [kind for kind, _ in events] == ["ActivityScheduled", "ActivityTimedOut"]
    assert events[-1][1]["timeout_kind"] == "schedule_to_close"


async def test_lost_attempt_past_schedule_to_close_is_not_rerun(store: Store) -> None:
    """A1, D2, store invariant 5: an expired lease past the deadline is not retried."""
    run_id = await start_with_activity(store, max_attempts=5, schedule_to_close_timeout=3600)
    claimed = await claim_act(store)
    await execute(
        store,
        "UPDATE activity_tasks SET schedule_to_close_deadline = now() - interval '1 second',"
        " lease_expires_at = now() - interval '1 second' WHERE run_id = :r",
        r=run_id,
    )

    await store.sweep()

    row = await activity(store, run_id)
    assert (row["state"], row["attempt"]) == ("timed_out", 1)
    assert await nothing_to_claim(store)
    assert "ActivityRetryScheduled" not in await inbox_types(store, run_id)
    kind, payload = (await activity_history(store))[-1]
    assert (kind, payload["timeout_kind"]) == ("ActivityTimedOut", "schedule_to_close")
    with pytest.raises(StaleLease):
        await store.complete_activity_task(lease=claimed.lease, result=blob())


async def test_expired_activity_lease_is_swept_even_behind_many_healthy_activities(
    store: Store,
) -> None:
    """Store invariant 5, M6: a dead worker never holds an attempt forever, whatever the load."""
    await execute(
        store,
        "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue, input)"
        " SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, :ns,"
        " 'bulk-' || g, 'Flow', :q, '{}'::jsonb FROM generate_series(1, 500) AS g",
        ns=NS,
        q=QUEUE,
    )
    await execute(
        store,
        "INSERT INTO activity_tasks (task_id, run_id, step_seq, activity_type,"
        " activity_execution_id, activity_attempt_id, namespace, queue, state, lease_owner,"
        " lease_token, lease_expires_at, arguments, retry_policy, start_to_close_seconds,"
        " started_at) SELECT gen_random_uuid(), run_id, 1, 'charge', concat(run_id, ':', 1),"
        " gen_random_uuid(), :ns, :q, 'leased', 'healthy-worker', gen_random_uuid(),"
        " now() + interval '1 hour', '{}'::jsonb, '{}'::jsonb, 3600, now()"
        " FROM runs WHERE workflow_id LIKE 'bulk-%'",
        ns=NS,
        q=QUEUE,
    )
    run_id = await start_with_activity(store, max_attempts=3)
    await claim_act(store, lease=SHORT)

    await sweep_until(store, activity_state_is(store, run_id, "ready", 2), timeout=3.0)
