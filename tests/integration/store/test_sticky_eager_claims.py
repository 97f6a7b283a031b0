"""Sticky rules on the eager path (claim by id) and the history tail a bound claim returns (S5, S7).

Bindings are made the way a worker makes them (a completion with `sticky_ttl`); time passes by
ageing rows with SQL, never by sleeping.
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import EagerClaim, StickyClaim
from burrow.store.models import ClaimedWorkflowTask, ReplayMode
from burrow.store.ready import ReadyTask
from tests.support.sticky import (
    COLD,
    FORCED,
    HIT,
    STICKY,
    TAIL,
    TTL,
    bound_run,
    claim_by_id,
    claimed,
    notices_for,
    register,
    signal,
)
from tests.support.store import (
    LEASE,
    NS,
    WF,
    blob,
    claim_act,
    execute,
    open_workflow_tasks,
    schedule,
    snapshot,
    start,
)

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
