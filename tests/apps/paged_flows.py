"""A run of many short workflow tasks: its history is long enough to span many small pages."""

from __future__ import annotations

from burrow import App, activity, workflow

TASK_QUEUE = "paged-flows"


@activity.defn
async def bump(total: int) -> int:
    return total + 1


@workflow.defn(name="ManySteps")
class ManySteps:
    """`steps` activities in sequence, then a timer: one workflow task per result."""

    @workflow.run
    async def run(self, steps: int) -> int:
        total = 0
        for _ in range(steps):
            total = await workflow.activity(bump, total, start_to_close_timeout=10)
        await workflow.sleep(0.05)
        return total


app = App(task_queue=TASK_QUEUE, workflows=[ManySteps], activities=[bump])
