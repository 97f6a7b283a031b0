"""Workflows written with the unmodified `durable-workflow` SDK, run against `burrow server`."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from durable_workflow import activity, workflow


@activity.defn(name="greet")
def greet(name: str) -> str:
    return f"hello, {name}"


@activity.defn(name="shout")
def shout(text: str) -> str:
    activity.context().heartbeat_sync({"progress": 1})
    return text.upper()


@workflow.defn(name="greeter")
class GreeterWorkflow:
    """The SDK README quickstart."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        result = yield ctx.schedule_activity("greet", [name])
        return result


@workflow.defn(name="approval")
class ApprovalWorkflow:
    """An activity, a durable timer, and a signal that the timer loop waits for."""

    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.signal("approve")
    def on_approve(self, by: str) -> None:
        self.approved_by = by

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        greeting = yield ctx.schedule_activity("greet", [name])
        yield ctx.start_timer(1)
        while self.approved_by is None:
            yield ctx.start_timer(1)
        loud = yield ctx.schedule_activity("shout", [greeting])
        return f"{loud} (approved by {self.approved_by})"


WORKFLOWS = [GreeterWorkflow, ApprovalWorkflow]
ACTIVITIES = [greet, shout]
