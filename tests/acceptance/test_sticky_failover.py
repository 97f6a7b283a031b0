"""Sticky execution across real worker processes: the owner dies, the run goes on (S1, S5-S8)."""

from __future__ import annotations

import signal
import uuid
from typing import Any

import pytest

from burrow import Client
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


async def test_owner_killed_another_worker_takes_over_as_forced_cold_replay(
    client: Client, store: Store, worker_process: WorkerFactory
) -> None:
    """S5c, S7, S8, S1: after SIGKILL of the owner, its bound task goes to a live worker."""
    owner = worker_process("sticky-owner", TARGET, **STICKY_ENV)
    handle = await client.start_workflow(
        sticky_flows.StepFlow,
        len(STEPS),
        id=f"failover-{uuid.uuid4().hex[:6]}",
        task_queue=sticky_flows.TASK_QUEUE,
    )
    run_id = (await handle.describe()).run.run_id

    async def bound_to_owner() -> bool:
        return (await _run(store, run_id))["sticky_worker_id"] == "sticky-owner"

    await assert_eventually(bound_to_owner, timeout=30, message="the owner bound the run")
    worker_process("sticky-other", TARGET, **STICKY_ENV)

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
