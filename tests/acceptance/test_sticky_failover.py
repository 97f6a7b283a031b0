"""Sticky execution across real worker processes: the owner dies, the run goes on (S1, S5-S8)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from typing import Any

import pytest

from burrow import Client
from burrow.broker.topology import Topology
from burrow.handle import WorkflowHandle
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.acceptance.conftest import WorkerFactory
from tests.apps import sticky_flows
from tests.support.store import rows

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

TARGET = "tests.apps.sticky_flows:app"
STICKY_ENV = {
    "BURROW_STICKY_CACHE_CAPACITY": "100",
    "BURROW_STICKY_OWNER_STALE_SECONDS": "2",
    "BURROW_HEARTBEAT_INTERVAL_SECONDS": "0.5",
}
STEPS = [3, 5, 7]


async def _run(store: Store, run_id: str) -> dict[str, Any]:
    [run] = await rows(store, s.runs, run_id)
    return run


async def _start(client: Client, name: str) -> WorkflowHandle[list[int]]:
    return await client.start_workflow(
        sticky_flows.StepFlow,
        len(STEPS),
        id=f"{name}-{uuid.uuid4().hex[:6]}",
        task_queue=sticky_flows.TASK_QUEUE,
    )


async def _bound_to(store: Store, run_id: str, worker_id: str) -> None:
    async def bound() -> bool:
        return (await _run(store, run_id))["sticky_worker_id"] == worker_id

    await assert_eventually(bound, timeout=30, message=f"{worker_id} bound the run")


async def _sticky_queues() -> list[str]:
    prefix = Topology(prefix=os.environ["BURROW_AMQP_PREFIX"]).sticky_queue_name("")
    done = await asyncio.to_thread(
        subprocess.run,
        ["rabbitmqctl", "-q", "list_queues", "name"],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return [name for name in done.stdout.split() if name.startswith(prefix)]


@pytest.mark.parametrize("owner_stale", ["2", "600"])
async def test_owner_killed_another_worker_takes_over_as_forced_cold_replay(
    client: Client, store: Store, worker_process: WorkerFactory, owner_stale: str
) -> None:
    """S5c, S7, S8, S1: after SIGKILL of the owner, its bound task goes to a live worker.

    Broker invariant 4: the owner's sticky queue died with it, so the broker returns its wakes
    and the fallback wake names it; the other worker claims at once, long before a 600 s
    staleness would let it.
    """
    env = {**STICKY_ENV, "BURROW_STICKY_OWNER_STALE_SECONDS": owner_stale}
    owner = worker_process("sticky-owner", TARGET, **env)
    handle = await _start(client, "failover")
    run_id = (await handle.describe()).run.run_id
    await _bound_to(store, run_id, "sticky-owner")
    worker_process("sticky-other", TARGET, **env)

    async def other_registered() -> bool:
        ids = {r["worker_id"] for r in await rows(store, s.worker_registrations)}
        return "sticky-other" in ids

    await assert_eventually(other_registered, timeout=30, message="the second worker is up")
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=10)

    for value in STEPS:
        assert await handle.signal("step", value)
    assert await handle.result(timeout=60) == [6, 10, 14, 7]

    tasks = sorted(
        (t for t in await rows(store, s.workflow_tasks, run_id) if t["claimed_at"]),
        key=lambda t: t["claimed_at"],
    )
    taken_over = [t for t in tasks if t["lease_owner"] == "sticky-other"]
    assert taken_over, "the second worker finished the run"
    assert taken_over[0]["sticky_worker_id"] == "sticky-owner"
    assert taken_over[0]["sticky_replay_mode"] == "forced_cold_replay"
    # From then on the run is the second worker's: bound to it, claimed as expected hits.
    assert {t["sticky_replay_mode"] for t in taken_over[1:]} == {"sticky_hit_expected"}


async def test_sticky_queue_deleted_under_a_live_worker_runs_still_complete(
    client: Client, store: Store, worker_process: WorkerFactory
) -> None:
    """C1, S1: a lost sticky queue costs latency only; the worker declares it again."""
    worker_process("sticky-solo", TARGET, **STICKY_ENV)
    handle = await _start(client, "queue-gone")
    run_id = (await handle.describe()).run.run_id
    await _bound_to(store, run_id, "sticky-solo")
    [queue] = await _sticky_queues()
    await asyncio.to_thread(
        subprocess.run, ["rabbitmqctl", "delete_queue", queue], check=True, timeout=60
    )

    for value in STEPS:
        assert await handle.signal("step", value)
    assert await handle.result(timeout=60) == [6, 10, 14, 7]

    async def declared_again() -> bool:
        return await _sticky_queues() == [queue]

    await assert_eventually(declared_again, timeout=30, message="the sticky queue is back")
