"""The worker's lease keeper against real Postgres: renewal, and a lost lease cancels (W7, M6)."""

from __future__ import annotations

from datetime import timedelta

from burrow.store import Store
from burrow.store import schema as s
from burrow.worker.leases import LeaseKeeper
from tests.support.store import claim_act, claim_wf, rows, start, start_with_activity, sweep_until

SHORT = timedelta(seconds=0.3)


async def test_renewal_extends_every_held_lease(store: Store) -> None:
    """W7: a held workflow task and activity lease both move forward on each renewal."""
    run_id = await start_with_activity(store)
    await start(store, "wf-2")
    activity = await claim_act(store)
    workflow = await claim_wf(store)
    keeper = LeaseKeeper(store=store, worker_id="w1", lease=timedelta(seconds=60))
    lost: list[str] = []
    keeper.hold_workflow(workflow.lease)
    keeper.hold_activity(activity.lease, on_lost=lambda: lost.append("activity"))

    await keeper.renew_once()

    [act] = await rows(store, s.activity_tasks, run_id)
    assert act["lease_expires_at"] > activity.lease.lease_expires_at
    tasks = {t["task_id"]: t for t in await rows(store, s.workflow_tasks)}
    assert tasks[workflow.lease.task_id]["lease_expires_at"] > workflow.lease.lease_expires_at
    assert lost == []


async def test_activity_lease_reclaimed_elsewhere_runs_on_lost_once_released_never(
    store: Store,
) -> None:
    """M6: once the sweep hands the attempt on, the keeper reports it lost; released leases not."""
    run_id = await start_with_activity(store)
    first = await claim_act(store, worker_id="w1", lease=SHORT)
    keeper = LeaseKeeper(store=store, worker_id="w1", lease=SHORT)
    lost: list[str] = []
    keeper.hold_activity(first.lease, on_lost=lambda: lost.append(first.lease.task_id))

    async def retried() -> bool:
        [act] = await rows(store, s.activity_tasks, run_id)
        return bool(act["state"] == "ready" and act["attempt"] == 2)

    await sweep_until(store, retried)
    await keeper.renew_once()
    assert lost == [first.lease.task_id]

    keeper.release(first.lease.task_id)
    await keeper.renew_once()
    assert lost == [first.lease.task_id]
