"""Workflow timeouts and retries end to end: client -> store -> real worker process (issue 28).

Timeouts are short (1-3 s) so the tests finish; what is asserted is what the runs recorded
(statuses, events, attempt numbers, deadlines read from the database), never elapsed time.
Each scenario runs warm and forced cold (S12).
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest

from burrow import (
    Client,
    RetryPolicy,
    WorkflowFailureError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
)
from burrow.store.models import RunInfo, RunStatus
from burrow.testing import assert_eventually
from tests.acceptance.conftest import WorkerFactory
from tests.apps import deadline_flows as flows

pytestmark = pytest.mark.slow
QUEUE = flows.TASK_QUEUE
TARGET = "tests.apps.deadline_flows:app"
QUICK_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.2, backoff_coefficient=2.0)


async def started_worker(client: Client, worker_process: WorkerFactory, worker_id: str) -> None:
    """A worker process, registered: a run's deadline must not pass while it boots."""
    worker_process(worker_id, TARGET)

    async def up() -> bool:
        live = await client.store.live_workers(
            namespace=client.namespace, task_queue=QUEUE, stale_after=timedelta(seconds=60)
        )
        return bool(live)

    await assert_eventually(up, timeout=30, message=f"{worker_id} registered")


async def chain(client: Client, workflow_id: str) -> list[RunInfo]:
    """Every run of the workflow id, oldest first."""
    runs = await client.store.list_workflows(namespace=client.namespace, limit=1000)
    return sorted((r for r in runs if r.workflow_id == workflow_id), key=lambda r: r.created_at)


async def test_run_timeout_closes_the_run_timed_out(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28, D3: a run past its run timeout is closed `timed_out`, its timer cancelled."""
    worker_process("timeouts", TARGET)
    handle = await client.start_workflow(
        flows.SleepyFlow.run, 3600.0, id="run-timeout-1", task_queue=QUEUE, run_timeout=1
    )

    with pytest.raises(WorkflowTimedOutError) as caught:
        await handle.result(timeout=60)

    assert isinstance(caught.value, WorkflowFailureError)
    assert caught.value.status == "timed_out"
    assert caught.value.timeout_kind == "run"
    history = await handle.history()
    assert history[-1].event_type == "WorkflowTimedOut"
    assert history[-1].payload["timeout_kind"] == "run"
    assert "TimerFired" not in [e.event_type for e in history]
    description = await handle.describe()
    assert description.run.status == RunStatus.TIMED_OUT
    assert description.run.run_deadline_at is not None
    assert description.run.run_timeout_seconds == 1.0
    assert description.run.execution_deadline_at is None


async def test_execution_timeout_spans_continue_as_new(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: the execution deadline is carried by every run; each run's deadline is fresh."""
    await started_worker(client, worker_process, "timeouts")
    handle = await client.start_workflow(
        flows.LoopingFlow.run,
        0,
        id="execution-timeout-1",
        task_queue=QUEUE,
        execution_timeout=timedelta(seconds=3),
        run_timeout=timedelta(seconds=2),
    )

    with pytest.raises(WorkflowTimedOutError) as caught:
        await handle.result(timeout=60)

    assert caught.value.timeout_kind == "execution"
    runs = await chain(client, "execution-timeout-1")
    assert len(runs) >= 2
    assert [r.status for r in runs[:-1]] == [RunStatus.CONTINUED_AS_NEW] * (len(runs) - 1)
    assert runs[-1].status == RunStatus.TIMED_OUT
    assert caught.value.run_id == runs[-1].run_id
    assert len({r.execution_deadline_at for r in runs}) == 1
    assert len({r.run_deadline_at for r in runs}) == len(runs)  # each run its own


async def test_failed_runs_are_retried_until_the_policy_is_spent(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: attempts 1..3, each the retry of the one before; result() follows them all."""
    worker_process("retries", TARGET)
    handle = await client.start_workflow(
        flows.FailingFlow.run, False, id="retry-1", task_queue=QUEUE, retry_policy=QUICK_RETRY
    )

    with pytest.raises(WorkflowFailureError, match="always fails") as caught:
        await handle.result(timeout=60)

    runs = await chain(client, "retry-1")
    assert [r.retry_attempt for r in runs] == [1, 2, 3]
    assert [r.status for r in runs] == [RunStatus.FAILED] * 3
    assert [r.retry_of_run_id for r in runs] == [None, runs[0].run_id, runs[1].run_id]
    assert [r.continued_to_run_id for r in runs] == [runs[1].run_id, runs[2].run_id, None]
    assert caught.value.run_id == runs[2].run_id
    assert not isinstance(caught.value, (WorkflowTimedOutError, WorkflowTerminatedError))
    for earlier, retry in itertools.pairwise(runs):
        history = await client.get_handle("retry-1", run_id=earlier.run_id).history()
        assert history[-1].event_type == "WorkflowFailed"
        assert earlier.closed_at is not None and retry.created_at >= earlier.closed_at


async def test_a_retry_that_succeeds_gives_the_result(
    client: Client, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """Issue 28: the first run fails, its retry completes: result() returns the retry's result."""
    worker_process("retries", TARGET)
    handle = await client.start_workflow(
        flows.SecondRunSucceedsFlow.run,
        str(tmp_path / "calls"),
        id="retry-ok-1",
        task_queue=QUEUE,
        retry_policy=QUICK_RETRY,
    )

    assert await handle.result(timeout=60) == 2

    runs = await chain(client, "retry-ok-1")
    assert [(r.retry_attempt, r.status) for r in runs] == [
        (1, RunStatus.FAILED),
        (2, RunStatus.COMPLETED),
    ]


async def test_a_non_retryable_failure_is_not_retried(
    client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 28: an error raised non-retryable ends the chain at its first run."""
    worker_process("retries", TARGET)
    handle = await client.start_workflow(
        flows.FailingFlow.run, True, id="no-retry-1", task_queue=QUEUE, retry_policy=QUICK_RETRY
    )

    with pytest.raises(WorkflowFailureError, match="always fails"):
        await handle.result(timeout=60)

    [run] = await chain(client, "no-retry-1")
    assert (run.status, run.continued_to_run_id) == (RunStatus.FAILED, None)


@pytest.mark.runs_no_workflow_code
async def test_a_terminated_run_raises_workflow_terminated_error_and_is_not_retried(
    client: Client,
) -> None:
    """Issue 28: termination is never retried; result() raises WorkflowTerminatedError."""
    handle = await client.start_workflow(
        "SleepyFlow", 3600.0, id="terminated-1", task_queue=QUEUE, retry_policy=QUICK_RETRY
    )
    await handle.terminate(reason="operator")

    with pytest.raises(WorkflowTerminatedError) as caught:
        await handle.result(timeout=30)

    assert isinstance(caught.value, WorkflowFailureError)
    assert caught.value.status == "terminated"
    [run] = await chain(client, "terminated-1")
    assert run.continued_to_run_id is None


@pytest.mark.parametrize(
    ("execution", "run", "error"),
    [
        (0, None, ValueError),
        (-1, None, ValueError),
        (None, float("nan"), ValueError),
        (10, 20, ValueError),
        (timedelta(seconds=5), timedelta(seconds=6), ValueError),
        ("10", None, TypeError),
    ],
)
@pytest.mark.runs_no_workflow_code
async def test_bad_timeouts_are_refused_at_start_writing_nothing(
    client: Client, execution: object, run: object, error: type[Exception]
) -> None:
    """Issue 28: not positive, not a duration, or run > execution: refused before any write."""
    with pytest.raises(error, match="timeout"):
        await client.start_workflow(
            "SleepyFlow",
            1.0,
            id="bad-timeouts-1",
            task_queue=QUEUE,
            check_workers=False,
            execution_timeout=execution,  # type: ignore[arg-type]
            run_timeout=run,  # type: ignore[arg-type]
        )

    assert await chain(client, "bad-timeouts-1") == []
