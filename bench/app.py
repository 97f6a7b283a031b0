"""The benchmark's App: one workflow that awaits one activity, on task queue "bench"."""

from __future__ import annotations

from burrow import App, activity, workflow

TASK_QUEUE = "bench"


@activity.defn(name="noop")
async def noop(i: int) -> int:
    return i + 1


@workflow.defn(name="OneActivity")
class OneActivity:
    @workflow.run
    async def run(self, i: int) -> int:
        result: int = await workflow.activity(noop, i, start_to_close_timeout=30)
        return result


app = App(task_queue=TASK_QUEUE, workflows=[OneActivity], activities=[noop])
