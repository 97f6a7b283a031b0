"""SDK workflows that wait on more than one thing: a message stream, a select beside a signal.

Served with `sdk_parallel_flows`' workflows and activities (its `nap-greet` naps the members).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from durable_workflow import workflow

from tests.apps.sdk_parallel_flows import PARALLEL_ACTIVITIES, PARALLEL_WORKFLOWS


@workflow.defn(name="sdk-inbox")
class SdkInboxWorkflow:
    """Reads one message from its `inbox` stream, which is empty when the run starts."""

    def run(self, ctx: Any) -> Generator[Any, Any, Any]:
        message = yield from ctx.message_stream("inbox").receive_one()
        return {
            "message_id": message.message_id,
            "position": message.position,
            "arguments": message.arguments,
        }


@workflow.defn(name="sdk-inbox-relay")
class SdkInboxRelayWorkflow:
    """Reads its `inbox` stream `per_run` messages a run, continuing as new until it has `count`."""

    def run(self, ctx: Any, count: int, per_run: int, seen: list[Any]) -> Generator[Any, Any, Any]:
        for _ in range(min(per_run, count - len(seen))):
            message = yield from ctx.message_stream("inbox").receive_one()
            seen = [*seen, [message.position, *message.arguments]]
        if len(seen) < count:
            yield ctx.continue_as_new(count, per_run, seen)
        return seen


@workflow.defn(name="sdk-signalled-race")
class SdkSignalledRaceWorkflow:
    """`ctx.select` of two napping activities; a signal may arrive while both still nap."""

    def __init__(self) -> None:
        self.pokes: list[str] = []

    @workflow.signal("poke")
    def on_poke(self, value: str) -> None:
        self.pokes.append(value)

    def run(self, ctx: Any, name: str, naps: list[float]) -> Generator[Any, Any, Any]:
        picked = yield ctx.select(
            {
                "first": ctx.schedule_activity("nap-greet", [f"{name} 1", naps[0]]),
                "second": ctx.schedule_activity("nap-greet", [f"{name} 2", naps[1]]),
            }
        )
        return {"winner": picked.key, "value": picked.result(), "pokes": list(self.pokes)}


WAIT_WORKFLOWS = [
    *PARALLEL_WORKFLOWS,
    SdkInboxWorkflow,
    SdkInboxRelayWorkflow,
    SdkSignalledRaceWorkflow,
]
WAIT_ACTIVITIES = PARALLEL_ACTIVITIES
