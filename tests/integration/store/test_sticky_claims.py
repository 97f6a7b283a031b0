"""Sticky claims on a real Postgres: who gets a bound task, and when (S5, S7, S9).

Bindings are made the way a worker makes them (a completion with `sticky_ttl`); time passes by
ageing rows with SQL (`sticky_until`, `heartbeat_at`), never by sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from burrow.store import Store
from burrow.store.claims import QueueFilter, StickyClaim
from burrow.store.models import ClaimedWorkflowTask
from tests.support.sticky import (
    COLD,
    FORCED,
    HIT,
    STICKY,
    TTL,
    bound_run,
    claim,
    claim_by_id,
    claimed,
    register,
    signal,
    task_row,
)
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    WF,
    execute,
    open_workflow_tasks,
    snapshot,
    start,
    warm,
)

# -- S5a, S5b, S7: the claimer's own bound tasks first; unbound tasks to anyone ----------------


async def test_own_bound_task_is_claimed_before_an_older_unbound_task(store: Store) -> None:
    """S5a, S7: w1's bound task comes first (sticky_hit_expected), then the older unbound one."""
    await register(store, "w1")
    bound_id = await start(store, "wf-bound")
    first = await claimed(store, "w1")
    unbound_id = await start(store, "wf-unbound")  # ready before the bound task below
    await store.complete_workflow_task(lease=first.lease, commands=[], sticky_ttl=TTL)
    await signal(store, "wf-bound")
    [unbound_task] = await open_workflow_tasks(store, unbound_id)
    [bound_task] = await open_workflow_tasks(store, bound_id)
    assert unbound_task["available_at"] < bound_task["available_at"]

    [own] = await store.claim_workflow_tasks(
        flt=WF, worker_id="w1", lease=LEASE, limit=1, sticky=STICKY
    )

    assert own.lease.run_id == bound_id
    assert own.sticky.replay_mode is HIT
    assert own.sticky.worker_id == "w1"
    assert own.sticky.until == bound_task["sticky_until"]
    row = await task_row(store, own.lease.task_id)
    assert row["sticky_replay_mode"] == "sticky_hit_expected"
    assert row["sticky_claimed_at"] is not None
    assert row["sticky_claimed_at"] >= bound_task["available_at"]
    rest = await claimed(store, "w1")
    assert rest.lease.run_id == unbound_id
    assert rest.sticky.replay_mode is COLD


async def test_batch_claim_fills_with_own_bound_tasks_before_older_unbound_ones(
    store: Store,
) -> None:
    """S5a, S5b: a batch takes every task bound to the claimer, then the oldest of the rest."""
    await register(store, "w1")
    free_ids = [await start(store, f"wf-free-{i}") for i in range(3)]
    bound = [await bound_run(store, owner="w1", workflow_id=f"wf-bound-{i}") for i in range(2)]

    batch = await store.claim_workflow_tasks(
        flt=WF, worker_id="w1", lease=LEASE, limit=3, sticky=STICKY
    )

    modes = {task.lease.run_id: task.sticky.replay_mode for task in batch}
    assert modes == {bound[0][0]: HIT, bound[1][0]: HIT, free_ids[0]: COLD}


async def test_own_bound_task_already_leased_is_not_claimed_again(store: Store) -> None:
    """S5: sticky changes priority only: a leased task stays with its lease, even for its owner."""
    await register(store, "w1")
    run_id, _ = await bound_run(store, owner="w1")
    await claimed(store, "w1")
    before = await snapshot(store, run_id)

    assert await claim(store, "w1") is None
    assert await snapshot(store, run_id) == before


async def test_unbound_task_is_claimed_by_any_worker_for_a_cold_replay(store: Store) -> None:
    """S5b, S7: no binding applied: cold_replay, recorded with the claim time."""
    run_id = await start(store)

    task = await claimed(store, "w1")

    assert task.lease.run_id == run_id
    assert (task.sticky.worker_id, task.sticky.until, task.sticky.replay_mode) == (None, None, COLD)
    row = await task_row(store, task.lease.task_id)
    assert row["sticky_replay_mode"] == "cold_replay"
    assert row["sticky_claimed_at"] is not None


async def test_owner_claiming_after_its_binding_expired_is_a_forced_cold_replay(
    store: Store,
) -> None:
    """S5d, S7: the owner itself, too late: the binding existed but no longer applies."""
    await register(store, "w1")
    run_id, task_id = await bound_run(store, owner="w1")
    await execute(
        store,
        "UPDATE workflow_tasks SET sticky_until = now() - interval '1 second' WHERE run_id = :r",
        r=run_id,
    )

    task = await claimed(store, "w1")

    assert task.lease.task_id == task_id
    assert task.sticky.replay_mode is FORCED


# -- S5c, S5d: held for a live owner, released when it is unavailable --------------------------

ClaimPath = Callable[[Store, str, str], Awaitable[ClaimedWorkflowTask | None]]


async def _poll(store: Store, worker_id: str, task_id: str) -> ClaimedWorkflowTask | None:
    return await claim(store, worker_id)


async def _by_id(store: Store, worker_id: str, task_id: str) -> ClaimedWorkflowTask | None:
    return await claim_by_id(store, worker_id, task_id)


CLAIM_PATHS: dict[str, ClaimPath] = {"poll": _poll, "by-id": _by_id}


async def _binding_expired(store: Store) -> None:
    await execute(
        store,
        "UPDATE workflow_tasks SET sticky_until = now() - interval '1 second'"
        " WHERE sticky_worker_id = 'w2'",
    )


async def _heartbeat_stale(store: Store) -> None:
    await execute(
        store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 hour'"
        " WHERE worker_id = 'w2'",
    )


async def _drained(store: Store) -> None:
    await store.drain_worker(worker_id="w2")


async def _deregistered(store: Store) -> None:
    await store.deregister_worker(worker_id="w2")


async def _registered_without_cache(store: Store) -> None:
    await register(store, "w2", cache=False)


RELEASES: dict[str, Callable[[Store], Awaitable[None]] | None] = {
    "binding-expired": _binding_expired,
    "owner-heartbeat-stale": _heartbeat_stale,
    "owner-drained": _drained,
    "owner-deregistered": _deregistered,
    "owner-registered-without-sticky-cache": _registered_without_cache,
    "owner-never-registered": None,
}


@pytest.mark.parametrize("path", list(CLAIM_PATHS.values()), ids=list(CLAIM_PATHS))
@pytest.mark.parametrize("release", list(RELEASES.values()), ids=list(RELEASES))
async def test_task_bound_to_a_live_owner_is_held_until_the_owner_is_unavailable(
    store: Store, release: Callable[[Store], Awaitable[None]] | None, path: ClaimPath
) -> None:
    """S5c, S5d, S7: held for live w2; once w2 is unavailable, w1 takes it: forced_cold_replay."""
    await register(store, "w1")
    run_id, task_id = await bound_run(store, owner="w2")
    if release is not None:
        await register(store, "w2")
        before = await snapshot(store, run_id)

        assert await path(store, "w1", task_id) is None

        assert await snapshot(store, run_id) == before
        await release(store)

    task = await path(store, "w1", task_id)

    assert task is not None
    assert task.lease.task_id == task_id
    assert task.sticky.replay_mode is FORCED
    assert task.sticky.worker_id == "w2"
    row = await task_row(store, task_id)
    assert (row["lease_owner"], row["sticky_replay_mode"]) == ("w1", "forced_cold_replay")
    assert row["sticky_claimed_at"] is not None


async def test_owner_staleness_is_the_claimers_setting(store: Store) -> None:
    """S5c: an owner silent for 10 s is live under a 30 s staleness, gone under a 5 s one."""
    await register(store, "w2")
    await bound_run(store, owner="w2")
    await execute(
        store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '10 seconds'"
        " WHERE worker_id = 'w2'",
    )

    assert await claim(store, "w1", sticky=StickyClaim(owner_stale=timedelta(seconds=30))) is None
    task = await claim(store, "w1", sticky=StickyClaim(owner_stale=timedelta(seconds=5)))

    assert task is not None
    assert task.sticky.replay_mode is FORCED


async def test_an_owner_the_broker_found_gone_loses_its_bound_task_at_once(store: Store) -> None:
    """Broker invariant 4, S5c, S7: a live-looking owner named in `gone_owners` holds nothing."""
    await register(store, "w2")  # heartbeat fresh: by staleness alone it is live
    await bound_run(store, owner="w2")

    assert await claim(store, "w1", sticky=StickyClaim(gone_owners=("w9",))) is None
    task = await claim(store, "w1", sticky=StickyClaim(gone_owners=("w2", "w9")))

    assert task is not None
    assert task.sticky.replay_mode is FORCED


async def test_owner_racing_other_workers_gets_its_bound_task(
    store: Store, database_url: str
) -> None:
    """S5a, S5c: claims racing on separate connections never take a held task from its owner."""
    await register(store, "w2")
    _, task_id = await bound_run(store, owner="w2")
    claimers = ["w2", *(f"other-{i}" for i in range(5))]
    stores = [Store.connect(database_url, pool_size=1) for _ in claimers]
    try:
        await asyncio.gather(*(warm(other) for other in stores))
        results = await asyncio.gather(
            *(claim(other, worker_id) for other, worker_id in zip(stores, claimers, strict=True))
        )
    finally:
        await asyncio.gather(*(other.close() for other in stores))

    winners = [task for task in results if task is not None]
    assert [(t.lease.lease_owner, t.lease.task_id, t.sticky.replay_mode) for t in winners] == [
        ("w2", task_id, HIT)
    ]


async def test_a_held_task_does_not_hide_other_ready_work(store: Store) -> None:
    """S5c: w1 skips the task held for w2 and takes the unbound one behind it."""
    await register(store, "w2")
    await bound_run(store, owner="w2", workflow_id="wf-held")
    free_id = await start(store, "wf-free")

    task = await claimed(store, "w1")

    assert task.lease.run_id == free_id
    assert task.sticky.replay_mode is COLD


@pytest.mark.parametrize("claimer", ["w1", "w2"])
async def test_with_sticky_disabled_bindings_are_ignored(store: Store, claimer: str) -> None:
    """S5d, S9: sticky execution off: anyone claims a bound task, always as cold_replay."""
    await register(store, "w1")
    await register(store, "w2")
    _, task_id = await bound_run(store, owner="w2")
    off = StickyClaim(enabled=False)

    task = await claim(store, claimer, sticky=off)

    assert task is not None
    assert task.lease.task_id == task_id
    assert task.sticky.replay_mode is COLD
    assert (await task_row(store, task_id))["sticky_replay_mode"] == "cold_replay"


async def test_with_sticky_disabled_the_owner_gets_no_priority(store: Store) -> None:
    """S5d, S9: with sticky off, the oldest ready task comes first, bound to the claimer or not."""
    await register(store, "w1")
    bound_id = await start(store, "wf-bound")
    first = await claimed(store, "w1")
    unbound_id = await start(store, "wf-unbound")
    await store.complete_workflow_task(lease=first.lease, commands=[], sticky_ttl=TTL)
    await signal(store, "wf-bound")

    task = await claimed(store, "w1", sticky=StickyClaim(enabled=False))

    assert task.lease.run_id == unbound_id != bound_id


# -- S5: sticky changes priority only, never who may run a task --------------------------------


FILTER_MISSES = {
    "other-queue": QueueFilter(namespace=NS, queue="other-q", types=["Flow"], build_id="b1"),
    "other-namespace": QueueFilter(namespace="other", queue=QUEUE, types=["Flow"], build_id="b1"),
    "other-connection": QueueFilter(
        namespace=NS, queue=QUEUE, types=["Flow"], build_id="b1", connection="c2"
    ),
    "other-type": QueueFilter(namespace=NS, queue=QUEUE, types=["OtherFlow"], build_id="b1"),
    "other-build": QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b2"),
    "no-build": QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"]),
}
B1 = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"], build_id="b1")


@pytest.mark.parametrize("path", list(CLAIM_PATHS), ids=list(CLAIM_PATHS))
@pytest.mark.parametrize("flt", list(FILTER_MISSES.values()), ids=list(FILTER_MISSES))
async def test_sticky_owner_still_needs_a_matching_filter(
    store: Store, flt: QueueFilter, path: str
) -> None:
    """S5, S8, M7: a task bound to w1 on queue q, build b1 is not w1's on another filter."""
    await register(store, "w1", build_id="b1")
    run_id, task_id = await bound_run(store, owner="w1", flt=B1, build_id="b1")
    before = await snapshot(store, run_id)

    if path == "poll":
        missed = await claim(store, "w1", flt=flt)
    else:
        missed = await claim_by_id(store, "w1", task_id, flt=flt)

    assert missed is None
    assert await snapshot(store, run_id) == before
    task = await claimed(store, "w1", flt=B1)
    assert (task.lease.task_id, task.sticky.replay_mode) == (task_id, HIT)
