"""Claims and fencing on a real Postgres: M2, M3, M6, M7 and store invariants 1-2."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from burrow.protocol.shapes import Failure
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import EagerClaim, QueueFilter
from burrow.store.errors import StaleLease
from burrow.store.models import Lease
from tests.support.store import (
    ACT,
    LEASE,
    NS,
    QUEUE,
    WF,
    blob,
    claim_act,
    claim_wf,
    db_now,
    execute,
    rows,
    schedule,
    snapshot,
    start,
    start_with_activity,
    sweep_until,
    warm,
)

FAILURE = Failure(exception_type="X", message="m")


STALE: dict[str, Callable[[Lease], Lease]] = {
    "wrong-token": lambda lease: dataclasses.replace(lease, lease_token=str(uuid.uuid4())),
    "wrong-attempt": lambda lease: dataclasses.replace(lease, attempt=lease.attempt + 1),
    "wrong-owner": lambda lease: dataclasses.replace(lease, lease_owner="someone-else"),
}


# -- claims ------------------------------------------------------------------------------------


async def test_claim_leases_one_workflow_task_with_owner_token_and_expiry(store: Store) -> None:
    """M2, store invariant 1: a claim turns the ready task into one lease with an expiry."""
    run_id = await start(store)

    claimed = await claim_wf(store, worker_id="w1")

    [task] = await rows(store, s.workflow_tasks, run_id)
    assert task["state"] == "leased"
    assert task["lease_owner"] == "w1" == claimed.lease.lease_owner
    assert task["lease_token"] is not None
    assert task["lease_token"] == claimed.lease.lease_token
    assert task["lease_expires_at"] == claimed.lease.lease_expires_at
    assert task["lease_expires_at"] > await db_now(store)
    assert task["attempt"] == claimed.lease.attempt == claimed.attempt == 1
    assert claimed.lease.task_id == task["task_id"]
    assert claimed.lease.run_id == run_id
    assert [e.event_type for e in claimed.history] == ["WorkflowStarted"]

    assert await store.claim_workflow_task(flt=WF, worker_id="w2", lease=LEASE) is None
    assert await rows(store, s.workflow_tasks, run_id) == [task]


async def test_claim_activity_leases_at_most_limit_tasks_with_distinct_tokens(
    store: Store,
) -> None:
    """M2, store invariant 1: an activity poll leases up to `limit` tasks, each its own token."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[schedule(1), schedule(2), schedule(3)]
    )

    claimed = await store.claim_activity_tasks(flt=ACT, worker_id="w1", lease=LEASE, limit=2)

    assert len(claimed) == 2
    assert len({c.lease.lease_token for c in claimed}) == 2
    acts = await rows(store, s.activity_tasks, run_id)
    leased = [a for a in acts if a["state"] == "leased"]
    assert sorted(a["task_id"] for a in leased) == sorted(c.lease.task_id for c in claimed)
    assert all(a["lease_owner"] == "w1" and a["started_at"] is not None for a in leased)
    assert [a["state"] for a in acts].count("ready") == 1
    assert len(await store.claim_activity_tasks(flt=ACT, worker_id="w2", lease=LEASE, limit=5)) == 1
    assert await store.claim_activity_tasks(flt=ACT, worker_id="w3", lease=LEASE, limit=5) == []


WF_MISSES = {
    "wrong-namespace": QueueFilter(namespace="other", queue=QUEUE, types=["Flow"]),
    "wrong-queue": QueueFilter(namespace=NS, queue="other-q", types=["Flow"]),
    "wrong-connection": QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], connection="c2"),
    "undeclared-type": QueueFilter(namespace=NS, queue=QUEUE, types=["OtherFlow"]),
    "no-types": QueueFilter(namespace=NS, queue=QUEUE, types=[]),
}


@pytest.mark.parametrize("flt", list(WF_MISSES.values()), ids=list(WF_MISSES))
async def test_workflow_claim_outside_the_filter_claims_nothing(
    store: Store, flt: QueueFilter
) -> None:
    """M3, M7: namespace, queue, connection and workflow-type filters must all match."""
    run_id = await start(store)
    before = await snapshot(store, run_id)

    assert await store.claim_workflow_task(flt=flt, worker_id="w1", lease=LEASE) is None

    assert await snapshot(store, run_id) == before
    assert (await claim_wf(store)).lease.run_id == run_id


async def test_workflow_claim_waits_for_available_at(store: Store) -> None:
    """M3: a task whose `available_at` is in the future is not ready yet."""
    run_id = await start(store)
    await execute(
        store,
        "UPDATE workflow_tasks SET available_at = now() + interval '1 hour' WHERE run_id = :r",
        r=run_id,
    )
    before = await snapshot(store, run_id)

    assert await store.claim_workflow_task(flt=WF, worker_id="w1", lease=LEASE) is None
    assert await snapshot(store, run_id) == before

    await execute(
        store, "UPDATE workflow_tasks SET available_at = now() WHERE run_id = :r", r=run_id
    )
    assert (await claim_wf(store)).lease.run_id == run_id


async def test_workflow_claim_respects_the_build_compatibility_family(store: Store) -> None:
    """M3, M7: a task pinned to a build is only claimed by a poller of that build."""
    run_id = await start(store, build_id="b2")
    unversioned = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"])
    other_build = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b1")
    same_build = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b2")

    assert await store.claim_workflow_task(flt=unversioned, worker_id="w1", lease=LEASE) is None
    assert await store.claim_workflow_task(flt=other_build, worker_id="w1", lease=LEASE) is None
    claimed = await store.claim_workflow_task(flt=same_build, worker_id="w1", lease=LEASE)

    assert claimed is not None
    assert claimed.lease.run_id == run_id


ACT_MISSES = {
    "wrong-namespace": QueueFilter(namespace="other", queue=QUEUE, types=["charge"]),
    "wrong-queue": QueueFilter(namespace=NS, queue="other-q", types=["charge"]),
    "wrong-connection": QueueFilter(namespace=NS, queue=QUEUE, types=["charge"], connection="c2"),
    "undeclared-activity-type": QueueFilter(namespace=NS, queue=QUEUE, types=["refund"]),
    "no-activity-types": QueueFilter(namespace=NS, queue=QUEUE, types=[]),
}


@pytest.mark.parametrize("flt", list(ACT_MISSES.values()), ids=list(ACT_MISSES))
async def test_activity_claim_outside_the_filter_claims_nothing(
    store: Store, flt: QueueFilter
) -> None:
    """M3, M7: an activity poll needs matching namespace, queue, connection and declared type."""
    run_id = await start_with_activity(store)
    before = await snapshot(store, run_id)

    assert await store.claim_activity_tasks(flt=flt, worker_id="w1", lease=LEASE, limit=10) == []

    assert await snapshot(store, run_id) == before
    assert (await claim_act(store)).run_id == run_id


async def test_activity_claim_waits_for_available_at(store: Store) -> None:
    """M3: an activity attempt whose `available_at` is in the future is not claimed."""
    run_id = await start_with_activity(store)
    await execute(
        store,
        "UPDATE activity_tasks SET available_at = now() + interval '1 hour' WHERE run_id = :r",
        r=run_id,
    )
    before = await snapshot(store, run_id)

    assert await store.claim_activity_tasks(flt=ACT, worker_id="w1", lease=LEASE, limit=10) == []
    assert await snapshot(store, run_id) == before

    await execute(
        store, "UPDATE activity_tasks SET available_at = now() WHERE run_id = :r", r=run_id
    )
    assert (await claim_act(store)).run_id == run_id


# -- fencing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stale", list(STALE.values()), ids=list(STALE))
async def test_workflow_task_complete_or_fail_with_stale_lease_changes_nothing(
    store: Store, stale: Callable[[Lease], Lease]
) -> None:
    """M6, store invariant 2: a wrong token, attempt or owner is refused and writes nothing."""
    run_id = await start(store)
    claimed = await claim_wf(store)
    before = await snapshot(store, run_id)
    bad = stale(claimed.lease)

    with pytest.raises(StaleLease):
        await store.complete_workflow_task(
            lease=bad, commands=[schedule(1), {"type": "complete_workflow", "result": blob()}]
        )
    with pytest.raises(StaleLease):
        await store.fail_workflow_task(lease=bad, failure=FAILURE)

    assert await snapshot(store, run_id) == before
    await store.complete_workflow_task(lease=claimed.lease, commands=[schedule(1)])
    history = await store.read_history(run_id=run_id)
    assert [e.event_type for e in history] == ["WorkflowStarted", "ActivityScheduled"]


async def _complete(store: Store, lease: Lease) -> Any:
    return await store.complete_activity_task(lease=lease, result=blob(7))


async def _fail(store: Store, lease: Lease) -> Any:
    return await store.fail_activity_task(lease=lease, failure=FAILURE)


async def _heartbeat(store: Store, lease: Lease) -> Any:
    return await store.heartbeat_activity_task(
        lease=lease, details={"progress": 1}, lease_duration=timedelta(seconds=60)
    )


ACTIVITY_OPS: dict[str, Callable[[Store, Lease], Awaitable[Any]]] = {
    "complete": _complete,
    "fail": _fail,
    "heartbeat": _heartbeat,
}


@pytest.mark.parametrize("stale", list(STALE.values()), ids=list(STALE))
@pytest.mark.parametrize("op", list(ACTIVITY_OPS.values()), ids=list(ACTIVITY_OPS))
async def test_activity_op_with_stale_lease_changes_nothing(
    store: Store,
    op: Callable[[Store, Lease], Awaitable[Any]],
    stale: Callable[[Lease], Lease],
) -> None:
    """M6, W7, store invariant 2: complete/fail/heartbeat with a stale lease writes nothing."""
    run_id = await start_with_activity(store)
    claimed = await claim_act(store)
    before = await snapshot(store, run_id)

    with pytest.raises(StaleLease):
        await op(store, stale(claimed.lease))

    assert await snapshot(store, run_id) == before
    await store.complete_activity_task(lease=claimed.lease, result=blob(7))
    [act] = await rows(store, s.activity_tasks, run_id)
    assert act["state"] == "completed"


async def test_workflow_task_lease_reclaimed_after_expiry_fences_out_the_old_owner(
    store: Store,
) -> None:
    """M6, store invariants 2 and 5: after expiry and reclaim, the first owner's lease is stale."""
    run_id = await start(store)
    first = await claim_wf(store, worker_id="w1", lease=timedelta(seconds=0.3))

    async def ready_again() -> bool:
        [task] = await rows(store, s.workflow_tasks, run_id)
        return bool(task["state"] == "ready")

    await sweep_until(store, ready_again)
    second = await claim_wf(store, worker_id="w2")
    assert second.lease.task_id == first.lease.task_id
    assert second.lease.attempt == first.lease.attempt + 1
    before = await snapshot(store, run_id)

    with pytest.raises(StaleLease):
        await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)])
    with pytest.raises(StaleLease):
        await store.fail_workflow_task(lease=first.lease, failure=FAILURE)

    assert await snapshot(store, run_id) == before
    [task] = await rows(store, s.workflow_tasks, run_id)
    assert (task["state"], task["lease_owner"]) == ("leased", "w2")
    await store.complete_workflow_task(lease=second.lease, commands=[schedule(1)])
    assert len(await store.read_history(run_id=run_id)) == 2


async def test_activity_lease_reclaimed_after_expiry_fences_out_the_old_owner(
    store: Store,
) -> None:
    """M6, W7, store invariant 2: once the sweep hands the attempt on, w1 can change nothing."""
    run_id = await start_with_activity(store)
    first = await claim_act(store, worker_id="w1", lease=timedelta(seconds=0.3))

    async def retried() -> bool:
        [act] = await rows(store, s.activity_tasks, run_id)
        return bool(act["state"] == "ready" and act["attempt"] == 2)

    await sweep_until(store, retried)
    second = await claim_act(store, worker_id="w2")
    assert second.lease.task_id == first.lease.task_id
    assert second.attempt_number == 2
    assert second.activity_attempt_id != first.activity_attempt_id
    before = await snapshot(store, run_id)

    for op in ACTIVITY_OPS.values():
        with pytest.raises(StaleLease):
            await op(store, first.lease)

    assert await snapshot(store, run_id) == before
    await store.complete_activity_task(lease=second.lease, result=blob(2))
    [act] = await rows(store, s.activity_tasks, run_id)
    assert act["state"] == "completed"


async def test_completing_the_same_activity_lease_twice_records_one_result(store: Store) -> None:
    """D2, store invariant 2: a second completion of a finished attempt is refused."""
    run_id = await start_with_activity(store)
    claimed = await claim_act(store)
    await store.complete_activity_task(lease=claimed.lease, result=blob(1))
    before = await snapshot(store, run_id)

    with pytest.raises(StaleLease):
        await store.complete_activity_task(lease=claimed.lease, result=blob(2))
    with pytest.raises(StaleLease):
        await store.fail_activity_task(lease=claimed.lease, failure=FAILURE)

    assert await snapshot(store, run_id) == before


# -- races -------------------------------------------------------------------------------------


async def race(
    database_url: str, racers: int, call: Callable[[Store, int], Awaitable[Any]]
) -> list[Any]:
    """Run `call(store, i)` at once on `racers` stores of one warm connection each.

    Results come back in order; exceptions are returned, not raised.
    """
    stores = [Store.connect(database_url, pool_size=1) for _ in range(racers)]
    try:
        await asyncio.gather(*(warm(other) for other in stores))
        return await asyncio.gather(
            *(call(other, i) for i, other in enumerate(stores)), return_exceptions=True
        )
    finally:
        await asyncio.gather(*(other.close() for other in stores))


@pytest.mark.parametrize("claimers", [2, 20])
async def test_concurrent_workflow_claimers_exactly_one_wins(
    store: Store, database_url: str, claimers: int
) -> None:
    """M2, M6, store invariant 1: racing pollers on separate connections get one lease."""
    run_id = await start(store)
    results = await race(
        database_url,
        claimers,
        lambda other, i: other.claim_workflow_task(flt=WF, worker_id=f"w{i}", lease=LEASE),
    )

    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    [task] = await rows(store, s.workflow_tasks, run_id)
    assert task["state"] == "leased"
    assert task["lease_owner"] == winners[0].lease.lease_owner
    assert task["lease_token"] == winners[0].lease.lease_token


@pytest.mark.parametrize("claimers", [2, 20])
async def test_concurrent_activity_claimers_exactly_one_wins(
    store: Store, database_url: str, claimers: int
) -> None:
    """M2, M6, store invariant 1: racing activity pollers lease the one attempt once."""
    run_id = await start_with_activity(store)
    results = await race(
        database_url,
        claimers,
        lambda other, i: other.claim_activity_tasks(
            flt=ACT, worker_id=f"w{i}", lease=LEASE, limit=5
        ),
    )

    winners = [claimed for result in results for claimed in result]
    assert len(winners) == 1
    [act] = await rows(store, s.activity_tasks, run_id)
    assert (act["state"], act["lease_owner"]) == ("leased", winners[0].lease.lease_owner)
    assert act["lease_token"] == winners[0].lease.lease_token
    inbox = await rows(store, s.inbox_events, run_id)
    assert [e["event_type"] for e in inbox] == ["ActivityStarted"]


async def test_twenty_concurrent_completions_of_one_activity_lease_record_one_result(
    store: Store, database_url: str
) -> None:
    """D2, D3, store invariants 2-3: one completion wins; history gets one ActivityCompleted."""
    run_id = await start_with_activity(store)
    claimed = await claim_act(store)
    results = await race(
        database_url,
        20,
        lambda other, i: other.complete_activity_task(lease=claimed.lease, result=blob(i)),
    )

    successes = [i for i, result in enumerate(results) if not isinstance(result, BaseException)]
    assert len(successes) == 1
    assert all(isinstance(r, StaleLease) for r in results if isinstance(r, BaseException))
    [act] = await rows(store, s.activity_tasks, run_id)
    assert act["state"] == "completed"

    task = await claim_wf(store)
    completed = [e for e in task.history if e.event_type == "ActivityCompleted"]
    assert len(completed) == 1
    assert completed[0].payload["result"] == blob(successes[0])["blob"]
    assert completed[0].payload["sequence"] == 1
    assert await store.read_history(run_id=run_id) == task.history


async def test_batch_workflow_claim_leases_up_to_limit_runs_each_with_its_own_history(
    store: Store,
) -> None:
    """M2: one transaction leases several ready workflow tasks; a short batch means drained."""
    run_ids = [await start(store, f"wf-{i}") for i in range(5)]

    first = await store.claim_workflow_tasks(flt=WF, worker_id="w1", lease=LEASE, limit=3)
    rest = await store.claim_workflow_tasks(flt=WF, worker_id="w1", lease=LEASE, limit=3)

    assert [len(first), len(rest)] == [3, 2]
    claimed = first + rest
    assert sorted(c.run.run_id for c in claimed) == sorted(run_ids)
    assert len({c.lease.lease_token for c in claimed}) == 5
    for task in claimed:
        assert [(e.run_id, e.sequence, e.event_type) for e in task.history] == [
            (task.run.run_id, 1, "WorkflowStarted")
        ]
    assert await store.claim_workflow_tasks(flt=WF, worker_id="w1", lease=LEASE, limit=3) == []


@pytest.mark.parametrize("claimers", [2, 8])
async def test_concurrent_batch_claimers_split_the_ready_tasks_without_overlap(
    store: Store, database_url: str, claimers: int
) -> None:
    """M6, store invariant 1: racing batch claims never lease one task twice."""
    for i in range(12):
        await start(store, f"wf-{i}")
    batches = await race(
        database_url,
        claimers,
        lambda other, i: other.claim_workflow_tasks(
            flt=WF, worker_id=f"w{i}", lease=LEASE, limit=4
        ),
    )

    task_ids = [c.lease.task_id for batch in batches for c in batch]
    assert len(task_ids) == len(set(task_ids)) == min(12, 4 * claimers)
    leased = [t for t in await rows(store, s.workflow_tasks) if t["state"] == "leased"]
    assert sorted(t["task_id"] for t in leased) == sorted(task_ids)


@pytest.mark.parametrize("at_position", [False, True], ids=["transactional", "one-statement"])
async def test_activity_of_a_pinned_run_is_claimed_only_by_its_build(
    store: Store, at_position: bool
) -> None:
    """S8, M7: a run's activity attempts inherit its build (PROTOCOL.md 16).

    Both completion paths write it, and the activity claim applies the workflow claim's rule: an
    attempt of a run pinned to a build goes only to pollers of that build.
    """
    run_id = await start(store, build_id="b2")
    wf_filter = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b2")
    task = await store.claim_workflow_task(flt=wf_filter, worker_id="w1", lease=LEASE)
    assert task is not None
    await store.complete_workflow_task(
        lease=task.lease, commands=[schedule(1)], position=task.position if at_position else None
    )
    [row] = await rows(store, s.activity_tasks, run_id)
    assert row["build_id"] == "b2"

    unversioned = QueueFilter(namespace=NS, queue=QUEUE, types=["charge"])
    other_build = QueueFilter(namespace=NS, queue=QUEUE, types=["charge"], build_id="b1")
    same_build = QueueFilter(namespace=NS, queue=QUEUE, types=["charge"], build_id="b2")
    for flt in (unversioned, other_build):
        assert await store.claim_activity_tasks(flt=flt, worker_id="w2", lease=LEASE, limit=5) == []
    [claimed] = await store.claim_activity_tasks(
        flt=same_build, worker_id="w2", lease=LEASE, limit=5
    )
    assert claimed.run_id == run_id


async def test_eager_dispatch_leases_no_attempt_of_another_build(store: Store) -> None:
    """S8, M7: an eager claim filters attempts by build as a poll does."""
    run_id = await start(store, build_id="b2")
    wf_filter = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b2")
    task = await store.claim_workflow_task(flt=wf_filter, worker_id="w1", lease=LEASE)
    assert task is not None
    other_build = QueueFilter(namespace=NS, queue=QUEUE, types=["charge"], build_id="b1")
    eager = EagerClaim(flt=other_build, worker_id="w1", lease=LEASE)

    outcome = await store.complete_workflow_task(
        lease=task.lease, commands=[schedule(1)], eager=eager, position=task.position
    )

    assert outcome.eager_activities == []
    [row] = await rows(store, s.activity_tasks, run_id)
    assert (row["state"], row["build_id"]) == ("ready", "b2")
