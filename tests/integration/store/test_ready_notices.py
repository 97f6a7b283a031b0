"""Every transaction that makes a task ready reports it after commit, and only then (C1, C4).

Broker invariant 1: the store hands notices to its after_commit sink (the wake publisher) once
the transaction has committed; a transaction that rolls back reports nothing.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from burrow.protocol.shapes import Failure
from burrow.store import Store
from burrow.store.claims import EagerClaim
from burrow.store.errors import StaleLease
from burrow.store.models import StickyCacheReport
from burrow.store.ready import ReadyTask
from tests.support.store import ACT, LEASE, WF, blob, schedule


def kinds(notices: list[ReadyTask]) -> list[tuple[str, str]]:
    return [(n.kind, n.queue) for n in notices]


async def _start_and_schedule(store: Store, *, max_attempts: int = 3) -> Any:
    await store.start_workflow(
        namespace="default", workflow_id="wf", workflow_type="Flow", task_queue="q", input=blob()
    )
    claimed = await store.claim_workflow_task(flt=WF, worker_id="w", lease=LEASE)
    assert claimed is not None
    command = schedule(1, max_attempts=max_attempts, backoff_seconds=(5,))
    await store.complete_workflow_task(lease=claimed.lease, commands=[command])
    return claimed


async def test_start_schedule_retry_and_completion_each_notify(
    store: Store, noticed: list[ReadyTask]
) -> None:
    await _start_and_schedule(store)
    assert kinds(noticed) == [("workflow", "q"), ("activity", "q")]
    [task] = await store.claim_activity_tasks(flt=ACT, worker_id="w", lease=LEASE, limit=1)
    noticed.clear()
    failed = await store.fail_activity_task(lease=task.lease, failure=Failure(exception_type="X"))
    assert failed.retried
    [retry] = noticed
    assert (retry.kind, retry.task_id) == ("activity", task.lease.task_id)
    assert retry.available_at is not None  # published later, when the backoff has passed


async def test_activity_completion_notifies_the_follow_up_workflow_task(
    store: Store, noticed: list[ReadyTask]
) -> None:
    await _start_and_schedule(store)
    [task] = await store.claim_activity_tasks(flt=ACT, worker_id="w", lease=LEASE, limit=1)
    noticed.clear()
    await store.complete_activity_task(lease=task.lease, result=blob())
    assert kinds(noticed) == [("workflow", "q")]


async def test_eagerly_leased_work_needs_no_wake(store: Store, noticed: list[ReadyTask]) -> None:
    await store.start_workflow(
        namespace="default", workflow_id="wf", workflow_type="Flow", task_queue="q", input=blob()
    )
    claimed = await store.claim_workflow_task(flt=WF, worker_id="w", lease=LEASE)
    assert claimed is not None
    noticed.clear()
    command = schedule(1)
    eager = EagerClaim(flt=ACT, worker_id="w", lease=LEASE)
    outcome = await store.complete_workflow_task(
        lease=claimed.lease, commands=[command], eager=eager
    )
    assert len(outcome.eager_activities) == 1
    assert noticed == []


async def test_signal_query_and_expired_lease_notify(
    store: Store, noticed: list[ReadyTask]
) -> None:
    await _start_and_schedule(store)
    noticed.clear()
    await store.signal_workflow(
        namespace="default", workflow_id="wf", signal_name="s", arguments=blob(), signal_id="1"
    )
    await store.submit_query(
        namespace="default", workflow_id="wf", query_name="q", arguments=blob(), timeout=LEASE
    )
    assert kinds(noticed) == [("workflow", "q"), ("query", "q")]
    leased = await store.claim_workflow_task(flt=WF, worker_id="w", lease=timedelta(seconds=0.1))
    assert leased is not None
    await asyncio.sleep(0.3)
    noticed.clear()
    assert (await store.sweep()).expired_workflow_leases == 1
    assert [(n.kind, n.task_id) for n in noticed] == [("workflow", leased.lease.task_id)]


async def test_rolled_back_transaction_notifies_nothing(
    store: Store, noticed: list[ReadyTask]
) -> None:
    claimed = await _start_and_schedule(store)
    noticed.clear()
    with pytest.raises(StaleLease):  # the same lease twice: the second completion rolls back
        await store.complete_workflow_task(lease=claimed.lease, commands=[])
    assert noticed == []


async def _two_activities_running(store: Store) -> list[Any]:
    await store.start_workflow(
        namespace="default", workflow_id="wf", workflow_type="Flow", task_queue="q", input=blob()
    )
    claimed = await store.claim_workflow_task(flt=WF, worker_id="w", lease=LEASE)
    assert claimed is not None
    commands = [schedule(1), schedule(2)]
    await store.complete_workflow_task(lease=claimed.lease, commands=commands)
    return await store.claim_activity_tasks(flt=ACT, worker_id="w", lease=LEASE, limit=2)


async def test_a_workflow_task_already_waiting_is_announced_again(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """C4: claims skip a run while a completion holds it, so that completion re-announces the
    waiting workflow task after it commits; otherwise it would wait for the next re-poll."""
    first, second = await _two_activities_running(store)
    noticed.clear()
    await store.complete_activity_task(lease=first.lease, result=blob())
    [created] = noticed
    noticed.clear()

    await store.complete_activity_task(lease=second.lease, result=blob())

    assert [(n.kind, n.task_id) for n in noticed] == [("workflow", created.task_id)]
    noticed.clear()
    await store.signal_workflow(
        namespace="default", workflow_id="wf", signal_name="s", arguments=blob(), signal_id="1"
    )
    assert [(n.kind, n.task_id) for n in noticed] == [("workflow", created.task_id)]


async def test_a_waiting_workflow_task_can_be_leased_eagerly_by_the_next_completion(
    store: Store, noticed: list[ReadyTask]
) -> None:
    first, second = await _two_activities_running(store)
    await store.complete_activity_task(lease=first.lease, result=blob())
    noticed.clear()

    done = await store.complete_activity_task(
        lease=second.lease, result=blob(), eager=EagerClaim(flt=WF, worker_id="w2", lease=LEASE)
    )
    claimed = done.follow_up

    assert claimed is not None and claimed.lease.lease_owner == "w2"
    completed = [e.event_type for e in claimed.history].count("ActivityCompleted")
    assert completed == 2  # both results are in the history it replays
    assert noticed == []


async def _bound_and_waiting(store: Store, owner: str) -> str:
    """A run bound to `owner` (S4) with a ready workflow task from a signal."""
    await store.register_worker(
        worker_id=owner,
        namespace="default",
        task_queue="q",
        workflow_types=["Flow"],
        activity_types=[],
        concurrency=1,
        sticky_cache=StickyCacheReport(enabled=True, capacity=10),
    )
    await store.start_workflow(
        namespace="default", workflow_id="wf", workflow_type="Flow", task_queue="q", input=blob()
    )
    claimed = await store.claim_workflow_task(flt=WF, worker_id=owner, lease=LEASE)
    assert claimed is not None
    await store.complete_workflow_task(
        lease=claimed.lease, commands=[], sticky_ttl=timedelta(seconds=300)
    )
    await store.signal_workflow(
        namespace="default", workflow_id="wf", signal_name="s", arguments=blob(), signal_id="1"
    )
    return claimed.lease.run_id


async def test_a_bound_task_is_announced_to_its_owner(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S4, C1: the wake of a task bound to a live owner names the owner."""
    await _bound_and_waiting(store, "owner")
    signalled = noticed[-1]  # the start's notice came first, before any binding
    assert (signalled.kind, signalled.sticky_worker_id) == ("workflow", "owner")


async def test_repair_releases_bindings_of_an_owner_gone_silent(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S5c, C1: the repair pass ends a dead owner's binding once and announces it to all."""
    await _bound_and_waiting(store, "owner")
    noticed.clear()
    stale = timedelta(seconds=30)
    assert (await store.sweep(owner_stale=stale)).released_bindings == 0  # owner still live

    async with store.engine.begin() as conn:
        await conn.exec_driver_sql(
            "UPDATE worker_registrations SET heartbeat_at = now() - interval '1 minute'"
        )
    result = await store.sweep(owner_stale=stale)

    assert result.released_bindings == 1
    assert [(n.kind, n.sticky_worker_id) for n in noticed] == [("workflow", None)]
    assert (await store.sweep(owner_stale=stale)).released_bindings == 0  # once only
    claimed = await store.claim_workflow_task(flt=WF, worker_id="other", lease=LEASE)
    assert claimed is not None
    assert claimed.sticky.worker_id == "owner"
    assert claimed.sticky.replay_mode == "forced_cold_replay"
