"""SDK workflows that yield lists: parallel groups (PROTOCOL.md 7, 8.3) through `burrow server`.

Served together with `sdk_flows`' workflows (its `greeter` is the child of the groups here).
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from durable_workflow import activity, workflow

from tests.apps.sdk_flows import ACTIVITIES, WORKFLOWS

PARALLEL_QUEUE = "python-parallel"


@activity.defn(name="nap-greet")
async def nap_greet(name: str, seconds: float) -> str:
    """A greeting after a nap: a member that naps resolves after the members yielded after it."""
    await asyncio.sleep(seconds)
    return f"hello, {name}"


@workflow.defn(name="sdk-fan-out-activities")
class SdkFanOutActivitiesWorkflow:
    """`count` activities yielded as one list; the first naps, so it completes after others."""

    def run(self, ctx: Any, count: int) -> Generator[Any, Any, Any]:
        answers = yield [
            ctx.schedule_activity("nap-greet", [f"guest {i}", 0.3 if i == 0 else 0])
            for i in range(count)
        ]
        return list(answers)


@workflow.defn(name="sdk-parallel-timers")
class SdkParallelTimersWorkflow:
    """Three timers as one list (the 1 s ones fire after the 0 s one), then a group of one."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        fired = yield [ctx.start_timer(1), ctx.start_timer(0), ctx.start_timer(1)]
        [greeting] = yield [ctx.schedule_activity("greet", [name])]
        return {"fired": list(fired), "then": greeting}


@workflow.defn(name="sdk-reversed-mixed-group")
class SdkReversedMixedGroupWorkflow:
    """A side effect, then a timer, a child and an activity yielded as one group in one task.

    The side effect takes step 1, so the group's base is 2; its members resolve in the
    opposite order to the one they were yielded in (activity, child, then the 1 s timer).
    """

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        suffix = yield ctx.side_effect(lambda: "jr")
        answers = yield [
            ctx.start_timer(1),
            ctx.start_child_workflow("greeter", [f"{name} {suffix}"]),
            ctx.schedule_activity("greet", [name]),
        ]
        return list(answers)


PARALLEL_WORKFLOWS = [
    *WORKFLOWS,
    SdkFanOutActivitiesWorkflow,
    SdkParallelTimersWorkflow,
    SdkReversedMixedGroupWorkflow,
]
PARALLEL_ACTIVITIES = [*ACTIVITIES, nap_greet]
