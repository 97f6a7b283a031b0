"""Sticky bindings on a real Postgres: completions bind runs; draining and deregistering (S4, S8).

Bindings are made the way a worker makes them (a completion with `sticky_ttl`); time passes by
ageing rows with SQL (`sticky_until`, `heartbeat_at`), never by sleeping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure
from burrow.store import Store
from burrow.store.models import StickyCacheReport
from burrow.store.ready import ReadyTask
from tests.support.sticky import (
    COLD,
    FORCED,
    HIT,
    TTL,
    bound_run,
    claim,
    claim_by_id,
    claimed,
    notices_for,
    register,
    registration,
    run_row,
    signal,
    task_row,
)
from tests.support.store import (
    NS,
    QUEUE,
    blob,
    claim_act,
    db_now,
    execute,
    open_workflow_tasks,
    schedule,
    start,
)

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
