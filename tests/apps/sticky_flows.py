"""Workflows for sticky execution tests: many workflow tasks per run, and code that can break."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from burrow import App, activity, workflow

TASK_QUEUE = "sticky-flows"

BROKEN = {"on": False}
"""Set to make the next activation of `StepFlow` raise inside workflow code (a task failure)."""


@activity.defn
async def double(value: int) -> int:
    return value * 2


@activity.defn
async def negate(value: int) -> int:
    return -value


SLOW_RUNS: list[int] = []
"""Every start of `slow_negate` in this process, by value."""


@activity.defn
async def slow_negate(value: int, seconds: float) -> int:
    SLOW_RUNS.append(value)
    await asyncio.sleep(seconds)
    return -value


async def _run_steps(
    pending: list[int], steps: int, step: Callable[[int], Awaitable[int]]
) -> list[int]:
    """Wait for `steps` values, run `step` on each in turn; a side effect first, for history."""
    results: list[int] = []
    token = await workflow.side_effect(lambda: 7)
    while len(results) < steps:
        await workflow.wait_condition(lambda: bool(pending))
        if BROKEN["on"]:
            raise RuntimeError("a bug in workflow code")
        results.append(await step(pending.pop(0)))
    return [*results, token]


@workflow.defn(name="StepFlow")
class StepFlow:
    """Each `step` signal becomes one workflow task that runs an activity on the value."""

    def __init__(self) -> None:
        self.pending: list[int] = []

    @workflow.signal
    def step(self, value: int) -> None:
        self.pending.append(value)

    @workflow.run
    async def run(self, steps: int) -> list[int]:
        return await _run_steps(
            self.pending, steps, lambda v: workflow.activity(double, v, start_to_close_timeout=10)
        )


@workflow.defn(name="StepFlow")
class StepFlowV2(StepFlow):
    """StepFlow after an incompatible change: it runs another activity for each step."""

    @workflow.run
    async def run(self, steps: int) -> list[int]:
        return await _run_steps(
            self.pending, steps, lambda v: workflow.activity(negate, v, start_to_close_timeout=10)
        )


@workflow.defn
class QueuedThenLocal:
    """Each queued result is followed by a local step (A3): warm, both are run and written by
    the worker that completed the queued attempt."""

    @workflow.run
    async def run(self, values: list[int]) -> list[int]:
        results = []
        for value in values:
            doubled = await workflow.activity(double, value, start_to_close_timeout=10)
            results.append(await workflow.local_activity(negate, doubled))
        return results


@workflow.defn
class QueuedThenSlowLocal:
    """A local step after a queued result that takes longer than its worker may hold it."""

    @workflow.run
    async def run(self, value: int, seconds: float) -> int:
        doubled = await workflow.activity(double, value, start_to_close_timeout=10)
        return await workflow.local_activity(slow_negate, doubled, seconds)


app = App(
    task_queue=TASK_QUEUE,
    workflows=[StepFlow, QueuedThenLocal, QueuedThenSlowLocal],
    activities=[double, negate, slow_negate],
)
app_v2 = App(task_queue=TASK_QUEUE, workflows=[StepFlowV2], activities=[double, negate])
