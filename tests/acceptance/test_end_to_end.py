"""End to end: client → Postgres → real worker processes, including kill -9 (D1-D4, A1-A2, M6)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from burrow import Client
from burrow.store.models import RunStatus
from burrow.testing import assert_eventually
from tests.apps import flows
from tests.support.history import (
    assert_well_formed,
    recorded_per_activation,
    replay_each_activation,
)

pytestmark = pytest.mark.slow


async def _history(handle):  # type: ignore[no-untyped-def]
    return await handle.history()


async def test_order_flow_completes_and_replays_to_identical_commands(
    client: Client, worker_process
) -> None:  # type: ignore[no-untyped-def]
    """D1-D3, A1-A2, S12: retries, timer, signal, side effect, version marker; cold == warm."""
    worker_process("e2e-order-1")
    handle = await client.start_workflow(
        flows.OrderFlow, "ada", id="order-1", task_queue=flows.TASK_QUEUE
    )

    async def waiting_for_approval() -> bool:
        return any(e.event_type == "TimerFired" for e in await handle.history())

    await assert_eventually(waiting_for_approval, message="order flow reached its signal wait")
    assert await handle.signal("approve", "grace", signal_id="approval-1")
    assert not await handle.signal("approve", "grace", signal_id="approval-1")  # duplicate id
    result = await handle.result(timeout=30)
    assert result == {
        "greeting": "hello, ada",
        "attempts": 2,
        "total": 5,
        "approved_by": "grace",
        "token_len": 8,
        "version": 2,
    }
    history = await handle.history()
    assert_well_formed(history)
    types = [e.event_type for e in history]
    assert "ActivityRetryScheduled" in types
    assert types[-1] == "WorkflowCompleted"
    run = (await handle.describe()).run
    recorded = recorded_per_activation(history)
    assert replay_each_activation(flows.app, run, history, warm=False) == recorded
    assert replay_each_activation(flows.app, run, history, warm=True) == recorded


async def test_worker_killed_during_activity_second_worker_finishes(
    client: Client, worker_process, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """D2, M6: kill -9 mid-activity; the lease expires, another worker reruns it once."""
    notes = tmp_path / "executions.txt"
    first = worker_process("e2e-crash-a")
    handle = await client.start_workflow(
        flows.SlowActivityFlow, str(notes), 30.0, id="slow-1", task_queue=flows.TASK_QUEUE
    )

    async def activity_started() -> bool:
        return notes.exists() and "start" in notes.read_text()

    await assert_eventually(activity_started, message="activity started on the first worker")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    worker_process("e2e-crash-b")
    execution_id = await handle.result(timeout=60)
    starts = [line for line in notes.read_text().splitlines() if line.startswith("start")]
    assert len(starts) >= 2, "the activity ran at least once more after the crash"
    history = await handle.history()
    assert_well_formed(history)
    completed = [e for e in history if e.event_type == "ActivityCompleted"]
    assert len(completed) == 1
    assert completed[0].payload["activity_execution_id"] == execution_id
    retries = [e for e in history if e.event_type == "ActivityRetryScheduled"]
    assert retries and retries[0].payload["exception_type"] == "LeaseExpired"


async def test_worker_killed_during_workflow_task_second_worker_finishes(
    client: Client, worker_process, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """D4, store invariant 5: kill -9 while a workflow task is leased; replay elsewhere finishes."""
    notes = tmp_path / "busy.txt"
    first = worker_process("e2e-wt-a")
    handle = await client.start_workflow(
        flows.BusyDecisionFlow, str(notes), id="busy-1", task_queue=flows.TASK_QUEUE
    )

    async def busy_task_leased() -> bool:
        description = await handle.describe()
        task = description.workflow_task
        history = await handle.history()
        fired = any(e.event_type == "TimerFired" for e in history)
        return bool(
            fired and task is not None and task.state == "leased" and task.lease_owner == "e2e-wt-a"
        )

    await assert_eventually(busy_task_leased, interval=0.01, message="second workflow task leased")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    worker_process("e2e-wt-b")
    assert isinstance(await handle.result(timeout=60), int)
    history = await handle.history()
    assert_well_formed(history)
    assert [e.event_type for e in history].count("ActivityScheduled") == 1
    run = await client.store.get_run(namespace="default", workflow_id="busy-1")
    assert run.status == RunStatus.COMPLETED


async def test_worker_killed_while_its_code_runs_on_a_result_the_run_still_finishes(
    client: Client, worker_process, tmp_path: Path, sticky_mode: str
) -> None:  # type: ignore[no-untyped-def]
    """D4, A-at-least-once, S12: kill -9 while workflow code runs on an activity's result.

    Warm, the worker runs that code before it records the result (one statement with the
    workflow task, worker/completion.py): the result dies with it and the activity runs again. Cold,
    the result was recorded and a workflow task of its own runs the code. Either way another
    worker finishes the run with a well-formed history.
    """
    notes = tmp_path / "busy.txt"
    first = worker_process("e2e-res-a")
    handle = await client.start_workflow(
        flows.BusyOnResultFlow, str(notes), id="busy-result", task_queue=flows.TASK_QUEUE
    )

    async def first_step_done() -> bool:
        return notes.exists() and "done" in notes.read_text()

    await assert_eventually(first_step_done, interval=0.01, message="first activity returned")
    await asyncio.sleep(0.2)  # inside the code's second of work on the result
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    worker_process("e2e-res-b")
    assert isinstance(await handle.result(timeout=60), int)
    history = await handle.history()
    assert_well_formed(history)
    assert [e.event_type for e in history].count("ActivityCompleted") == 2
    starts = [line for line in notes.read_text().splitlines() if line.startswith("start")]
    recorded_before_kill = sticky_mode == "cold"
    assert len(starts) >= (2 if recorded_before_kill else 3)


async def test_continue_as_new_chains_runs_to_a_result(client: Client, worker_process) -> None:  # type: ignore[no-untyped-def]
    """D4: continue-as-new closes each run and starts the next under the same workflow id."""
    worker_process("e2e-can")
    handle = await client.start_workflow(
        flows.CountdownFlow, 3, id="countdown", task_queue=flows.TASK_QUEUE
    )
    assert await handle.result(timeout=30) == "liftoff"
    runs = await client.list_workflows()
    statuses = sorted(str(r.status) for r in runs if r.workflow_id == "countdown")
    assert statuses == ["completed", "continued_as_new", "continued_as_new", "continued_as_new"]


async def test_sigterm_drains_and_exits_zero(client: Client, worker_process) -> None:  # type: ignore[no-untyped-def]
    """Runtime invariant 5: SIGTERM stops claiming, finishes work, deregisters, exits 0."""
    proc = worker_process("e2e-drain")
    handle = await client.start_workflow(
        flows.OrderFlow, "bo", id="drain-1", task_queue=flows.TASK_QUEUE
    )

    async def started() -> bool:
        return len(await handle.history()) > 2

    await assert_eventually(started, message="worker picked up the run")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    live = await client.store.live_workers(
        namespace="default",
        task_queue=flows.TASK_QUEUE,
        stale_after=__import__("datetime").timedelta(seconds=60),
    )
    assert live == []
