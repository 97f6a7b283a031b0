"""The default retry policy on a real Postgres (issue 13 item 6; A1, A2, store invariant 5).

Failed and lost attempts are retried without limit, 1 s x 2.0 apart up to 100 s, until the
execution succeeds or schedule_to_close_timeout ends it; an explicit max_attempts still ends it.
Backoff is skipped by moving `available_at` to now, so no test waits for it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from burrow import workflow
from burrow.protocol.shapes import Failure
from burrow.store import Store
from burrow.store import schema as s
from tests.support.store import (
    ACT,
    LEASE,
    blob,
    claim_act,
    claim_wf,
    db_now,
    execute,
    open_workflow_tasks,
    rows,
    start_with_activity,
    sweep_until,
)

DEFAULT = workflow.RetryPolicy().to_wire()
SHORT = timedelta(seconds=0.3)


async def make_due(store: Store, run_id: str) -> None:
    await execute(
        store, "UPDATE activity_tasks SET available_at = now() WHERE run_id = :r", r=run_id
    )


async def fail(store: Store, run_id: str, attempt: int) -> bool:
    claimed = await claim_act(store)
    assert claimed.attempt_number == attempt
    failed = await store.fail_activity_task(
        lease=claimed.lease, failure=Failure(exception_type="ValueError", message=f"try {attempt}")
    )
    return failed.retried


async def retries(store: Store, run_id: str) -> list[dict[str, Any]]:
    return [
        e["payload"]
        for e in await rows(store, s.inbox_events, run_id)
        if e["event_type"] == "ActivityRetryScheduled"
    ]


async def test_default_policy_retries_past_three_failures_with_growing_backoff(
    store: Store,
) -> None:
    """Issue 13 item 6, A1: six failures, six retries 1-32 s apart, then the result counts."""
    run_id = await start_with_activity(store, retry_policy=DEFAULT)
    for attempt in range(1, 7):
        assert await fail(store, run_id, attempt) is True
        [row] = await rows(store, s.activity_tasks, run_id)
        assert (row["state"], row["attempt"]) == ("ready", attempt + 1)
        assert await open_workflow_tasks(store, run_id) == []
        await make_due(store, run_id)

    final = await claim_act(store)
    assert final.attempt_number == 7
    await store.complete_activity_task(lease=final.lease, result=blob(7))

    recorded = await retries(store, run_id)
    assert [p["retry_backoff_seconds"] for p in recorded] == [1, 2, 4, 8, 16, 32]
    assert {p["max_attempts"] for p in recorded} == {0}  # 0 is "unlimited" on the wire
    task = await claim_wf(store)
    assert task.history[-1].event_type == "ActivityCompleted"


async def test_policy_without_max_attempts_retries_lost_attempts_without_limit(
    store: Store,
) -> None:
    """Issue 13 item 6, A2: attempts lost to a killed worker (expired leases) are not a failure.

    An external runtime may leave every key out (`retry_policy: {}`): the same default applies.
    """
    run_id = await start_with_activity(store, retry_policy={})
    for attempt in range(1, 6):
        claimed = await claim_act(store, worker_id=f"killed-{attempt}", lease=SHORT)
        assert claimed.attempt_number == attempt

        async def ready_again(expected: int = attempt + 1) -> bool:
            [row] = await rows(store, s.activity_tasks, run_id)
            return bool(row["state"] == "ready" and row["attempt"] == expected)

        await sweep_until(store, ready_again)
        await make_due(store, run_id)

    survivor = await claim_act(store)
    assert survivor.attempt_number == 6
    await store.complete_activity_task(lease=survivor.lease, result=blob())
    recorded = await retries(store, run_id)
    assert [p["retry_reason"] for p in recorded] == ["timeout"] * 5
    assert [p["exception_type"] for p in recorded] == ["LeaseExpired"] * 5
    assert [p["retry_backoff_seconds"] for p in recorded] == [1, 2, 4, 8, 16]


async def test_backoff_is_capped_at_one_hundred_seconds(store: Store) -> None:
    """Issue 13 item 6: the 9th retry would wait 256 s; the default caps it at 100 s."""
    run_id = await start_with_activity(store, retry_policy=DEFAULT)
    await execute(store, "UPDATE activity_tasks SET attempt = 9 WHERE run_id = :r", r=run_id)

    assert await fail(store, run_id, 9) is True

    [row] = await rows(store, s.activity_tasks, run_id)
    waited = row["available_at"] - await db_now(store)
    assert timedelta(seconds=95) < waited <= timedelta(seconds=100)
    assert [p["retry_backoff_seconds"] for p in await retries(store, run_id)] == [100]


async def test_schedule_to_close_timeout_bounds_the_unlimited_default(store: Store) -> None:
    """Issue 13 item 6, A1: retries stop once the next backoff would end past the deadline.

    With 60 s to close, the backoffs 1, 2, 4, 8, 16 and 32 s fit; 64 s does not.
    """
    run_id = await start_with_activity(store, retry_policy=DEFAULT, schedule_to_close_timeout=60)
    outcomes = []
    for attempt in range(1, 8):
        outcomes.append(await fail(store, run_id, attempt))
        await make_due(store, run_id)

    assert outcomes == [True] * 6 + [False]
    [row] = await rows(store, s.activity_tasks, run_id)
    assert (row["state"], row["attempt"]) == ("failed", 7)
    assert await store.claim_activity_tasks(flt=ACT, worker_id="w", lease=LEASE, limit=1) == []
    task = await claim_wf(store)
    assert task.history[-1].event_type == "ActivityFailed"


async def test_explicit_max_attempts_is_honoured_with_the_default_backoff(store: Store) -> None:
    """Issue 13 item 6: `RetryPolicy(max_attempts=2)` fails on the second failure."""
    policy = workflow.RetryPolicy(max_attempts=2).to_wire()
    run_id = await start_with_activity(store, retry_policy=policy)

    assert await fail(store, run_id, 1) is True
    await make_due(store, run_id)
    assert await fail(store, run_id, 2) is False

    [only] = await retries(store, run_id)
    assert (only["max_attempts"], only["retry_backoff_seconds"]) == (2, 1)
