"""Workflows whose code cancels the wait on a queued activity, under each cancellation policy."""

from __future__ import annotations

import asyncio
import contextlib

from burrow import App, activity, workflow
from burrow.workflow import ActivityCancellationPolicy

TASK_QUEUE = "cancel-flows"

ENDINGS: dict[str, str] = {}
"""How each `hold` attempt of this process ended, by order: `stopped` or `finished`."""
STARTED: set[str] = set()
"""The orders whose `hold` attempt started in this process."""


@activity.defn
async def hold(order: str, seconds: float) -> str:
    """Heartbeats for `seconds`; a cancellation reaches it through its heartbeat."""
    STARTED.add(order)
    try:
        for _ in range(round(seconds / 0.05)):
            await activity.context().aheartbeat()
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        ENDINGS[order] = "stopped"
        raise
    ENDINGS[order] = "finished"
    return order


@activity.defn
async def note(order: str) -> str:
    return f"noted {order}"


@workflow.defn(name="CancelledWait")
class CancelledWait:
    """Starts `hold`, cancels the code awaiting it, then records a `note` and waits a little."""

    @workflow.run
    async def run(self, order: str, policy: str) -> str:
        waiting = asyncio.ensure_future(
            workflow.activity(
                hold,
                order,
                1.0,
                heartbeat_timeout=10,
                cancellation_policy=ActivityCancellationPolicy(policy),
            )
        )
        await asyncio.sleep(0.3)  # the activity starts meanwhile
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await workflow.activity(note, order)
        await asyncio.sleep(1.5)  # the activity's own end is recorded before the run closes
        return order


@workflow.defn(name="HeldRun")
class HeldRun:
    """Awaits `hold` under a policy; the run's cancellation reaches the code there."""

    @workflow.run
    async def run(self, order: str, policy: str) -> str:
        return await workflow.activity(
            hold,
            order,
            5.0,
            heartbeat_timeout=10,
            cancellation_policy=ActivityCancellationPolicy(policy),
        )


app = App(workflows=[CancelledWait, HeldRun], activities=[hold, note], task_queue=TASK_QUEUE)
