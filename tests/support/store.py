"""Helpers shared by the store integration tests: constants, commands, claims and row reads."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from burrow import codec
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.claims import QueueFilter
from burrow.store.models import ClaimedActivityTask, ClaimedWorkflowTask

NS = "default"
QUEUE = "q"
LEASE = timedelta(seconds=30)
OPEN = ("ready", "leased")
WF = QueueFilter(namespace=NS, queue=QUEUE, types=["Flow"])
ACT = QueueFilter(namespace=NS, queue=QUEUE, types=["charge"])
RUN_TABLES = (
    s.runs,
    s.history_events,
    s.inbox_events,
    s.workflow_tasks,
    s.activity_tasks,
    s.timers,
)


def blob(value: int = 1) -> dict[str, Any]:
    return dict(codec.encode([value]))


def schedule(
    seq: int = 1,
    *,
    max_attempts: int = 3,
    backoff_seconds: Sequence[float] = (0,),
    **options: Any,
) -> dict[str, Any]:
    """A `schedule_activity` command for step `seq`; `options` override any of its fields."""
    command: dict[str, Any] = {
        "type": "schedule_activity",
        "sequence": seq,
        "activity_type": "charge",
        "queue": QUEUE,
        "arguments": blob(seq),
        "retry_policy": {"max_attempts": max_attempts, "backoff_seconds": list(backoff_seconds)},
        "start_to_close_timeout": 60,
    }
    command.update(options)
    return command


async def start(
    store: Store, workflow_id: str = "wf-1", namespace: str = NS, **options: Any
) -> str:
    run = await store.start_workflow(
        namespace=namespace,
        workflow_id=workflow_id,
        workflow_type="Flow",
        task_queue=QUEUE,
        input=blob(),
        **options,
    )
    return run.run_id


async def claim_wf(
    store: Store, worker_id: str = "w1", lease: timedelta = LEASE
) -> ClaimedWorkflowTask:
    claimed = await store.claim_workflow_task(flt=WF, worker_id=worker_id, lease=lease)
    assert claimed is not None
    return claimed


async def claim_act(
    store: Store, worker_id: str = "w1", lease: timedelta = LEASE
) -> ClaimedActivityTask:
    claimed = await store.claim_activity_tasks(flt=ACT, worker_id=worker_id, lease=lease, limit=1)
    assert len(claimed) == 1
    return claimed[0]


async def start_with_activity(store: Store, workflow_id: str = "wf-1", **options: Any) -> str:
    """A run whose first workflow task scheduled activity step 1 (now ready; the workflow waits).

    `options` go to `schedule()` for that step (e.g. `max_attempts`, `retry_policy`, timeouts).
    """
    run_id = await start(store, workflow_id)
    task = await claim_wf(store)
    await store.complete_workflow_task(lease=task.lease, commands=[schedule(1, **options)])
    return run_id


async def rows(store: Store, table: sa.Table, run_id: str | None = None) -> list[dict[str, Any]]:
    """The rows of `table` in primary-key order, only those of `run_id` when given."""
    stmt = sa.select(table).order_by(*table.primary_key.columns)
    if run_id is not None:
        stmt = stmt.where(table.c.run_id == run_id)
    async with store.engine.connect() as conn:
        return [dict(row._mapping) for row in await conn.execute(stmt)]


async def snapshot(
    store: Store, run_id: str, tables: Sequence[sa.Table] = RUN_TABLES
) -> dict[str, list[dict[str, Any]]]:
    """Every durable row of one run: what 'changes nothing' is checked against."""
    return {table.name: await rows(store, table, run_id) for table in tables}


async def durable_outcome(store: Store, run_id: str) -> dict[str, Any]:
    """What completions left of a run, without the ids and clocks that differ between runs."""
    found = await snapshot(store, run_id)
    [run] = found["runs"]
    return {
        "run": {
            key: run[key]
            for key in ("status", "result", "failure", "last_event_seq", "last_step_seq")
        }
        | {"bound": run["sticky_worker_id"]},
        "events": [
            (e["sequence"], e["event_type"], e["idempotency_key"].replace(run_id, "<run>"))
            for e in found["history_events"]
        ],
        "workflow_tasks": sorted(t["state"] for t in found["workflow_tasks"]),
        "activities": sorted(
            (a["step_seq"], a["state"], a["arguments"]["blob"], a["start_to_close_seconds"])
            for a in found["activity_tasks"]
        ),
        "timers": sorted((t["step_seq"], t["state"], t["delay_seconds"]) for t in found["timers"]),
    }


async def open_workflow_tasks(store: Store, run_id: str) -> list[dict[str, Any]]:
    return [t for t in await rows(store, s.workflow_tasks, run_id) if t["state"] in OPEN]


async def execute(store: Store, statement: str, **params: Any) -> None:
    async with store.engine.begin() as conn:
        await conn.execute(sa.text(statement), params)


async def db_now(store: Store) -> Any:
    async with store.engine.connect() as conn:
        return (await conn.execute(sa.select(sa.func.now()))).scalar_one()


async def sweep_until(
    store: Store, check: Callable[[], Awaitable[Any]], timeout: float = 10.0
) -> Any:
    """Run repair passes until `check()` is truthy (bounded; never asserts on elapsed time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        await store.sweep()
        value = await check()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError("condition not reached by the repair sweep in time")
        await asyncio.sleep(0.05)


async def warm(store: Store) -> None:
    """Open one pooled connection ahead of a race, so connecting does not skew it."""
    async with store.engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
