"""Workflows for sticky execution tests: many workflow tasks per run, and code that can break."""

from __future__ import annotations

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


app = App(task_queue=TASK_QUEUE, workflows=[StepFlow], activities=[double, negate])
app_v2 = App(task_queue=TASK_QUEUE, workflows=[StepFlowV2], activities=[double, negate])
