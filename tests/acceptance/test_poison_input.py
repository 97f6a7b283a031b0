"""No input poisons a run: bad signals are skipped, bad updates refused, bad input fails once.

Issue 13 items 1 and 2 (D1, D3), against real worker processes; each scenario runs warm and cold.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from burrow import (
    ApplicationError,
    Client,
    InvalidArgumentsError,
    UpdateFailedError,
    WorkflowFailureError,
)
from burrow.client import WorkflowHandle
from burrow.store import schema
from burrow.testing import assert_eventually
from tests.acceptance.conftest import ROOT, WorkerFactory
from tests.apps import poison_flows
from tests.support import spawn
from tests.support.history import assert_well_formed

pytestmark = pytest.mark.slow

TARGET = "tests.apps.poison_flows:app"
UNDECODABLE = {"codec": "avro", "blob": "not-base64-avro!!"}


async def _events(handle: WorkflowHandle[Any], event_type: str) -> list[dict[str, Any]]:
    return [e.payload for e in await handle.history() if e.event_type == event_type]


async def _skipped_after(handle: WorkflowHandle[Any], count: int) -> None:
    """Wait until `count` signals are recorded as skipped: each bad signal gets its own task."""

    async def recorded() -> bool:
        return len(await _events(handle, "SignalSkipped")) >= count

    await assert_eventually(recorded, message=f"{count} signals skipped")


async def _run_count(client: Client) -> int:
    async with client.store.engine.connect() as conn:
        count = sa.select(sa.func.count()).select_from(schema.runs)
        return int((await conn.execute(count)).scalar_one())


async def test_bad_signals_are_skipped_and_good_ones_complete_the_run(
    client: Client, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """Issue 13 item 1: bad arity, bad type, undecodable payload and unknown name never fail a
    workflow task; each is recorded, skipped, logged and counted; good signals then finish."""
    worker_process("poison-signals", TARGET)
    handle = await client.start_workflow(
        "TallyFlow", 10, id="tally-1", task_queue=poison_flows.TASK_QUEUE
    )
    await handle.signal("bump", 1, 2, signal_id="bad-arity")
    await _skipped_after(handle, 1)
    await handle.signal("add", "x", signal_id="bad-type")
    await _skipped_after(handle, 2)
    await client.store.signal_workflow(
        namespace="default",
        workflow_id="tally-1",
        signal_name="add",
        arguments=UNDECODABLE,
        signal_id="undecodable",
    )
    await _skipped_after(handle, 3)
    await handle.signal("no_such_signal", 1, signal_id="unknown-name")
    await _skipped_after(handle, 4)
    await handle.signal("bump")
    await handle.signal("add", 5)
    await handle.signal("finish")

    assert await handle.result(timeout=30) == {"total": 15, "bumps": 1}
    description = await handle.describe()
    assert description.skipped_signals == 4
    skipped = {e["signal_id"]: e["reason"] for e in await _events(handle, "SignalSkipped")}
    assert "takes 0 argument(s)" in skipped["bad-arity"]
    assert "parameter 'amount' expects int" in skipped["bad-type"]
    assert "undecodable payload" in skipped["undecodable"]
    assert "no signal handler named 'no_such_signal'" in skipped["unknown-name"]
    history = await handle.history()
    assert_well_formed(history)
    log = (tmp_path / "poison-signals.log").read_text()
    assert "workflow_task_failed" not in log
    warnings = [line for line in log.splitlines() if "signal_skipped" in line]
    assert len(warnings) == 4  # once per signal, warm or cold
    for signal_id in skipped:
        line = next(w for w in warnings if signal_id in w)
        assert handle.run_id is not None and handle.run_id in line
        assert "worker_id" in line and "task_id" in line and "reason" in line


async def test_bad_update_is_refused_to_its_caller_and_the_run_continues(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 13 item 1: an update whose arguments do not fit fails for its caller only."""
    worker_process("poison-updates", TARGET)
    handle = await client.start_workflow(
        "TallyFlow", 0, id="tally-2", task_queue=poison_flows.TASK_QUEUE
    )
    with pytest.raises(UpdateFailedError) as wrong_type:
        await handle.update("set_total", "x", timeout=30)
    cause = wrong_type.value.cause
    assert cause.type == "InvalidUpdateArguments"
    assert "parameter 'amount' expects int" in cause.message
    with pytest.raises(UpdateFailedError, match="takes 1 argument"):
        await handle.update("set_total", 1, 2, timeout=30)
    assert await handle.update("set_total", 7, timeout=30) == 7
    await handle.signal("finish")
    assert await handle.result(timeout=30) == {"total": 7, "bumps": 0}


@pytest.mark.parametrize(
    ("args", "named"),
    [(("x",), "parameter 'start' expects int"), ((1, 2, 3), "takes 1 argument(s) (start), got 3")],
)
async def test_start_input_that_does_not_fit_fails_the_run_once(
    client: Client, worker_process: WorkerFactory, tmp_path: Path, args: tuple[Any, ...], named: str
) -> None:
    """Issue 13 item 2: a non-retryable InvalidWorkflowInput failure, seen by result/describe."""
    worker_process("poison-start", TARGET)
    handle = await client.start_workflow(
        "TallyFlow", *args, id="tally-3", task_queue=poison_flows.TASK_QUEUE
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result(timeout=30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == "InvalidWorkflowInput"
    assert cause.non_retryable
    assert named in cause.message and "TallyFlow.run" in cause.message
    description = await handle.describe()
    assert description.run.status == "failed"
    assert description.workflow_task is None
    assert [e.event_type for e in await handle.history()] == ["WorkflowStarted", "WorkflowFailed"]
    assert "workflow_task_failed" not in (tmp_path / "poison-start.log").read_text()


async def test_start_wait_on_the_command_line_reports_the_invalid_input(
    database_url: str, worker_process: WorkerFactory
) -> None:
    """Issue 13 item 2: `burrow workflow start --wait` exits 1 naming type, run and parameter."""
    worker_process("poison-cli", TARGET)
    command = [
        *(sys.executable, "-m", "burrow", "workflow", "start", "TallyFlow"),
        *("--task-queue", poison_flows.TASK_QUEUE, "--id", "tally-cli"),
        *("--input", '["x"]', "--wait", "--timeout", "30"),
    ]
    env = {**os.environ, "BURROW_DATABASE_URL": database_url}
    done = await asyncio.to_thread(spawn.run, command, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    error = " ".join(done.stderr.split())
    assert "tally-cli" in error and "failed" in error
    assert "TallyFlow.run" in error and "parameter 'start' expects int" in error


@pytest.mark.runs_no_workflow_code
async def test_typed_calls_with_arguments_that_do_not_fit_write_nothing(client: Client) -> None:
    """Issue 13: given the handler itself, the client refuses before writing anything."""
    run: Any = poison_flows.TallyFlow.run
    with pytest.raises(InvalidArgumentsError, match="parameter 'start' expects int"):
        await client.start_workflow(run, "x", id="tally-4", task_queue=poison_flows.TASK_QUEUE)
    assert await _run_count(client) == 0
    handle = await client.start_workflow(
        poison_flows.TallyFlow.run, 1, id="tally-4", task_queue=poison_flows.TASK_QUEUE
    )
    bump: Any = poison_flows.TallyFlow.bump
    with pytest.raises(InvalidArgumentsError, match="takes 0 argument") as caught:
        await handle.signal(bump, 1, 2)
    assert caught.value.handler == "signal 'TallyFlow.bump'"
    set_total: Any = poison_flows.TallyFlow.set_total
    with pytest.raises(InvalidArgumentsError, match="parameter 'amount'") as refused:
        await handle.update(set_total, "x")
    assert refused.value.parameter == "amount"
    assert [e.event_type for e in await handle.history()] == ["WorkflowStarted"]
    assert await handle.signal(poison_flows.TallyFlow.add, 2)
