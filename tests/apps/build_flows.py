"""Two builds of one workflow type, for build pinning and definition fingerprint tests (S8, M7).

`app_v1` and `app_v2` run `BuildFlow` with different code: each run's result names the build
that finished it, and the two definitions have different fingerprints.
"""

from __future__ import annotations

from burrow import App, workflow

TASK_QUEUE = "build-flows"


@workflow.defn(name="BuildFlow")
class BuildFlow:
    """Waits for `steps` signals, then returns them and the build that ran it."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    @workflow.signal
    def step(self, value: str) -> None:
        self.steps.append(value)

    @workflow.run
    async def run(self, steps: int) -> list[str]:
        await workflow.wait_condition(lambda: len(self.steps) >= steps)
        return [*self.steps, "v1"]


@workflow.defn(name="BuildFlow")
class BuildFlowV2(BuildFlow):
    """BuildFlow as the next build has it: the same history, another result."""

    @workflow.run
    async def run(self, steps: int) -> list[str]:
        await workflow.wait_condition(lambda: len(self.steps) >= steps)
        return [*self.steps, "v2"]


app_v1 = App(task_queue=TASK_QUEUE, workflows=[BuildFlow])
app_v2 = App(task_queue=TASK_QUEUE, workflows=[BuildFlowV2])
