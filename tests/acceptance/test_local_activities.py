"""Local activities in real worker processes (A3, D2, D3): one step of activity history each."""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from burrow import Client, WorkflowCancelledError
from burrow.handle import WorkflowHandle
from burrow.protocol.events import HistoryEvent
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.acceptance.conftest import WorkerFactory
from tests.apps import local_flows
from tests.apps.local_flows import notes
from tests.support import spawn
from tests.support.history import assert_well_formed
from tests.support.store import rows

pytestmark = pytest.mark.slow

TARGET = "tests.apps.local_flows:app"
ACTIVITY_EVENTS = {
    "ActivityScheduled",
    "ActivityStarted",
    "ActivityHeartbeatRecorded",
    "ActivityRetryScheduled",
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityCancelled",
}


async def _start(client: Client, workflow: type, *args: Any) -> WorkflowHandle[Any]:
    return await client.start_workflow(
        workflow,
        *args,
        id=f"{workflow.__name__}-{uuid.uuid4().hex[:6]}",
        task_queue=local_flows.TASK_QUEUE,
    )


def _local(history: list[HistoryEvent]) -> list[HistoryEvent]:
    return [e for e in history if e.payload.get("local_activity")]


def _types(events: list[HistoryEvent]) -> list[str]:
    return [e.event_type for e in events]


async def _activity_tasks(store: Store, run_id: str) -> list[dict[str, Any]]:
    return await rows(store, s.activity_tasks, run_id)


def _assert_local_markers(history: list[HistoryEvent]) -> None:
    """A3: every local event says execution_mode=local; the snapshot says so too."""
    for event in _local(history):
        assert event.payload["execution_mode"] == "local", event
        if event.event_type == "ActivityScheduled":
            snapshot = event.payload["activity"]
            assert snapshot["execution_mode"] == "local"
            assert snapshot["queue_bypassed"] is True
            assert "queue" not in snapshot


def _cli(database_url: str, *args: str) -> str:
    done = spawn.run(
        [sys.executable, "-m", "burrow", "workflow", *args],
        env={**os.environ, "BURROW_DATABASE_URL": database_url, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=60,
        check=True,
    )
    return done.stdout


async def test_local_activity_records_activity_history_and_never_reruns_after_commit(
    client: Client, store: Store, worker_process: WorkerFactory, tmp_path: Path, database_url: str
) -> None:
    """A3, D3: no activity task; local history per step; a later task never re-runs it."""
    worker_process("local-1", TARGET)
    path = str(tmp_path / "greet.log")
    handle = await _start(client, local_flows.LocalThenSignal, path)
    run_id = (await handle.describe()).run.run_id

    async def first_ran() -> bool:
        return len(notes(path)) == 1 and (await handle.describe()).workflow_task is None

    await assert_eventually(first_ran, message="the first local activity committed")
    assert await handle.signal("proceed")
    assert await handle.result(timeout=30) == ["hello, first", "hello, second"]

    # Each local activity ran once, in this worker's process, as a local execution.
    lines = notes(path)
    assert [line.split()[:3] for line in lines] == [
        ["greet", "first", "local"],
        ["greet", "second", "local"],
    ]
    assert [line.split()[3] for line in lines] == [f"{run_id}:1", f"{run_id}:3"]
    assert await _activity_tasks(store, run_id) == []
    description = await handle.describe()
    assert (description.activities, description.local_activities) == ([], 2)
    history = await handle.history()
    assert_well_formed(history)
    _assert_local_markers(history)
    local = _local(history)
    assert (
        _types(local)
        == [
            "ActivityScheduled",
            "ActivityStarted",
            "ActivityCompleted",
        ]
        * 2
    )
    assert [e.payload["sequence"] for e in local] == [1, 1, 1, 3, 3, 3]
    # The events of a local step belong to the workflow task that ran it.
    scheduled = [e for e in local if e.event_type == "ActivityScheduled"]
    assert all(e.workflow_task_id == e.payload["workflow_task_id"] for e in scheduled)
    # The command line: describe counts them, history marks their events local.
    described = json.loads(_cli(database_url, "describe", handle.workflow_id, "--json"))
    assert (described["activities"], described["local_activities"]) == ([], 2)
    table = _cli(database_url, "history", handle.workflow_id)
    assert table.count("execution_mode=local") == len(local)


async def test_local_retries_failures_and_timeouts_are_recorded_per_attempt(
    client: Client, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """A3: in-process retries record Started per attempt, RetryScheduled between, one terminal."""
    worker_process("local-1", TARGET)
    path = str(tmp_path / "retries.log")
    handle = await _start(client, local_flows.LocalRetries, path)
    assert await handle.result(timeout=30) == {
        "attempts": 3,
        "failed": "ActivityError: ValueError",
        "timed_out": "ActivityTimedOut",
    }
    assert notes(path) == ["attempt 1", "attempt 2", "attempt 3", "failed", "failed"]
    history = await handle.history()
    assert_well_formed(history)
    _assert_local_markers(history)
    by_step: dict[int, list[str]] = {}
    for event in _local(history):
        by_step.setdefault(event.payload["sequence"], []).append(event.event_type)
    assert by_step == {
        1: [
            "ActivityScheduled",
            *["ActivityStarted", "ActivityRetryScheduled"] * 2,
            "ActivityStarted",
            "ActivityCompleted",
        ],
        2: [
            "ActivityScheduled",
            "ActivityStarted",
            "ActivityRetryScheduled",
            "ActivityStarted",
            "ActivityFailed",
        ],
        3: ["ActivityScheduled", "ActivityStarted", "ActivityTimedOut"],
    }
    [timed_out] = [e for e in history if e.event_type == "ActivityTimedOut"]
    assert timed_out.payload["timeout_kind"] == "start_to_close"
    [failed] = [e for e in history if e.event_type == "ActivityFailed"]
    assert failed.payload["exception_type"] == "ValueError"
    assert failed.payload["attempt_number"] == 2


async def test_local_and_queued_activities_together_replay_in_step_order(
    client: Client, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """A3, D1: gathered local and queued activities keep their step numbers on every replay."""
    worker_process("local-1", TARGET)
    path = str(tmp_path / "mixed.log")
    handle = await _start(client, local_flows.LocalMixed, path)
    assert await handle.result(timeout=30) == [
        "hello, one",
        "hello, queued",
        "hello, two",
        "hello, after",
    ]
    modes = sorted(line.split()[1:3] for line in notes(path))
    assert modes == [["after", "local"], ["one", "local"], ["queued", "queued"], ["two", "local"]]
    history = await handle.history()
    assert_well_formed(history)
    scheduled = [e for e in history if e.event_type == "ActivityScheduled"]
    assert [(e.payload["sequence"], e.payload["execution_mode"]) for e in scheduled] == [
        (1, "local"),
        (2, "queued"),
        (3, "local"),
        (4, "local"),
    ]


@pytest.mark.parametrize("in_thread", [False, True], ids=["async", "sync-thread"])
async def test_heartbeats_keep_a_local_activity_longer_than_the_lease_running_once(
    client: Client,
    store: Store,
    worker_process: WorkerFactory,
    tmp_path: Path,
    in_thread: bool,
) -> None:
    """A3: heartbeats renew the 2 s workflow task lease; a 6 s local activity runs once.

    A sync activity heartbeats from its executor thread: those heartbeats reach the lease too.
    """
    worker_process("local-1", TARGET)
    worker_process("local-2", TARGET)
    path = str(tmp_path / "beating.log")
    handle = await _start(client, local_flows.LocalLongBeating, path, 6.0, in_thread)
    sent = await handle.result(timeout=60)
    assert [line.split()[0] for line in notes(path)] == ["start", "done"]
    history = await handle.history()
    assert_well_formed(history)
    _assert_local_markers(history)
    beats = [e for e in history if e.event_type == "ActivityHeartbeatRecorded"]
    assert 0 < len(beats) <= sent
    assert beats[-1].payload["progress"] is not None
    run_id = (await handle.describe()).run.run_id
    [task] = await rows(store, s.workflow_tasks, run_id)
    assert task["attempt"] == 1, "the task was never taken over"


async def test_cancelling_the_run_cancels_its_running_local_activity(
    client: Client, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """A3, W8: the cancel reaches the local activity by its heartbeat; ActivityCancelled, then
    the run ends cancelled."""
    worker_process("local-1", TARGET)
    path = str(tmp_path / "cancel.log")
    handle = await _start(client, local_flows.LocalCancellable, path)

    async def started() -> bool:
        return notes(path) == ["start"]

    await assert_eventually(started, message="the local activity runs")
    await handle.cancel(reason="stop it")
    with pytest.raises(WorkflowCancelledError):
        await handle.result(timeout=30)
    assert notes(path) == ["start", "cancelled True"]
    history = await handle.history()
    assert_well_formed(history)
    local = _local(history)
    assert _types(local)[0] == "ActivityScheduled"
    assert _types(local)[-1] == "ActivityCancelled"
    assert history[-1].event_type == "WorkflowCancelled"


@pytest.mark.sticky_cache_set_by_test
async def test_worker_killed_during_a_local_activity_the_next_claim_runs_it_again(
    client: Client, store: Store, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """D2, A3: a crash before the task commits re-runs the local activity elsewhere; history
    still holds one local step."""
    path = str(tmp_path / "slow.log")
    first = worker_process("local-doomed", TARGET)
    handle = await _start(client, local_flows.LocalSlow, path, 3.0)

    async def started() -> bool:
        return len(notes(path)) == 1

    await assert_eventually(started, message="the local activity started")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    worker_process("local-survivor", TARGET)
    assert await handle.result(timeout=60) == "slow done"

    lines = notes(path)
    assert [line.split()[0] for line in lines] == ["start", "start", "done"]
    assert lines[0].split()[1] == str(first.pid)
    history = await handle.history()
    assert_well_formed(history)
    assert _types(_local(history)) == ["ActivityScheduled", "ActivityStarted", "ActivityCompleted"]
    run_id = (await handle.describe()).run.run_id
    assert await _activity_tasks(store, run_id) == []
