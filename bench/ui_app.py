"""The UI bench's App (bench/ui_render.py): one run that grows a long, varied history.

`UiTimeline(batches)` runs `batches` rounds of forty queued activities at once (every third one
fails its first attempt and is retried after a short backoff), one local activity and a short
timer: about 160 history events a round, so 32 rounds make a history of about 5,000 events.
"""

from __future__ import annotations

import asyncio

from burrow import App, activity, workflow
from burrow.workflow import LocalActivityOptions

TASK_QUEUE = "bench-ui"
FAN_OUT = 40


@activity.defn(name="ui-step")
async def step(i: int) -> int:
    if i % 3 == 0 and activity.context().attempt_number == 1:
        raise RuntimeError(f"step {i}: first attempt fails on purpose")
    return i


@workflow.defn(name="UiTimeline")
class UiTimeline:
    @workflow.run
    async def run(self, batches: int) -> int:
        retry = workflow.RetryPolicy(max_attempts=3, initial_interval=0.01)
        local = LocalActivityOptions(start_to_close_timeout=30)
        total = 0
        for batch in range(batches):
            first = batch * FAN_OUT
            results = await asyncio.gather(
                *(
                    workflow.activity(step, i, start_to_close_timeout=30, retry_policy=retry)
                    for i in range(first + 1, first + FAN_OUT + 1)
                )
            )
            total += sum(results)
            total += await workflow.local_activity(step, 1, options=local)
            await workflow.sleep(0.01)
        return total


app = App(task_queue=TASK_QUEUE, workflows=[UiTimeline], activities=[step])
