"""Build pinning and definition fingerprints with real worker processes (SPEC S8, M7, M8).

Two builds of `BuildFlow` (tests/apps/build_flows.py) return different results, so a run's
result names the build that finished it. Every wait polls a condition with a generous deadline:
worker processes start slowly on a loaded machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from burrow import Client
from burrow.store import schema as s
from burrow.store.models import RunDescription
from burrow.testing import assert_eventually
from burrow.workflow import fingerprints
from burrow.workflow.definition import get_definition
from tests.acceptance.conftest import FAST_WORKER_ENV, ROOT, fast_settings
from tests.apps.build_flows import TASK_QUEUE, BuildFlow, BuildFlowV2
from tests.support import spawn
from tests.support.store import rows

pytestmark = pytest.mark.slow

V1 = "tests.apps.build_flows:app_v1"
V2 = "tests.apps.build_flows:app_v2"
DEADLINE = 90.0  # worker processes on a loaded machine
StartWorker = Callable[..., spawn.Process]
_STALE = timedelta(seconds=10)


@pytest.fixture
def start_worker(database_url: str, tmp_path: Path) -> Iterator[StartWorker]:
    """Start real `burrow worker` processes with a sticky cache; killed at teardown if alive."""
    started: list[spawn.Process] = []

    def start(worker_id: str, target: str, *args: str) -> spawn.Process:
        with (tmp_path / f"{worker_id}.log").open("wb") as log:
            proc = spawn.popen(
                [sys.executable, "-m", "burrow", "worker", target, "--worker-id", worker_id, *args],
                cwd=ROOT,
                env={
                    **os.environ,
                    **FAST_WORKER_ENV,
                    "BURROW_DATABASE_URL": database_url,
                    "BURROW_STICKY_CACHE_CAPACITY": "100",
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


def _log(tmp_path: Path, worker_id: str) -> str:
    return (tmp_path / f"{worker_id}.log").read_text(errors="replace")


async def _live(client: Client, worker_id: str) -> None:
    """Until the worker registered and heartbeats on the queue."""

    async def registered() -> bool:
        rows = await client.store.live_workers(
            namespace="default", task_queue=TASK_QUEUE, stale_after=_STALE
        )
        return any(row[0] == worker_id for row in rows)

    await assert_eventually(registered, timeout=DEADLINE, message=f"{worker_id} live")


async def _registration(client: Client, worker_id: str) -> dict[str, Any]:
    [row] = [
        r for r in await rows(client.store, s.worker_registrations) if r["worker_id"] == worker_id
    ]
    return row


async def _cli(database_url: str, *args: str) -> str:
    done = await asyncio.to_thread(
        spawn.run,
        [sys.executable, "-m", "burrow", *args],
        cwd=ROOT,
        env={**os.environ, "BURROW_DATABASE_URL": database_url, "COLUMNS": "200"},
        timeout=DEADLINE,
        check=True,
    )
    return done.stdout


async def _blocked_workflow_tasks(client: Client) -> int:
    [view] = await client.store.task_queues(
        namespace="default", live_after=_STALE, queue=TASK_QUEUE
    )
    return sum(k.compatibility_blocked for k in view.backlog.by_kind if k.kind == "workflow")


async def _unclaimed(client: Client, run_id: str) -> bool:
    [task] = await rows(client.store, s.workflow_tasks, run_id)
    return task["state"] == "ready" and task["claimed_at"] is None


async def test_m7_a_pinned_run_waits_blocked_until_a_worker_of_its_build_runs_it(
    client: Client, database_url: str, start_worker: StartWorker, tmp_path: Path
) -> None:
    """M7, M8: runs pinned to build v2 (by the client and by `burrow workflow start
    --build-id`) stay ready and compatibility-blocked while only a v1 worker is live, though it
    runs unpinned work meanwhile; a v2 worker then runs them, and no v1 worker ever claimed one."""
    start_worker("w-v1", V1, "--build-id", "v1")
    await _live(client, "w-v1")
    pinned = await client.start_workflow(
        BuildFlow, 0, id=f"pinned-{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE, build_id="v2"
    )
    started = json.loads(
        await _cli(
            database_url,
            "workflow",
            "start",
            "BuildFlow",
            "--task-queue",
            TASK_QUEUE,
            "--input",
            "[0]",
            "--build-id",
            "v2",
            "--json",
        )
    )
    by_cli = client.get_handle(started["workflow_id"], run_id=started["run_id"])
    # The v1 worker is polling: unpinned work started after the pinned runs is done by it.
    unpinned = await client.start_workflow(
        BuildFlow, 0, id=f"free-{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE
    )
    assert await unpinned.result(timeout=DEADLINE) == ["v1"]

    for handle in (pinned, by_cli):
        description: RunDescription = await handle.describe()
        assert description.run.build_id == "v2"
        assert await _unclaimed(client, description.run.run_id), "claimed by another build"
        assert description.compatibility_gap is not None
        assert "pinned to build 'v2'" in description.compatibility_gap
    assert await _blocked_workflow_tasks(client) == 2
    shown = json.loads(
        await _cli(database_url, "workflow", "describe", by_cli.workflow_id, "--json")
    )
    assert "pinned to build 'v2'" in shown["compatibility_gap"]

    start_worker("w-v2", V2, "--build-id", "v2")
    assert await pinned.result(timeout=DEADLINE) == ["v2"]
    assert await by_cli.result(timeout=DEADLINE) == ["v2"]
    for handle in (pinned, by_cli):
        run_id = (await handle.describe()).run.run_id
        owners = {t["lease_owner"] for t in await rows(client.store, s.workflow_tasks, run_id)}
        assert owners == {"w-v2"}
    assert await _blocked_workflow_tasks(client) == 0


async def test_s8_a_changed_definition_forces_a_cold_replay(
    client: Client, start_worker: StartWorker, tmp_path: Path
) -> None:
    """S8: the run records the fingerprint of the class it was started with; after a deploy of
    another definition of its type, the new worker logs `workflow_definition_changed` and
    replays cold on every claim, even with the run warm in its cache; the run finishes."""
    old = start_worker("w-old", V1)
    await _live(client, "w-old")
    handle = await client.start_workflow(
        BuildFlow, 3, id=f"fp-{uuid.uuid4().hex[:6]}", task_queue=TASK_QUEUE
    )
    [started, *_] = await handle.history()
    recorded = started.payload["workflow_definition_fingerprint"]
    assert recorded == fingerprints.fingerprint(get_definition(BuildFlow))
    assert recorded != fingerprints.fingerprint(get_definition(BuildFlowV2))

    async def signals_applied(count: int) -> bool:
        description = await handle.describe()
        history = await handle.history()
        received = sum(e.event_type == "SignalReceived" for e in history)
        return received == count and description.workflow_task is None

    assert await handle.signal("step", "a")
    await assert_eventually(lambda: signals_applied(1), timeout=DEADLINE, message="step a")
    old.send_signal(signal.SIGTERM)
    await asyncio.to_thread(old.wait, DEADLINE)
    assert "workflow_definition_changed" not in _log(tmp_path, "w-old")

    start_worker("w-new", V2)
    await _live(client, "w-new")
    assert await handle.signal("step", "b")
    await assert_eventually(lambda: signals_applied(2), timeout=DEADLINE, message="step b")
    assert await handle.signal("step", "c")  # w-new holds the run warm now: it must not use it

    assert await handle.result(timeout=DEADLINE) == ["a", "b", "c", "v2"]
    assert _log(tmp_path, "w-new").count("workflow_definition_changed") >= 2

    async def reported() -> dict[str, Any] | None:
        figures: dict[str, Any] | None = (await _registration(client, "w-new"))["sticky_cache"]
        if figures and figures["forced_cold_replay_count"] >= 2:
            return figures
        return None

    figures = await assert_eventually(reported, timeout=DEADLINE, message="cache figures")
    assert figures["hit_count"] == 0
