"""The benchmarks' App on task queue "bench".

- OneActivity awaits one activity (the throughput and wake latency benches).
- LongHistory grows its history in its first workflow task, then makes one small workflow task
  per signal (the sticky bench's latency part: replay cost against history length).
- Steps awaits several activities one after the other (the sticky bench's hit rate part).
- TenQueued and TenLocal run the same ten `noop` steps as queued and as local activities (the
  local activity bench); TenMixed alternates them; NoSteps returns the same result with no step.
- Nap sleeps on a durable timer and returns (the store scale and timer benches' timer shapes).
"""

from __future__ import annotations

from burrow import App, activity, workflow
from burrow.workflow import LocalActivityOptions

TASK_QUEUE = "bench"
SIGNAL = "step"


@activity.defn(name="noop")
async def noop(i: int) -> int:
    return i + 1


@workflow.defn(name="OneActivity")
class OneActivity:
    @workflow.run
    async def run(self, i: int) -> int:
        result: int = await workflow.activity(noop, i, start_to_close_timeout=30)
        return result


def _marker() -> int:
    return 0


@workflow.defn(name="LongHistory")
class LongHistory:
    """`events` side effects in the first task; then, per signal, one task adding two events.

    History after the first task: WorkflowStarted plus `events` SideEffectRecorded. Each signal
    adds its SignalReceived (moved in by the claim) and one SideEffectRecorded (written by the
    completion, so the completion leaves a timestamped event naming its workflow task). The run
    completes with its `signals`-th signal.
    """

    def __init__(self) -> None:
        self.received = 0
        self.handled = 0

    @workflow.signal(name=SIGNAL)
    def step(self) -> None:
        self.received += 1

    @workflow.run
    async def run(self, events: int, signals: int) -> int:
        for _ in range(events):
            await workflow.side_effect(_marker)
        while self.handled < signals:
            await workflow.wait_condition(lambda: self.received > self.handled)
            self.handled += 1
            await workflow.side_effect(_marker)
        return signals


@workflow.defn(name="Steps")
class Steps:
    """`steps` noop activities in sequence: one workflow task per activity result."""

    @workflow.run
    async def run(self, steps: int) -> int:
        total = 0
        for _ in range(steps):
            total = await workflow.activity(noop, total, start_to_close_timeout=30)
        return total


STEPS = 10


@workflow.defn(name="TenQueued")
class TenQueued:
    @workflow.run
    async def run(self, i: int) -> int:
        for _ in range(STEPS):
            i = await workflow.activity(noop, i, start_to_close_timeout=30)
        return i


@workflow.defn(name="TenLocal")
class TenLocal:
    @workflow.run
    async def run(self, i: int) -> int:
        options = LocalActivityOptions(start_to_close_timeout=30)
        for _ in range(STEPS):
            i = await workflow.local_activity(noop, i, options=options)
        return i


@workflow.defn(name="TenMixed")
class TenMixed:
    """The ten steps alternating: a queued activity, then a local one on its result."""

    @workflow.run
    async def run(self, i: int) -> int:
        options = LocalActivityOptions(start_to_close_timeout=30)
        for _ in range(STEPS // 2):
            i = await workflow.activity(noop, i, start_to_close_timeout=30)
            i = await workflow.local_activity(noop, i, options=options)
        return i


@workflow.defn(name="NoSteps")
class NoSteps:
    """The same result with no step at all: what any workflow costs (start, task, result)."""

    @workflow.run
    async def run(self, i: int) -> int:
        return i + STEPS


@workflow.defn(name="Nap")
class Nap:
    @workflow.run
    async def run(self, seconds: float) -> float:
        await workflow.sleep(seconds)
        return seconds


app = App(
    task_queue=TASK_QUEUE,
    workflows=[OneActivity, LongHistory, Steps, TenQueued, TenLocal, TenMixed, NoSteps, Nap],
    activities=[noop],
)
