"""Workflows that time out, fail, and are retried (issue 28), run by real worker processes."""

from __future__ import annotations

from pathlib import Path

from burrow import App, ApplicationError, RetryPolicy, activity, workflow

TASK_QUEUE = "test-deadlines"


@activity.defn
def fail_first_call(path: str) -> int:
    """Fails the first time it is ever called (a marker file says so), succeeds after."""
    marker = Path(path)
    calls = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(calls))
    if calls == 1:
        raise ApplicationError("first call fails", type="FirstCall")
    return calls


@workflow.defn
class SleepyFlow:
    """Sleeps for as long as it is told: long enough for a timeout to close it first."""

    @workflow.run
    async def run(self, seconds: float) -> str:
        await workflow.sleep(seconds)
        return "woke"


@workflow.defn
class LoopingFlow:
    """Continues as new after a short sleep, forever: only the execution timeout ends it."""

    @workflow.run
    async def run(self, generation: int) -> int:
        await workflow.sleep(0.1)
        workflow.continue_as_new(generation + 1)
        return generation


@workflow.defn
class FailingFlow:
    """Fails every run: retryable unless `non_retryable`."""

    @workflow.run
    async def run(self, non_retryable: bool) -> str:
        raise ApplicationError("always fails", type="AlwaysFails", non_retryable=non_retryable)


@workflow.defn
class SecondRunSucceedsFlow:
    """Its activity fails once, for good (one attempt): the run fails; its retry succeeds."""

    @workflow.run
    async def run(self, path: str) -> int:
        return await workflow.activity(
            fail_first_call,
            path,
            start_to_close_timeout=10,
            retry_policy=RetryPolicy(max_attempts=1),
        )


app = App(
    task_queue=TASK_QUEUE,
    workflows=[SleepyFlow, LoopingFlow, FailingFlow, SecondRunSucceedsFlow],
    activities=[fail_first_call],
)
