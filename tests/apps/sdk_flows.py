"""Workflows written with the unmodified `durable-workflow` SDK, run against `burrow server`."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from durable_workflow import activity, workflow
from durable_workflow.errors import ChildWorkflowFailed
from durable_workflow.worker_session import WorkerSessionOptions
from durable_workflow.workflow import ActivityRetryPolicy, ChildWorkflowRetryPolicy

import burrow

GPU = "gpu:l4"


@activity.defn(name="greet")
def greet(name: str) -> str:
    return f"hello, {name}"


@activity.defn(name="shout")
def shout(text: str) -> str:
    activity.context().heartbeat_sync({"progress": 1})
    return text.upper()


@activity.defn(name="upper")
async def upper(text: str) -> str:
    await activity.context().heartbeat({"progress": 1})
    return text.upper()


@activity.defn(name="flaky")
def flaky(name: str) -> str:
    """Fails on its first attempt: the server's retry policy runs it again."""
    if activity.context().info.attempt_number < 2:
        raise ConnectionError("first attempt always fails")
    return f"made it, {name}"


@activity.defn(name="doomed")
def doomed() -> str:
    raise ValueError("never works")


@activity.defn(name="whoami")
def whoami() -> str:
    """The id of the worker that runs this attempt."""
    return activity.context().info.worker_id


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


@workflow.defn(name="retrying")
class RetryingWorkflow:
    """An activity that succeeds on its second attempt."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        policy = ActivityRetryPolicy(max_attempts=3, backoff_seconds=[1])
        result = yield ctx.schedule_activity("flaky", [name], retry_policy=policy)
        return result


@workflow.defn(name="doomed")
class DoomedWorkflow:
    """An activity that never succeeds: the workflow fails with its error."""

    def run(self, ctx: Any) -> Generator[Any, Any, Any]:
        policy = ActivityRetryPolicy(max_attempts=1)
        result = yield ctx.schedule_activity("doomed", [], retry_policy=policy)
        return result


@workflow.defn(name="local-greeter")
class LocalGreeterWorkflow:
    """A local activity (inside the workflow task, heartbeating its lease), then a queued one."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        loud = yield ctx.local_activity("upper", [name])
        result = yield ctx.schedule_activity("greet", [loud])
        return result


@workflow.defn(name="counter")
class CounterWorkflow:
    """A side effect and a version marker each run, continuing as new until the count is done."""

    def run(self, ctx: Any, count: int, total: int) -> Generator[Any, Any, Any]:
        version = yield ctx.get_version("count-step", 1, 2)
        step = yield ctx.side_effect(lambda: version)
        if count + step >= total:
            return count + step
        yield ctx.continue_as_new(count + step, total)


@workflow.defn(name="sleeper")
class SleeperWorkflow:
    """Waits on a long timer: something to terminate."""

    def run(self, ctx: Any) -> Generator[Any, Any, Any]:
        yield ctx.start_timer(3600)
        return "woke"


@workflow.defn(name="session-steps")
class SessionStepsWorkflow:
    """Two steps in one worker session that needs a GPU: both run on the worker that has one."""

    def run(self, ctx: Any, session_id: str) -> Generator[Any, Any, Any]:
        session = WorkerSessionOptions(session_id=session_id, requirements=(GPU,))
        first = yield ctx.schedule_activity("whoami", [], worker_session=session)
        second = yield ctx.schedule_activity("whoami", [], worker_session=session)
        return [first, second]


@workflow.defn(name="inspectable")
class InspectableWorkflow:
    """Greets, then waits on a long timer; a query reads how far it got."""

    def __init__(self) -> None:
        self.stage = "starting"

    @workflow.query("stage")
    def current_stage(self, suffix: str) -> str:
        return f"{self.stage}{suffix}"

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        greeting = yield ctx.schedule_activity("greet", [name])
        self.stage = f"greeted ({greeting})"
        yield ctx.start_timer(3600)
        return greeting


@workflow.defn(name="cart")
class CartWorkflow:
    """Collects items through updates, ticking a timer until one checks it out.

    The result counts the ticks too: a replay that ran an update's handler anywhere but where it
    ran live would count differently.
    """

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked_out = False

    @workflow.update("add_item")
    def add_item(self, item: str) -> int:
        if not item:
            raise ValueError("an item needs a name")
        self.items.append(item)
        return len(self.items)

    @workflow.update("checkout")
    def checkout(self) -> list[str]:
        self.checked_out = True
        return list(self.items)

    @workflow.query("items")
    def contents(self) -> list[str]:
        return list(self.items)

    def run(self, ctx: Any, owner: str) -> Generator[Any, Any, Any]:
        ticks = 0
        while not self.checked_out:
            yield ctx.start_timer(1)
            ticks += 1
        receipt = yield ctx.schedule_activity("greet", [owner])
        return {"items": self.items, "receipt": receipt, "ticks": ticks}


@workflow.defn(name="guarded-cart")
class GuardedCartWorkflow:
    """A cart whose `add_item` update is validated before it is accepted (PROTOCOL.md 6.5).

    The validator reads the replayed state: an item already in the cart is refused. The run
    waits on one long timer, so nothing but updates changes its history.
    """

    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.update("add_item")
    def add_item(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @add_item.validator  # type: ignore[attr-defined, untyped-decorator]
    def check_item(self, item: str) -> None:
        if not item:
            raise ValueError("an item needs a name")
        if item in self.items:
            raise ValueError(f"{item} is in the cart already")

    def run(self, ctx: Any, owner: str) -> Generator[Any, Any, Any]:
        yield ctx.start_timer(3600)
        return list(self.items)


OTHER_QUEUE = "python-children"
"""The queue a second SDK worker process serves (`python -m tests.apps.sdk_flows`)."""


@workflow.defn(name="failing-child")
class FailingChildWorkflow:
    """A child whose only activity fails for good: the child run fails with its error."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        policy = ActivityRetryPolicy(max_attempts=1)
        result = yield ctx.schedule_activity("doomed", [], retry_policy=policy)
        return result


@workflow.defn(name="waiting-child")
class WaitingChildWorkflow:
    """A child that waits on a long timer: something for the control plane to close."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        yield ctx.start_timer(3600)
        return name


@workflow.defn(name="sdk-parent")
class SdkParentWorkflow:
    """Starts a child (`greeter` unless told) and returns what it answered.

    `queue` puts the child on another task queue; a child that fails is caught and reported.
    """

    def run(
        self, ctx: Any, value: Any, child_type: str = "greeter", queue: str | None = None
    ) -> Generator[Any, Any, Any]:
        try:
            answer = yield ctx.start_child_workflow(
                child_type, [value], task_queue=queue, parent_close_policy="terminate"
            )
        except ChildWorkflowFailed as failure:
            return {"child_failed": str(failure), "exception_class": failure.exception_class}
        return {"child_said": answer}


@workflow.defn(name="sdk-bounded-parent")
class SdkBoundedParentWorkflow:
    """Starts `child_type` with a retry policy and timeouts; reports how the child ended."""

    def run(
        self, ctx: Any, child_type: str, attempts: int, run_timeout: int
    ) -> Generator[Any, Any, Any]:
        try:
            answer = yield ctx.start_child_workflow(
                child_type,
                ["hal"],
                retry_policy=ChildWorkflowRetryPolicy(max_attempts=attempts, backoff_seconds=[1]),
                execution_timeout_seconds=60,
                run_timeout_seconds=run_timeout,
            )
        except ChildWorkflowFailed as failure:
            return {"child_failed": str(failure), "exception_class": failure.exception_class}
        return {"child_said": answer}


@workflow.defn(name="sdk-fan-out")
class SdkFanOutWorkflow:
    """Starts one child per name in one parallel group and returns their answers in order."""

    def run(self, ctx: Any, names: list[str]) -> Generator[Any, Any, Any]:
        answers = yield [ctx.start_child_workflow("greeter", [name]) for name in names]
        return list(answers)


@workflow.defn(name="sdk-mixed-group")
class SdkMixedGroupWorkflow:
    """A greeting first, then a child, an activity and a timer yielded as one mixed group."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        first = yield ctx.schedule_activity("greet", [name])
        answers = yield [
            ctx.start_child_workflow("greeter", [f"{name} jr"]),
            ctx.schedule_activity("shout", [first]),
            ctx.start_timer(1),
        ]
        return list(answers)


@workflow.defn(name="sdk-gate")
class SdkGateWorkflow:
    """`ctx.wait_condition` on signalled state: opens once `needed` bumps arrived, or times out."""

    def __init__(self) -> None:
        self.bumps = 0

    @workflow.signal("bump")
    def on_bump(self) -> None:
        self.bumps += 1

    def run(self, ctx: Any, needed: int, timeout: int) -> Generator[Any, Any, Any]:
        opened = yield ctx.wait_condition(lambda: self.bumps >= needed, key="gate", timeout=timeout)
        return {"opened": opened, "bumps": self.bumps}


@workflow.defn(name="sdk-race")
class SdkRaceWorkflow:
    """`ctx.select`: a greeting races a long timer; the loser (the timer) is cancelled."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        picked = yield ctx.select(
            {"greeting": ctx.schedule_activity("greet", [name]), "deadline": ctx.start_timer(3600)}
        )
        for loser in picked.remaining().values():
            yield loser.cancel()
        return {"winner": picked.key, "value": picked.result()}


WORKFLOWS = [
    GreeterWorkflow,
    ApprovalWorkflow,
    RetryingWorkflow,
    DoomedWorkflow,
    LocalGreeterWorkflow,
    CounterWorkflow,
    SleeperWorkflow,
    SessionStepsWorkflow,
    InspectableWorkflow,
    CartWorkflow,
    FailingChildWorkflow,
    WaitingChildWorkflow,
    SdkParentWorkflow,
    SdkFanOutWorkflow,
    SdkMixedGroupWorkflow,
    SdkBoundedParentWorkflow,
    SdkGateWorkflow,
    SdkRaceWorkflow,
]
ACTIVITIES = [greet, shout, upper, flaky, doomed, whoami]


NATIVE_QUEUE = "native-parents"
SDK_QUEUE = "python-workers"


@burrow.workflow.defn(name="native-parent-of-sdk-child")
class NativeParentOfSdkChild:
    """A Burrow workflow whose child is the SDK's `greeter`, on the SDK workers' queue."""

    @burrow.workflow.run
    async def run(self, name: str) -> str:
        answer = await burrow.workflow.execute_child_workflow("greeter", name, task_queue=SDK_QUEUE)
        return f"native parent heard: {answer}"


native_app = burrow.App(task_queue=NATIVE_QUEUE, workflows=[NativeParentOfSdkChild])
"""Served by a `burrow worker` process: `tests.apps.sdk_flows:native_app`."""


async def serve(server_url: str, token: str, queue: str) -> None:
    """An SDK worker on `queue` until the process is stopped (a second worker process)."""
    from durable_workflow import Client, Worker

    async with Client(server_url, token=token, namespace="default") as client:
        worker = Worker(
            client, task_queue=queue, workflows=WORKFLOWS, activities=ACTIVITIES, poll_timeout=2
        )
        await worker.run()


if __name__ == "__main__":
    import asyncio
    import sys

    asyncio.run(serve(sys.argv[1], sys.argv[2], sys.argv[3]))
