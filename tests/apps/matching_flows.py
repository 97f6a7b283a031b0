"""Workflows for the dedicated matching role tests: timers and a timed-out attempt to repair."""

from __future__ import annotations

import asyncio

from burrow import App, activity, workflow

TASK_QUEUE = "matching-role"
STALL_SECONDS = 3.0


@activity.defn
async def stall_first_attempt(value: str) -> int:
    """Never heartbeats, and stalls on its first attempt: only the repair pass times it out."""
    attempt = activity.context().attempt_number
    if attempt == 1:
        await asyncio.sleep(STALL_SECONDS)
    return attempt


_RETRY = workflow.RetryPolicy(max_attempts=3, initial_interval=0.1)


@workflow.defn
class TimedRetryFlow:
    """Two timers around an activity whose first attempt misses its heartbeat timeout."""

    @workflow.run
    async def run(self, value: str) -> int:
        await workflow.sleep(0.2)
        attempt: int = await workflow.activity(
            stall_first_attempt,
            value,
            start_to_close_timeout=30,
            heartbeat_timeout=0.5,
            retry_policy=_RETRY,
        )
        await workflow.sleep(0.2)
        return attempt


app = App(task_queue=TASK_QUEUE, workflows=[TimedRetryFlow], activities=[stall_first_attempt])
