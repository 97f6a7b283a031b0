"""The repair pass as the dedicated matching role runs it (SPEC M4c, M5, C4): lost wakes,
including lost sticky wakes, are published again once the ready work is older than the wake TTL.
"""

from __future__ import annotations

from datetime import timedelta

from burrow.store import Store
from burrow.store.models import StickyCacheReport
from burrow.store.ready import ReadyTask
from tests.support.store import NS, QUEUE, execute, start

TTL = timedelta(seconds=60)


async def _bound_stale_run(store: Store, owner: str) -> str:
    """A run whose ready workflow task is bound to `owner` and waited past the wake TTL."""
    await store.register_worker(
        worker_id=owner,
        namespace=NS,
        task_queue=QUEUE,
        workflow_types=["Flow"],
        activity_types=[],
        concurrency=4,
        sticky_cache=StickyCacheReport(enabled=True, capacity=10, size=1),
    )
    run_id = await start(store)
    for table in ("runs", "workflow_tasks"):
        await execute(
            store,
            f"UPDATE {table} SET sticky_worker_id = :owner,"
            " sticky_until = now() + interval '5 minutes' WHERE run_id = :run_id",
            owner=owner,
            run_id=run_id,
        )
    await execute(
        store,
        "UPDATE workflow_tasks SET available_at = now() - interval '2 minutes'"
        " WHERE run_id = :run_id",
        run_id=run_id,
    )
    return run_id


def _workflow_wakes(noticed: list[ReadyTask]) -> list[str | None]:
    """The sticky targets of the workflow wakes (None: the shared queue)."""
    return sorted(
        (n.sticky_worker_id for n in noticed if n.kind == "workflow" and n.queue == QUEUE),
        key=str,
    )


async def test_m5_lost_sticky_wake_goes_to_the_live_owner_again(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """M5, C4, S4: a bound task older than the wake TTL wakes its owner directly, besides the
    queue-wide wake; the owner is the only worker that may take it while the binding holds."""
    await _bound_stale_run(store, "owner-1")
    noticed.clear()

    result = await store.sweep(republish_after=TTL)

    assert _workflow_wakes(noticed) == [None, "owner-1"]
    assert result.republished == 2


async def test_m5_no_sticky_wake_for_a_draining_owner(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """S8, M5: a draining owner takes no new tasks: only the queue-wide wake goes out."""
    await _bound_stale_run(store, "owner-1")
    await store.drain_worker(worker_id="owner-1")
    noticed.clear()

    await store.sweep(republish_after=TTL)

    wakes = _workflow_wakes(noticed)
    assert "owner-1" not in wakes
    assert None in wakes


async def test_m5_fresh_ready_work_is_not_woken_again(
    store: Store, noticed: list[ReadyTask]
) -> None:
    """M5: ready work younger than the wake TTL still has its wake: the pass sends none."""
    await start(store)
    noticed.clear()

    result = await store.sweep(republish_after=TTL)

    assert noticed == []
    assert result.republished == 0
