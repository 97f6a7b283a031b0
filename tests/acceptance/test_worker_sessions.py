"""Worker sessions across real worker processes: capability routing and holder loss (W1-W9)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any

import pytest

from burrow import Client
from burrow.protocol import events
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.store import schema as s
from burrow.store.models import Lease
from burrow.testing import assert_eventually
from tests.acceptance.conftest import ROOT, WorkerFactory
from tests.apps import session_flows
from tests.support.store import blob, rows

pytestmark = pytest.mark.slow

TARGET = "tests.apps.session_flows:app"
GPU_ENV = {"BURROW_CAPABILITIES": session_flows.GPU, "BURROW_STICKY_OWNER_STALE_SECONDS": "3"}
CPU_ENV = {"BURROW_STICKY_OWNER_STALE_SECONDS": "3"}
OWNER_STALE = timedelta(seconds=3)


async def _registered(store: Store, *worker_ids: str) -> None:
    async def up() -> bool:
        ids = {r["worker_id"] for r in await rows(store, s.worker_registrations)}
        return set(worker_ids) <= ids

    await assert_eventually(up, timeout=30, message=f"{worker_ids} registered")


async def _session(store: Store, session_id: str) -> dict[str, Any] | None:
    found = [r for r in await rows(store, s.worker_sessions) if r["session_id"] == session_id]
    return found[0] if found else None


async def _steps(store: Store, run_id: str) -> list[dict[str, Any]]:
    return sorted(await rows(store, s.activity_tasks, run_id), key=lambda r: r["step_seq"])


def _sessions_cli(database_url: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "burrow", "sessions", *args, "--json"],
        cwd=ROOT,
        env={"BURROW_DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document: dict[str, Any] = json.loads(done.stdout)
    return document


async def test_w3_w6_a_gpu_session_runs_every_step_on_the_capable_worker(
    client: Client, store: Store, worker_process: WorkerFactory, database_url: str
) -> None:
    """W1, W3, W6, W9: three session steps land on the GPU worker; the other never claims one."""
    cpu = worker_process("cpu-worker", TARGET, **CPU_ENV)
    gpu = worker_process("gpu-worker", TARGET, **GPU_ENV)
    await _registered(store, "cpu-worker", "gpu-worker")
    job = uuid.uuid4().hex[:8]
    handle = await client.start_workflow(
        session_flows.GpuPipeline, job, 0, id=f"gpu-{job}", task_queue=session_flows.TASK_QUEUE
    )
    results = await handle.result(timeout=60)

    # Same process each time, reusing what the first step loaded there (uses 1, 2, 3).
    assert results == [[gpu.pid, 1, 1], [gpu.pid, 2, 2], [gpu.pid, 3, 3]]
    assert cpu.pid != gpu.pid
    run_id = (await handle.describe()).run.run_id
    steps = await _steps(store, run_id)
    assert [(r["lease_owner"], r["attempt"], r["state"]) for r in steps] == [
        ("gpu-worker", 1, "completed")
    ] * 3
    session = await _session(store, f"gpu-{job}")
    assert session is not None
    assert (session["owner_worker_id"], session["state"]) == ("gpu-worker", "active")
    assert session["requirements"] == [session_flows.GPU]
    # The worker registered its capability; the idle one registered none.
    registered = {
        r["worker_id"]: r["capabilities"] for r in await rows(store, s.worker_registrations)
    }
    assert registered == {"cpu-worker": [], "gpu-worker": [session_flows.GPU]}

    listing = _sessions_cli(database_url, "list")
    assert listing["metrics"]["active"] == 1 and listing["metrics"]["total"] == 1
    [listed] = listing["sessions"]
    assert (listed["session_id"], listed["lease_owner"]) == (f"gpu-{job}", "gpu-worker")
    shown = _sessions_cli(database_url, "show", f"gpu-{job}")
    assert shown["session"]["holder"]["worker_id"] == "gpu-worker"
    assert shown["session"]["holder"]["is_stale"] is False

    # W5, W8: a planned stop hands the (reacquirable) session over to another worker.
    gpu.send_signal(signal.SIGTERM)
    assert gpu.wait(timeout=30) == 0
    handed = await _session(store, f"gpu-{job}")
    assert handed is not None
    assert (handed["state"], handed["failure_reason"]) == ("orphaned", "worker_shutdown")


async def test_w5_a_sigterm_mid_pipeline_hands_the_session_to_another_worker(
    client: Client, store: Store, worker_process: WorkerFactory
) -> None:
    """W5: a deploy's SIGTERM of the holder while the pipeline is idle between steps does not
    fail the pipeline: the drain orphans the session and another capable worker reacquires it."""
    worker_process("cpu-worker", TARGET, **CPU_ENV)
    holder = worker_process("gpu-a", TARGET, **GPU_ENV)
    await _registered(store, "cpu-worker", "gpu-a")
    job = uuid.uuid4().hex[:8]
    session_id = f"idle-{job}"
    handle = await client.start_workflow(
        session_flows.IdleGpuPipeline,
        job,
        0.1,
        30,
        True,
        True,
        id=session_id,
        task_queue=session_flows.TASK_QUEUE,
    )
    run_id = (await handle.describe()).run.run_id

    async def first_step_done() -> bool:
        return [r["state"] for r in await _steps(store, run_id)] == ["completed"]

    await assert_eventually(first_step_done, timeout=60, message="step 1 completed")
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=30) == 0
    handed = await _session(store, session_id)
    assert handed is not None
    assert (handed["state"], handed["failure_reason"], handed["owner_worker_id"]) == (
        "orphaned",
        "worker_shutdown",
        "gpu-a",
    )

    taker = worker_process("gpu-b", TARGET, **GPU_ENV)
    await handle.signal(session_flows.IdleGpuPipeline.proceed)
    await handle.signal(session_flows.IdleGpuPipeline.proceed)
    results = await handle.result(timeout=90)
    assert results[0][0] == holder.pid
    # gpu-b starts from nothing: the resource is rebuilt after the reacquire (uses 1, 2).
    assert [(pid, uses) for pid, _, uses in results[1:]] == [(taker.pid, 1), (taker.pid, 2)]
    session = await _session(store, session_id)
    assert session is not None
    assert (session["state"], session["owner_worker_id"]) == ("active", "gpu-b")
    assert session["reacquire_count"] == 1


async def test_w5_w7_holder_killed_mid_sequence_another_capable_worker_reacquires(
    client: Client, store: Store, worker_process: WorkerFactory
) -> None:
    """W5, W7: SIGKILL of the holder mid-step; the attempt re-runs where the session moves."""
    cpu = worker_process("cpu-worker", TARGET, **CPU_ENV)
    holder = worker_process("gpu-a", TARGET, **GPU_ENV)
    await _registered(store, "cpu-worker", "gpu-a")
    job = uuid.uuid4().hex[:8]
    session_id = f"gpu-{job}"
    handle = await client.start_workflow(
        session_flows.GpuPipeline, job, 2, id=f"gpu-{job}", task_queue=session_flows.TASK_QUEUE
    )
    run_id = (await handle.describe()).run.run_id

    async def step_two_running() -> dict[str, Any] | None:
        steps = await _steps(store, run_id)
        held = [r for r in steps if r["step_seq"] == 2 and r["state"] == "leased"]
        return held[0] if held else None

    running = await assert_eventually(step_two_running, timeout=60, message="step 2 is running")
    assert running["lease_owner"] == "gpu-a"
    dead_lease = Lease(
        task_id=running["task_id"],
        run_id=run_id,
        lease_token=running["lease_token"],
        lease_owner=running["lease_owner"],
        attempt=running["attempt"],
        lease_expires_at=running["lease_expires_at"],
    )
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)

    # With no capable worker left, the repair pass finds the holder gone or its lease lapsed.
    async def lost() -> str | None:
        await store.sweep(owner_stale=OWNER_STALE)
        session = await _session(store, session_id)
        assert session is not None
        return session["state"] if session["state"] in ("orphaned", "expired") else None

    state = await assert_eventually(lost, timeout=30, message="the session lost its holder")
    assert state in ("orphaned", "expired")
    assert (await _session(store, session_id) or {})["owner_worker_id"] == "gpu-a"

    taker = worker_process("gpu-b", TARGET, **GPU_ENV)
    results = await handle.result(timeout=90)
    assert results[0][0] == holder.pid
    assert [r[0] for r in results[1:]] == [taker.pid, taker.pid]
    # gpu-b starts from nothing: the resource is rebuilt after the reacquire (uses 1, 2).
    assert [r[2] for r in results[1:]] == [1, 2]

    steps = await _steps(store, run_id)
    assert steps[1]["attempt"] >= 2 and steps[1]["lease_owner"] == "gpu-b"
    assert [r["lease_owner"] for r in steps] == ["gpu-a", "gpu-b", "gpu-b"]
    session = await _session(store, session_id)
    assert session is not None
    assert (session["state"], session["owner_worker_id"]) == ("active", "gpu-b")
    assert session["reacquire_count"] >= 1
    # W7: the dead holder's completion names a lease that is no longer current.
    with pytest.raises(store_errors.StaleLease):
        await store.complete_activity_task(lease=dead_lease, result=blob(0))
    history = await store.read_history(run_id=run_id)
    started = [
        e.event
        for e in history
        if isinstance(e.event, events.ActivityStarted) and e.event.sequence == 2
    ]
    assert len(started) >= 2
    assert cpu.poll() is None  # the worker without the capability idled through it all
