"""SDK workflows that clean up after a cooperative cancellation (protocol 1.20)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from durable_workflow import activity, workflow
from durable_workflow.errors import WorkflowCancelled


@activity.defn(name="hold")
async def hold(order: str) -> str:
    """Heartbeats until asked to stop (at most ten seconds)."""
    for _ in range(100):
        await activity.context().heartbeat({"order": order})
        await asyncio.sleep(0.1)
    return f"held {order}"


@activity.defn(name="release")
def release(order: str) -> str:
    return f"released {order}"


@workflow.defn(name="reserve-then-wait")
class ReserveThenWait:
    """Waits an hour; a cooperative cancellation runs the `release` cleanup, then cancels."""

    def run(self, ctx: Any, order: str) -> Generator[Any, Any, Any]:
        try:
            yield ctx.start_timer(3600)
        except WorkflowCancelled:
            yield ctx.schedule_activity("release", [order])
            raise
        return f"kept {order}"


@workflow.defn(name="reserve-then-hold")
class ReserveThenHold:
    """Runs `hold` under a cancellation policy; cancellation runs `release`, then cancels."""

    def run(self, ctx: Any, order: str, policy: str) -> Generator[Any, Any, Any]:
        try:
            yield ctx.schedule_activity(
                "hold",
                [order],
                heartbeat_timeout=5,
                schedule_to_close_timeout=60,
                cancellation_policy=policy,
            )
        except WorkflowCancelled:
            yield ctx.schedule_activity("release", [order])
            raise
        return f"held {order}"


WORKFLOWS = [ReserveThenWait, ReserveThenHold]
ACTIVITIES = [hold, release]
