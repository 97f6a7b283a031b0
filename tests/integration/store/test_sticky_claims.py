"""Sticky bindings and sticky claims on a real Postgres (S4, S5, S7, S8, S9).

Bindings are made the way a worker makes them (a completion with `sticky_ttl`); time passes by
ageing rows with SQL (`sticky_until`, `heartbeat_at`, `fire_at`), never by sleeping.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure
from burrow.store import Store, claims
from burrow.store import schema as s
from burrow.store.claims import EagerClaim, QueueFilter, StickyClaim
from burrow.store.models import ClaimedWorkflowTask, ReplayMode, StickyCacheReport
from burrow.store.ready import ReadyTask
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    WF,
    blob,
    claim_act,
    db_now,
    execute,
    open_workflow_tasks,
    rows,
    schedule,
    snapshot,
    start,
    warm,
)

TTL = timedelta(minutes=5)
STICKY = StickyClaim()
TAIL = StickyClaim(tail_when_bound=True)  # as a worker with a cache claims
HIT = ReplayMode.STICKY_HIT_EXPECTED
COLD = ReplayMode.COLD_REPLAY
FORCED = ReplayMode.FORCED_COLD_REPLAY


# -- helpers -----------------------------------------------------------------------------------


async def register(
    store: Store, worker_id: str, *, build_id: str | None = None, cache: bool = True
) -> None:
    """Register a worker on the test queue, with a sticky cache unless `cache` is False (S3)."""
    await store.register_worker(
        worker_id=worker_id,
        namespace=NS,
        task_queue=QUEUE,
        workflow_types=["Flow"],
        activity_types=["charge"],
        concurrency=4,
        build_id=build_id,
        sticky_cache=StickyCacheReport(enabled=True, capacity=10) if cache else None,
    )


async def claim(
    store: Store, worker_id: str, *, sticky: StickyClaim = STICKY, flt: QueueFilter = WF
) -> ClaimedWorkflowTask | None:
    return await store.claim_workflow_task(flt=flt, worker_id=worker_id, lease=LEASE, sticky=sticky)


async def claim_by_id(
    store: Store,
    worker_id: str,
    task_id: str,
    *,
    sticky: StickyClaim = STICKY,
    flt: QueueFilter = WF,
) -> ClaimedWorkflowTask | None:
    """The claim of one named task (the eager path), in a transaction of its own."""
    async with store.transactions.begin() as conn:
        leased = await claims.claim_workflow_task(
            conn, flt=flt, worker_id=worker_id, lease=LEASE, task_id=task_id, sticky=sticky
        )
    return None if leased is None else leased.claimed()


async def claimed(
    store: Store, worker_id: str, *, sticky: StickyClaim = STICKY, flt: QueueFilter = WF
) -> ClaimedWorkflowTask:
    task = await claim(store, worker_id, sticky=sticky, flt=flt)
    assert task is not None
    return task


async def signal(store: Store, workflow_id: str = "wf-1") -> None:
    await store.signal_workflow(
        namespace=NS,
        workflow_id=workflow_id,
        signal_name="go",
        arguments=blob(),
        signal_id=str(uuid.uuid4()),
    )


async def bound_run(
    store: Store,
    owner: str = "w2",
    workflow_id: str = "wf-1",
    *,
    flt: QueueFilter = WF,
    **start_options: Any,
) -> tuple[str, str]:
    """A run bound to `owner`, with a ready workflow task that inherited the binding (S4).

    The owner claims the first task, completes it with a sticky TTL, then a signal makes the
    next task. Returns (run id, ready task id).
    """
    run_id = await start(store, workflow_id, **start_options)
    [created] = await open_workflow_tasks(store, run_id)
    first = await claim_by_id(store, owner, str(created["task_id"]), flt=flt)
    assert first is not None
    await store.complete_workflow_task(lease=first.lease, commands=[], sticky_ttl=TTL)
    await signal(store, workflow_id)
    [task] = await open_workflow_tasks(store, run_id)
    assert (task["state"], task["sticky_worker_id"]) == ("ready", owner)
    return run_id, str(task["task_id"])


async def run_row(store: Store, run_id: str) -> dict[str, Any]:
    [run] = await rows(store, s.runs, run_id)
    return run


async def task_row(store: Store, task_id: str) -> dict[str, Any]:
    [task] = [t for t in await rows(store, s.workflow_tasks) if str(t["task_id"]) == task_id]
    return task


async def registration(store: Store, worker_id: str) -> dict[str, Any]:
    [row] = [r for r in await rows(store, s.worker_registrations) if r["worker_id"] == worker_id]
    return row


def notices_for(noticed: list[ReadyTask], task_id: str) -> list[ReadyTask]:
    return [n for n in noticed if n.task_id is not None and str(n.task_id) == task_id]


# -- S4: completions bind the run, new workflow tasks inherit the binding ----------------------


async def test_completion_with_sticky_ttl_binds_the_run_to_the_lease_owner(store: Store) -> None:
    """S4: the run records the completing worker as owner until now + ttl."""
    run_id = await start(store)
    task = await claimed(store, "w1")

    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)], sticky_ttl=TTL)

    run = await run_row(store, run_id)
    now = await db_now(store)
    assert run["sticky_worker_id"] == "w1"
    assert now + TTL - timedelta(seconds=5) < run["sticky_until"] <= now + TTL


async def _by_activity_completion(store: Store, run_id: str) -> None:
    act = await claim_act(store)
    await store.complete_activity_task(lease=act.lease, result=blob(7))


async def _by_signal(store: Store, run_id: str) -> None:
    await signal(store)


async def _by_timer(store: Store, run_id: str) -> None:
    await execute(
        store, "UPDATE timers SET fire_at = now() - interval '1 second' WHERE run_id = :r", r=run_id
    )
    assert (await store.sweep()).timers_fired == 1


async def _by_update(store: Store, run_id: str) -> None:
    await store.submit_update(
        namespace=NS, workflow_id="wf-1", update_name="u", arguments=blob(), update_id="u-1"
    )


NEXT_TASK: dict[str, Callable[[Store, str], Awaitable[None]]] = {
    "activity-completion": _by_activity_completion,
    "signal": _by_signal,
    "timer": _by_timer,
    "update": _by_update,
}


@pytest.mark.parametrize("make_next", list(NEXT_TASK.values()), ids=list(NEXT_TASK))
async def test_next_workflow_task_inherits_the_binding_and_its_notice_names_the_owner(
    store: Store, noticed: list[ReadyTask], make_next: Callable[[Store, str], Awaitable[None]]
) -> None:
    """S4: a workflow task created after a sticky completion carries the run's binding."""
    await register(store, "w1")
    run_id = await start(store)
    task = await claimed(store, "w1")
    commands = [schedule(1), cmd.StartTimer(delay_seconds=3600)]
    await store.complete_workflow_task(lease=task.lease, commands=commands, sticky_ttl=TTL)
    noticed.clear()

    await make_next(store, run_id)

    [next_task] = await open_workflow_tasks(store, run_id)
    run = await run_row(store, run_id)
    assert next_task["state"] == "ready"
    assert next_task["sticky_worker_id"] == "w1"
    assert next_task["sticky_until"] == run["sticky_until"]
    [notice] = notices_for(noticed, str(next_task["task_id"]))
    assert (notice.kind, notice.queue, notice.sticky_worker_id) == ("workflow", QUEUE, "w1")


async def test_inbox_event_waiting_at_completion_makes_a_bound_next_task(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S4: a signal that arrived while the task was leased gets a task bound to the completer."""
    await register(store, "w1")
    run_id = await start(store)
    task = await claimed(store, "w1")
    await signal(store)
    assert [t["state"] for t in await open_workflow_tasks(store, run_id)] == ["leased"]
    noticed.clear()

    outcome = await store.complete_workflow_task(lease=task.lease, commands=[], sticky_ttl=TTL)

    assert outcome.workflow_task_created
    [next_task] = await open_workflow_tasks(store, run_id)
    run = await run_row(store, run_id)
    assert (next_task["sticky_worker_id"], run["sticky_worker_id"]) == ("w1", "w1")
    assert next_task["sticky_until"] == run["sticky_until"] is not None
    [notice] = notices_for(noticed, str(next_task["task_id"]))
    assert notice.sticky_worker_id == "w1"


async def test_failed_and_expired_bound_tasks_are_announced_to_their_owner(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S4: a bound task handed back (failure, lease expiry) keeps its binding and its owner."""
    await register(store, "w1")
    run_id, task_id = await bound_run(store, owner="w1")
    first = await claimed(store, "w1")
    noticed.clear()

    await store.fail_workflow_task(lease=first.lease, failure=Failure(exception_type="X"))

    [failed] = notices_for(noticed, task_id)
    assert failed.sticky_worker_id == "w1"
    await execute(
        store, "UPDATE workflow_tasks SET available_at = now() WHERE run_id = :r", r=run_id
    )
    second = await claimed(store, "w1")
    assert second.sticky.replay_mode is HIT
    await execute(
        store,
        "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 second'"
        " WHERE run_id = :r",
        r=run_id,
    )
    noticed.clear()

    assert (await store.sweep()).expired_workflow_leases == 1

    [expired] = notices_for(noticed, task_id)
    assert expired.sticky_worker_id == "w1"
    assert (await task_row(store, task_id))["sticky_worker_id"] == "w1"


async def test_completion_without_ttl_clears_the_binding(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S4: a completion that keeps nothing warm leaves the run, and its next task, unbound."""
    run_id, _ = await bound_run(store, owner="w1")
    task = await claimed(store, "w1")

    await store.complete_workflow_task(lease=task.lease, commands=[])

    run = await run_row(store, run_id)
    assert (run["sticky_worker_id"], run["sticky_until"]) == (None, None)
    noticed.clear()
    await signal(store)
    [next_task] = await open_workflow_tasks(store, run_id)
    assert (next_task["sticky_worker_id"], next_task["sticky_until"]) == (None, None)
    [notice] = notices_for(noticed, str(next_task["task_id"]))
    assert notice.sticky_worker_id is None
    assert (await claimed(store, "w1")).sticky.replay_mode is COLD


CLOSING: dict[str, cmd.Command] = {
    "complete": cmd.CompleteWorkflow(result=codec.encode(["done"])),
    "fail": cmd.FailWorkflow(message="boom"),
    "cancel": cmd.CancelWorkflow(message="stop"),
}


@pytest.mark.parametrize("closing", list(CLOSING.values()), ids=list(CLOSING))
async def test_completion_that_closes_the_run_clears_the_binding(
    store: Store, closing: cmd.Command
) -> None:
    """S4: a closed run is bound to nobody, even when the completion asked for a TTL."""
    run_id, _ = await bound_run(store, owner="w1")
    task = await claimed(store, "w1")

    await store.complete_workflow_task(lease=task.lease, commands=[closing], sticky_ttl=TTL)

    run = await run_row(store, run_id)
    assert run["status"] != "running"
    assert (run["sticky_worker_id"], run["sticky_until"]) == (None, None)


async def test_continue_as_new_leaves_both_runs_unbound(store: Store) -> None:
    """S4: the closed run drops its binding; the new run starts with a cold, unbound task."""
    run_id, _ = await bound_run(store, owner="w1")
    task = await claimed(store, "w1")
    arguments = codec.encode([2])
    continued = cmd.ContinueAsNew(arguments=arguments, workflow_type="Flow", queue=QUEUE)

    outcome = await store.complete_workflow_task(
        lease=task.lease, commands=[continued], sticky_ttl=TTL
    )

    assert outcome.continued_run_id is not None
    for run in (await run_row(store, run_id), await run_row(store, outcome.continued_run_id)):
        assert (run["sticky_worker_id"], run["sticky_until"]) == (None, None)
    new_task = await claimed(store, "w1")
    assert new_task.lease.run_id == outcome.continued_run_id
    assert new_task.sticky.replay_mode is COLD


async def test_completion_by_another_worker_moves_the_binding(store: Store) -> None:
    """S4, S7: a forced cold replay on w1 that completes with a TTL rebinds the run to w1."""
    run_id, _ = await bound_run(store, owner="w2")  # w2 never registered: unavailable
    task = await claimed(store, "w1")
    assert task.sticky.replay_mode is FORCED

    await store.complete_workflow_task(lease=task.lease, commands=[], sticky_ttl=TTL)

    assert (await run_row(store, run_id))["sticky_worker_id"] == "w1"
    await signal(store)
    assert (await claimed(store, "w1")).sticky.replay_mode is HIT


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


# -- the eager path (claim by id) follows the same rules ---------------------------------------


EAGER_CASES = {
    "owner": ("w2", False, HIT),
    "other-while-owner-live": ("w1", False, None),
    "other-after-owner-drained": ("w1", True, FORCED),
}


@pytest.mark.parametrize(
    ("claimer", "drain_owner", "mode"), list(EAGER_CASES.values()), ids=list(EAGER_CASES)
)
async def test_eager_claim_after_an_activity_completion_obeys_the_sticky_rules(
    store: Store,
    noticed: list[ReadyTask],
    claimer: str,
    drain_owner: bool,
    mode: ReplayMode | None,
) -> None:
    """S5, S7: the completing worker leases the follow-up task only if a poll could."""
    await register(store, "w1")
    await register(store, "w2")
    run_id = await start(store)
    first = await claimed(store, "w2")
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)], sticky_ttl=TTL)
    act = await claim_act(store, worker_id=claimer)
    if drain_owner:
        await store.drain_worker(worker_id="w2")
    noticed.clear()

    eager = EagerClaim(flt=WF, worker_id=claimer, lease=LEASE, sticky=STICKY)
    task = (
        await store.complete_activity_task(lease=act.lease, result=blob(7), eager=eager)
    ).follow_up

    [open_task] = await open_workflow_tasks(store, run_id)
    if mode is None:
        assert task is None
        assert open_task["state"] == "ready"
        [notice] = notices_for(noticed, str(open_task["task_id"]))
        assert notice.sticky_worker_id == "w2"
    else:
        assert task is not None
        assert task.sticky.replay_mode is mode
        assert (open_task["state"], open_task["lease_owner"]) == ("leased", claimer)
        assert noticed == []


async def _follow_up_of_an_activity(
    store: Store, workflow_id: str, sticky: StickyClaim, *, eager: bool
) -> tuple[str, ClaimedWorkflowTask]:
    """A run bound to w1 whose activity w1 completes, and the follow-up task w1 then holds:
    leased in the completion's own statement (eager), or by w1's claim after it."""
    run_id = await start(store, workflow_id)
    first = await claimed(store, "w1", sticky=sticky)
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)], sticky_ttl=TTL)
    act = await claim_act(store)
    follow_up = EagerClaim(flt=WF, worker_id="w1", lease=LEASE, sticky=sticky)
    done = await store.complete_activity_task(
        lease=act.lease, result=blob(7), eager=follow_up if eager else None
    )
    task = done.follow_up
    if not eager:
        assert task is None
        task = await claimed(store, "w1", sticky=sticky)
    assert task is not None
    return run_id, task


def _claim_shape(run_id: str, task: ClaimedWorkflowTask) -> dict[str, Any]:
    """What a claim hands the worker, without the ids and clocks that differ between runs."""
    assert task.lease.run_id == task.run.run_id == run_id
    assert task.position is not None
    return {
        "attempt": (task.attempt, task.lease.attempt, task.lease.lease_owner),
        "sticky": (task.sticky.worker_id, task.sticky.replay_mode),
        "history": [
            (e.sequence, e.event_type, e.workflow_task_id == task.lease.task_id)
            for e in task.history
        ],
        "history_after": task.history_after,
        "position": (task.position.run.last_event_seq, task.position.run.last_step_seq),
        "run": (task.run.status, task.run.last_event_seq),
    }


@pytest.mark.parametrize("sticky", [STICKY, TAIL], ids=["whole-history", "tail"])
async def test_an_activity_completion_leases_its_follow_up_as_a_claim_would(
    store: Store, noticed: list[ReadyTask], sticky: StickyClaim
) -> None:
    """S5-S7, C3: the follow-up task leased by the completion's own statement is the claim the
    worker would have made next: same lease, replay mode, history (or tail) and position, and
    the same durable rows (inbox moved, run numbered on); no wake is sent for it."""
    await register(store, "w1")
    noticed.clear()
    eager_run, eager_task = await _follow_up_of_an_activity(store, "wf-eager", sticky, eager=True)
    assert not [
        n for n in noticed if n.kind == "workflow" and n.task_id == eager_task.lease.task_id
    ]
    claim_run, claim_task = await _follow_up_of_an_activity(store, "wf-claim", sticky, eager=False)

    assert _claim_shape(eager_run, eager_task) == _claim_shape(claim_run, claim_task)
    assert (
        eager_task.history
        == (await store.read_history(run_id=eager_run))[eager_task.history_after :]
    )
    eager_rows, claim_rows = await snapshot(store, eager_run), await snapshot(store, claim_run)
    assert [e["applied"] for e in eager_rows["inbox_events"]] == [True, True]
    assert [(e["event_type"], e["applied"]) for e in eager_rows["inbox_events"]] == [
        (e["event_type"], e["applied"]) for e in claim_rows["inbox_events"]
    ]
    [eager_row] = await open_workflow_tasks(store, eager_run)
    [claim_row] = await open_workflow_tasks(store, claim_run)
    same = ("state", "lease_owner", "attempt", "sticky_worker_id", "sticky_replay_mode")
    assert {k: eager_row[k] for k in same} == {k: claim_row[k] for k in same}
    assert eager_row["claimed_at"] is not None and eager_row["sticky_claimed_at"] is not None
    assert eager_row["lease_expires_at"] - eager_row["claimed_at"] <= LEASE


async def test_an_activity_completion_leases_nothing_while_another_task_of_the_run_runs(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """Store invariant 4: with a workflow task of the run leased elsewhere, the completion makes
    no second task; it flags the leased one, whose completion then makes the follow-up."""
    await register(store, "w1")
    await register(store, "w2")
    run_id = await start(store)
    first = await claimed(store, "w1")
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)])
    act = await claim_act(store)
    await signal(store)
    running = await claimed(store, "w2")  # the signal's task, leased while the activity ends
    noticed.clear()

    eager = EagerClaim(flt=WF, worker_id="w1", lease=LEASE, sticky=STICKY)
    task = (
        await store.complete_activity_task(lease=act.lease, result=blob(7), eager=eager)
    ).follow_up

    assert task is None
    [open_task] = await open_workflow_tasks(store, run_id)
    assert (open_task["task_id"], open_task["follow_up"]) == (running.lease.task_id, True)
    outcome = await store.complete_workflow_task(
        lease=running.lease, commands=[], position=running.position
    )
    assert outcome.workflow_task_created
    follow_up = await claimed(store, "w1")
    assert [e.event_type for e in follow_up.history][-1] == "ActivityCompleted"


async def test_an_activity_completion_after_its_run_closed_leases_nothing(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """A run terminated while its activity ran: the late result is recorded nowhere and no
    workflow task is made or leased for it."""
    await register(store, "w1")
    run_id = await start(store)
    first = await claimed(store, "w1")
    await store.complete_workflow_task(lease=first.lease, commands=[schedule(1)])
    act = await claim_act(store)
    await store.terminate_workflow(namespace=NS, workflow_id="wf-1", reason="stop")
    before = await snapshot(store, run_id, (s.history_events, s.inbox_events, s.workflow_tasks))
    noticed.clear()

    eager = EagerClaim(flt=WF, worker_id="w1", lease=LEASE, sticky=STICKY)
    task = (
        await store.complete_activity_task(lease=act.lease, result=blob(7), eager=eager)
    ).follow_up

    assert task is None
    after = await snapshot(store, run_id, (s.history_events, s.inbox_events, s.workflow_tasks))
    assert after == before
    assert not [n for n in noticed if n.kind == "workflow"]


async def test_claim_by_id_takes_only_the_named_task(store: Store) -> None:
    """S5a: naming a task takes that one, even when the claimer has a bound task waiting."""
    await register(store, "w1")
    await bound_run(store, owner="w1", workflow_id="wf-bound")
    free_id = await start(store, "wf-free")
    [free_task] = await open_workflow_tasks(store, free_id)

    task = await claim_by_id(store, "w1", str(free_task["task_id"]))

    assert task is not None
    assert task.lease.run_id == free_id
    assert task.sticky.replay_mode is COLD


# -- the tail: only what the claimer does not hold warm ----------------------------------------


async def _run_with_pending_inbox(store: Store) -> str:
    """History 1-2 (started, scheduled) and three inbox events the next claim moves in."""
    run_id = await start(store)
    task = await claimed(store, "w1")
    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)], sticky_ttl=TTL)
    act = await claim_act(store)  # ActivityStarted waits in the inbox
    await store.complete_activity_task(lease=act.lease, result=blob(7))
    await signal(store)
    return run_id


async def test_claim_bound_to_the_claimer_returns_only_the_events_after_the_last_commit(
    store: Store,
) -> None:
    """S6, S7: a sticky-hit claim returns the events after what the owner committed, inbox too.

    That is where the owner's warm instance stands, if it still holds one (else it reads the
    whole history itself); the claim is one statement either way.
    """
    run_id = await _run_with_pending_inbox(store)

    task = await claimed(store, "w1", sticky=TAIL)

    history = await store.read_history(run_id=run_id)
    assert [e.event_type for e in history[2:]] == [
        "ActivityStarted",
        "ActivityCompleted",
        "SignalReceived",
    ]
    assert task.sticky.replay_mode is ReplayMode.STICKY_HIT_EXPECTED
    assert task.history_after == 2
    assert [e.sequence for e in task.history] == [3, 4, 5]
    assert task.history == history[2:]
    assert task.history_bytes > 0


@pytest.mark.parametrize("path", ["sticky-off", "binding-expired", "tail-not-asked"])
async def test_claim_without_a_live_binding_or_a_tail_asked_returns_the_whole_history(
    store: Store, path: str
) -> None:
    """S5d, S6, S10: a cold or forced-cold claim replays from the first event, inbox included;
    so does a bound claim by a claimer that keeps no cache (an SDK worker behind the server)."""
    run_id = await _run_with_pending_inbox(store)
    sticky = StickyClaim(enabled=path != "sticky-off", tail_when_bound=path != "tail-not-asked")
    if path == "binding-expired":
        await execute(
            store,
            "UPDATE workflow_tasks SET sticky_until = now() - interval '1 second'"
            " WHERE run_id = :r",
            r=run_id,
        )

    task = await claimed(store, "w1", sticky=sticky)

    hit = task.sticky.replay_mode is ReplayMode.STICKY_HIT_EXPECTED
    assert hit == (path == "tail-not-asked")
    assert task.history_after == 0
    assert [e.sequence for e in task.history] == [1, 2, 3, 4, 5]
    assert task.history == await store.read_history(run_id=run_id)


async def test_history_bytes_weigh_only_the_returned_events(store: Store) -> None:
    """S10: a tail weighs less than the whole history (a cache bounds its memory by it)."""
    await _run_with_pending_inbox(store)
    whole = await claimed(store, "w1", sticky=StickyClaim(enabled=False))
    await store.complete_workflow_task(lease=whole.lease, commands=[], sticky_ttl=TTL)
    await signal(store)

    tail = await claimed(store, "w1", sticky=TAIL)

    assert [e.event_type for e in tail.history] == ["SignalReceived"]
    assert 0 < tail.history_bytes < whole.history_bytes


async def test_one_claim_opens_several_runs_each_with_its_own_history(store: Store) -> None:
    """S5, S6: a batch claim numbers each run's inbox after that run's own last event."""
    first = await _run_with_pending_inbox(store)
    second = await start(store, workflow_id="wf-2")

    tasks = await store.claim_workflow_tasks(
        flt=WF, worker_id="w1", lease=LEASE, limit=5, sticky=StickyClaim(enabled=False)
    )

    by_run = {task.run.run_id: task for task in tasks}
    assert set(by_run) == {first, second}
    assert by_run[first].history == await store.read_history(run_id=first)
    assert [e.sequence for e in by_run[first].history] == [1, 2, 3, 4, 5]
    assert by_run[second].history == await store.read_history(run_id=second)
    assert [e.event_type for e in by_run[second].history] == ["WorkflowStarted"]
    assert all(e.workflow_task_id == by_run[first].lease.task_id for e in by_run[first].history[2:])


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


# -- S8: draining, deregistering, registering again --------------------------------------------


async def test_drain_announces_the_ready_bound_tasks_without_an_owner(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S8: w1's ready bound tasks go to the shared queue; leased and unbound ones are not named."""
    await register(store, "w1")
    _, task_a = await bound_run(store, owner="w1", workflow_id="wf-a")
    _, task_b = await bound_run(store, owner="w1", workflow_id="wf-b")
    _, task_c = await bound_run(store, owner="w1", workflow_id="wf-c")
    assert await claim_by_id(store, "w1", task_c) is not None  # leased: w1 finishes it
    await start(store, "wf-free")
    noticed.clear()

    announced = await store.drain_worker(worker_id="w1")

    assert announced == 2
    assert sorted(str(n.task_id) for n in noticed) == sorted([task_a, task_b])
    assert all((n.kind, n.queue, n.sticky_worker_id) == ("workflow", QUEUE, None) for n in noticed)
    assert (await registration(store, "w1"))["state"] == "draining"


async def test_heartbeat_keeps_a_draining_worker_draining(store: Store) -> None:
    """S8: a draining worker keeps heartbeating; its bound tasks stay free for others."""
    await register(store, "w1")
    _, task_id = await bound_run(store, owner="w1")
    await store.drain_worker(worker_id="w1")
    await _age_heartbeat(store, "w1")
    old = (await registration(store, "w1"))["heartbeat_at"]

    await store.heartbeat_worker(
        worker_id="w1", sticky_cache=StickyCacheReport(enabled=True, capacity=10)
    )

    row = await registration(store, "w1")
    assert row["state"] == "draining"
    assert row["heartbeat_at"] > old
    task = await claimed(store, "w2")
    assert (task.lease.task_id, task.sticky.replay_mode) == (task_id, FORCED)


async def test_registering_again_makes_a_drained_worker_active_and_its_bindings_hold(
    store: Store,
) -> None:
    """S3, S5c: a re-registered worker is live again: its bound tasks are held for it."""
    await register(store, "w1")
    _, task_id = await bound_run(store, owner="w1")
    await store.drain_worker(worker_id="w1")

    await register(store, "w1")

    assert (await registration(store, "w1"))["state"] == "active"
    assert await claim(store, "w2") is None
    task = await claimed(store, "w1")
    assert (task.lease.task_id, task.sticky.replay_mode) == (task_id, HIT)


async def test_deregister_announces_the_ready_bound_tasks_and_stops_heartbeats(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S5c, S8: a stopped worker's bound tasks go to anyone; a late heartbeat does not revive it."""
    await register(store, "w1")
    _, task_id = await bound_run(store, owner="w1")
    noticed.clear()

    await store.deregister_worker(worker_id="w1")
    await store.heartbeat_worker(worker_id="w1")

    [notice] = noticed
    assert (str(notice.task_id), notice.sticky_worker_id) == (task_id, None)
    assert (await registration(store, "w1"))["state"] == "stopped"
    task = await claimed(store, "w2")
    assert (task.lease.task_id, task.sticky.replay_mode) == (task_id, FORCED)


async def _age_heartbeat(store: Store, worker_id: str) -> None:
    await execute(
        store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 minute'"
        " WHERE worker_id = :w",
        w=worker_id,
    )


async def _owner_drained(store: Store) -> None:
    await store.drain_worker(worker_id="w1")


async def _owner_deregistered(store: Store) -> None:
    await store.deregister_worker(worker_id="w1")


async def _owner_without_cache(store: Store) -> None:
    await register(store, "w1", cache=False)


async def _owner_never_registered(store: Store) -> None:
    await execute(store, "DELETE FROM worker_registrations WHERE worker_id = 'w1'")


UNAVAILABLE_OWNERS: dict[str, Callable[[Store], Awaitable[None]]] = {
    "drained": _owner_drained,
    "deregistered": _owner_deregistered,
    "registered-without-sticky-cache": _owner_without_cache,
    "never-registered": _owner_never_registered,
}


@pytest.mark.parametrize(
    "make_unavailable", list(UNAVAILABLE_OWNERS.values()), ids=list(UNAVAILABLE_OWNERS)
)
async def test_work_made_ready_for_an_unavailable_owner_is_announced_to_anyone(
    store: Store, noticed: list[ReadyTask], make_unavailable: Callable[[Store], Awaitable[None]]
) -> None:
    """S3, S8: a run still bound to w1 whose owner takes no new tasks is announced without it."""
    await register(store, "w1")
    run_id = await start(store)
    task = await claimed(store, "w1")
    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1)], sticky_ttl=TTL)
    act = await claim_act(store, worker_id="w2")
    await make_unavailable(store)
    noticed.clear()

    await store.complete_activity_task(lease=act.lease, result=blob(7))

    [next_task] = await open_workflow_tasks(store, run_id)
    assert next_task["sticky_worker_id"] == "w1"  # the binding is kept: a forced cold replay
    [notice] = notices_for(noticed, str(next_task["task_id"]))
    assert notice.sticky_worker_id is None
    assert (await claimed(store, "w2")).sticky.replay_mode is FORCED
