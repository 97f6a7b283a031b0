"""Local activities in a hand-driven worker against real Postgres (A3, M6): leases, timeouts.

The worker is driven by hand and never started, so its lease keeper does not run: only the
local activity's own heartbeats can renew the 1 s lease while a repair sweep runs meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from burrow import Client, Settings, Worker
from burrow.store import Store
from burrow.store import schema as s
from burrow.worker import workflow_tasks
from tests.acceptance.conftest import fast_settings
from tests.apps import local_flows
from tests.apps.local_flows import notes
from tests.support.store import rows


def _settings(database_url: str) -> Settings:
    base = fast_settings(database_url)
    return base.model_copy(update={"worker": base.worker.model_copy(update={"lease_seconds": 1})})


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=_settings(database_url))
    yield instance
    await instance.close()


@pytest.fixture
async def worker(database_url: str, store: Store) -> AsyncIterator[Worker]:
    made = Worker(local_flows.app, settings=_settings(database_url), store=store)
    yield made
    await made.shutdown(drain_seconds=5)


async def _sweep_forever(store: Store) -> None:
    while True:
        await store.sweep()
        await asyncio.sleep(0.1)


async def _process_while_sweeping(
    client: Client, store: Store, worker: Worker, workflow: type, *args: Any
) -> tuple[str, bool]:
    """Start a run, claim its first task by hand and process it; (run id, committed)."""
    handle = await client.start_workflow(
        workflow, *args, id=f"lease-{uuid.uuid4().hex[:6]}", task_queue=local_flows.TASK_QUEUE
    )
    run_id = (await handle.describe()).run.run_id
    [claimed] = await store.claim_workflow_tasks(
        flt=worker.workflow_filter,
        worker_id=worker.worker_id,
        lease=worker.lease,
        limit=1,
        sticky=worker.sticky_claim,
    )
    sweeping = asyncio.create_task(_sweep_forever(store))
    try:
        outcome = await workflow_tasks.process(worker.env, claimed)
    finally:
        sweeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
    return run_id, outcome is not None


async def test_heartbeats_keep_a_local_activity_three_times_the_lease_committed_once(
    client: Client, store: Store, worker: Worker, tmp_path: Path
) -> None:
    """A3: each heartbeat renews the 1 s workflow task lease; the 3 s local activity commits."""
    path = str(tmp_path / "beating.log")
    run_id, committed = await _process_while_sweeping(
        client, store, worker, local_flows.LocalLongBeating, path, 3.0
    )
    assert committed
    assert [line.split()[0] for line in notes(path)] == ["start", "done"]
    [task] = await rows(store, s.workflow_tasks, run_id)
    assert (task["state"], task["attempt"]) == ("completed", 1)
    history = await store.read_history(run_id=run_id)
    types = [e.event_type for e in history if e.payload.get("local_activity")]
    assert types[:2] == ["ActivityScheduled", "ActivityStarted"]
    assert types[-1] == "ActivityCompleted"
    assert set(types[2:-1]) == {"ActivityHeartbeatRecorded"}


async def test_without_heartbeats_the_expired_lease_is_swept_and_nothing_is_committed(
    client: Client, store: Store, worker: Worker, tmp_path: Path
) -> None:
    """A3, M6, D2: silent for 3 s, the task lease expires; the sweep hands the task back and
    the finished local activity is not recorded (the next claim runs it again)."""
    path = str(tmp_path / "slow.log")
    run_id, committed = await _process_while_sweeping(
        client, store, worker, local_flows.LocalSlow, path, 3.0
    )
    assert not committed
    assert [line.split()[0] for line in notes(path)] == ["start", "done"]
    [task] = await rows(store, s.workflow_tasks, run_id)
    assert (task["state"], task["attempt"]) == ("ready", 2)
    history = await store.read_history(run_id=run_id)
    assert not [e for e in history if e.event_type.startswith("Activity")]


async def test_heartbeat_and_schedule_to_close_timeouts_end_local_attempts(
    client: Client, store: Store, worker: Worker
) -> None:
    """A3: silence past heartbeat_timeout times an attempt out (retried, then final); the
    schedule-to-close timeout ends the execution with no retry."""
    handle = await client.start_workflow(
        local_flows.LocalTimeouts,
        id=f"timeouts-{uuid.uuid4().hex[:6]}",
        task_queue=local_flows.TASK_QUEUE,
    )
    run_id = (await handle.describe()).run.run_id
    [claimed] = await store.claim_workflow_tasks(
        flt=worker.workflow_filter,
        worker_id=worker.worker_id,
        lease=worker.lease,
        limit=1,
        sticky=worker.sticky_claim,
    )
    assert await workflow_tasks.process(worker.env, claimed) is not None
    assert await handle.result(timeout=10) == [
        "ActivityTimedOut: local activity heartbeat timeout",
        "ActivityTimedOut: local activity schedule_to_close timeout",
    ]
    history = await store.read_history(run_id=run_id)
    local = [e for e in history if e.payload.get("local_activity")]
    assert [(e.event_type, e.payload.get("timeout_kind")) for e in local] == [
        ("ActivityScheduled", None),
        ("ActivityStarted", None),
        ("ActivityRetryScheduled", "heartbeat"),
        ("ActivityStarted", None),
        ("ActivityTimedOut", "heartbeat"),
        ("ActivityScheduled", None),
        ("ActivityStarted", None),
        ("ActivityTimedOut", "schedule_to_close"),
    ]
