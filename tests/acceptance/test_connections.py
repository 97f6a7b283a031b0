"""Connections across real worker processes (SPEC M7, W4, M9): work sent to a connection runs
only on a worker serving it, and work on a connection nobody serves waits, shown as blocked."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import pytest

from burrow import Client
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.acceptance.conftest import ROOT, WorkerFactory
from tests.apps import connection_flows
from tests.support import spawn
from tests.support.store import rows

pytestmark = pytest.mark.slow

TARGET = "tests.apps.connection_flows:app"


async def _registered(store: Store, **connections: str) -> None:
    """Wait until each worker id is registered with its connection."""

    async def up() -> bool:
        found = {r["worker_id"]: r["connection"] for r in await rows(store, s.worker_registrations)}
        return all(found.get(w) == c for w, c in connections.items())

    await assert_eventually(up, timeout=30, message=f"{connections} registered")


async def _queues(database_url: str) -> list[dict[str, Any]]:
    """`burrow queues --json`, rows of this app's queue."""
    done = await asyncio.to_thread(
        spawn.run,
        [sys.executable, "-m", "burrow", "queues", "--json"],
        cwd=ROOT,
        env={**os.environ, "BURROW_DATABASE_URL": database_url},
        timeout=60,
        check=True,
    )
    return [r for r in json.loads(done.stdout) if r["queue"] == connection_flows.TASK_QUEUE]


async def test_m7_w4_gpu_work_runs_only_on_the_gpu_connection_worker(
    client: Client, store: Store, worker_process: WorkerFactory
) -> None:
    """M7, W4: a session on "gpu" and a call naming "gpu" both run on the worker started with
    BURROW_CONNECTION=gpu; the default worker, which runs the workflow, takes neither."""
    default = worker_process("default-worker", TARGET)
    gpu = worker_process("gpu-worker", TARGET, BURROW_CONNECTION=connection_flows.GPU)
    await _registered(store, **{"default-worker": "default", "gpu-worker": "gpu"})
    job = uuid.uuid4().hex[:8]
    handle = await client.start_workflow(
        connection_flows.GpuSteps, job, id=f"gpu-{job}", task_queue=connection_flows.TASK_QUEUE
    )
    results = await handle.result(timeout=60)

    assert results == [[gpu.pid, "session"], [gpu.pid, "call"]]
    assert default.pid != gpu.pid
    steps = await rows(store, s.activity_tasks, handle.run_id)
    assert {(r["connection"], r["lease_owner"]) for r in steps} == {("gpu", "gpu-worker")}
    [session] = [
        r for r in await rows(store, s.worker_sessions) if r["session_id"] == f"render-{job}"
    ]
    assert (session["connection"], session["owner_worker_id"]) == ("gpu", "gpu-worker")


async def test_m9_work_on_an_unserved_connection_waits_blocked(
    client: Client, store: Store, worker_process: WorkerFactory, database_url: str
) -> None:
    """M9, M7: an activity sent to a connection no worker serves stays ready and `burrow queues`
    shows it blocked; once a worker serving that connection starts, it runs there."""
    worker_process("default-worker", TARGET)
    await _registered(store, **{"default-worker": "default"})
    handle = await client.start_workflow(
        connection_flows.Elsewhere,
        "render-farm",
        id="elsewhere",
        task_queue=connection_flows.TASK_QUEUE,
    )

    async def queued() -> bool:
        steps = await rows(store, s.activity_tasks, handle.run_id)
        return [(r["connection"], r["state"]) for r in steps] == [("render-farm", "ready")]

    await assert_eventually(queued, timeout=30, message="the activity is queued on render-farm")
    figures = {(r["connection"], r["kind"]): r for r in await _queues(database_url)}
    farm = figures["render-farm", "activity"]
    assert (farm["ready"], farm["live_workers"], farm["blocked"]) == (1, 0, 1)
    assert all(r["blocked"] == 0 for key, r in figures.items() if key[0] == "default")
    [step] = await rows(store, s.activity_tasks, handle.run_id)
    assert (step["state"], step["lease_owner"]) == ("ready", None)

    farm_worker = worker_process("farm-worker", TARGET, BURROW_CONNECTION="render-farm")
    assert await handle.result(timeout=60) == [farm_worker.pid, "elsewhere"]


async def test_m7_a_run_started_on_gpu_runs_wholly_on_the_gpu_worker(
    store: Store, worker_process: WorkerFactory, database_url: str
) -> None:
    """M7: `burrow workflow start --connection gpu` puts the run on "gpu": its workflow tasks and
    its activities all run on the worker serving "gpu", none on the default worker."""
    worker_process("default-worker", TARGET)
    gpu = worker_process("gpu-worker", TARGET, BURROW_CONNECTION=connection_flows.GPU)
    await _registered(store, **{"default-worker": "default", "gpu-worker": "gpu"})
    done = await asyncio.to_thread(
        spawn.run,
        [
            sys.executable,
            "-m",
            "burrow",
            "workflow",
            "start",
            "Elsewhere",
            "--id",
            "run-on-gpu",
            "--task-queue",
            connection_flows.TASK_QUEUE,
            "--connection",
            connection_flows.GPU,
            "--input",
            '["gpu"]',
            "--wait",
            "--timeout",
            "60",
            "--json",
        ],
        cwd=ROOT,
        env={**os.environ, "BURROW_DATABASE_URL": database_url},
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["result"] == [gpu.pid, "elsewhere"]
    tasks = await rows(store, s.workflow_tasks, document["run_id"])
    assert {(r["connection"], r["lease_owner"]) for r in tasks} == {("gpu", "gpu-worker")}
