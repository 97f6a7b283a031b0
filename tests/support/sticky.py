"""Helpers shared by the sticky binding and sticky claim tests: register, claim, bind, read rows."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from burrow.store import Store, claims
from burrow.store import schema as s
from burrow.store.claims import QueueFilter, StickyClaim
from burrow.store.models import ClaimedWorkflowTask, ReplayMode, StickyCacheReport
from burrow.store.ready import ReadyTask
from tests.support.store import (
    LEASE,
    NS,
    QUEUE,
    WF,
    blob,
    open_workflow_tasks,
    rows,
    start,
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
