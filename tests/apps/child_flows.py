"""Child workflow flows: parents, children on this queue and on another, chains, close policies."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrow import App, activity, workflow
from burrow.errors import ApplicationError, ChildWorkflowError

TASK_QUEUE = "child-flows"
OTHER_QUEUE = "child-flows-other"


@activity.defn
async def double(x: int) -> int:
    return x * 2


def _note_start(path: str) -> int:
    notes = Path(path)
    seen = notes.read_text().count("start") if notes.exists() else 0
    with notes.open("a") as out:
        out.write("start\n")
    return seen


@activity.defn
async def pause_once(path: str) -> int:
    """Notes each start; the first one waits long enough to be killed."""
    seen = await asyncio.to_thread(_note_start, path)
    if seen == 0:
        await asyncio.sleep(60)
    return seen


@workflow.defn(name="leaf")
class Leaf:
    @workflow.run
    async def run(self, x: int) -> int:
        return await workflow.activity(double, x)


@workflow.defn(name="failing-leaf")
class FailingLeaf:
    @workflow.run
    async def run(self, reason: str) -> int:
        raise ApplicationError(reason, "detail", type="LeafBroke", non_retryable=True)


@workflow.defn(name="waiting-leaf")
class WaitingLeaf:
    """Waits for `release` (or its run's cancellation), then returns what it was sent."""

    def __init__(self) -> None:
        self.released: str | None = None

    @workflow.signal
    def release(self, value: str) -> None:
        self.released = value

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released is not None)
        return self.released or ""


@workflow.defn(name="other-queue-leaf")
class OtherQueueLeaf:
    """Served only by the workers of OTHER_QUEUE."""

    @workflow.run
    async def run(self, x: int) -> int:
        return x + 1000


@workflow.defn(name="family")
class Family:
    """One child executed, two started together, one signalled, one failing."""

    @workflow.run
    async def run(self, x: int) -> dict[str, Any]:
        first = await workflow.execute_child_workflow(Leaf.run, x)
        pair = [
            await workflow.start_child_workflow(Leaf.run, x + 1),
            await workflow.start_child_workflow(Leaf.run, x + 2),
        ]
        waiting = await workflow.start_child_workflow(WaitingLeaf.run)
        await waiting.signal(WaitingLeaf.release, "go")
        both = await asyncio.gather(*pair)
        try:
            await workflow.execute_child_workflow(FailingLeaf.run, "no stock")
            failure: dict[str, Any] = {}
        except ChildWorkflowError as exc:
            cause = exc.cause
            assert isinstance(cause, ApplicationError)
            failure = {"status": exc.status, "type": cause.type, "details": list(cause.details)}
        return {
            "first": first,
            "pair": list(both),
            "released": await waiting,
            "failure": failure,
            "waiting_id": waiting.workflow_id,
        }


@workflow.defn(name="chain")
class Chain:
    """Three levels (or `depth`): each run starts the next as its child."""

    @workflow.run
    async def run(self, depth: int) -> list[str]:
        here = workflow.info().workflow_id
        if depth == 0:
            return [here]
        below = await workflow.execute_child_workflow(Chain.run, depth - 1)
        return [here, *below]


@workflow.defn(name="cross-queue-parent")
class CrossQueueParent:
    @workflow.run
    async def run(self, x: int) -> int:
        return await workflow.execute_child_workflow("other-queue-leaf", x, task_queue=OTHER_QUEUE)


@workflow.defn(name="leaving-parent")
class LeavingParent:
    """Starts a waiting child with `policy`, then closes as `how` without waiting for it."""

    @workflow.run
    async def run(self, policy: str, how: str, child_id: str) -> str:
        await workflow.start_child_workflow(
            WaitingLeaf.run,
            id=child_id,
            parent_close_policy=workflow.ParentClosePolicy(policy),
        )
        if how == "fail":
            raise ApplicationError("parent gives up", non_retryable=True)
        if how == "wait":
            await workflow.wait_condition(lambda: False)
        return "done"


@workflow.defn(name="cancelling-parent")
class CancellingParent:
    """Awaits a waiting child with `policy`; the parent's cancellation reaches it per policy."""

    @workflow.run
    async def run(self, policy: str, child_id: str) -> str:
        handle = await workflow.start_child_workflow(
            WaitingLeaf.run,
            id=child_id,
            cancellation_policy=workflow.ChildCancellationPolicy(policy),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        try:
            return await handle
        except asyncio.CancelledError:
            raise


@workflow.defn(name="duplicate-child-parent")
class DuplicateChildParent:
    """Starts two children with one id: the second fails to start, typed."""

    @workflow.run
    async def run(self, child_id: str) -> str:
        await workflow.start_child_workflow(WaitingLeaf.run, id=child_id)
        second = await workflow.start_child_workflow(WaitingLeaf.run, id=child_id)
        try:
            await second
        except ChildWorkflowError as exc:
            return type(exc).__name__
        return "started twice"


@workflow.defn(name="killed-parent")
class KilledParent:
    """Starts a child, then runs a local activity in the same workflow task before it is written."""

    @workflow.run
    async def run(self, path: str, child_id: str) -> int:
        handle = await workflow.start_child_workflow(Leaf.run, 4, id=child_id)
        await workflow.local_activity(pause_once, path)
        return await handle


app = App(
    task_queue=TASK_QUEUE,
    workflows=[
        Leaf,
        FailingLeaf,
        WaitingLeaf,
        Family,
        Chain,
        CrossQueueParent,
        LeavingParent,
        CancellingParent,
        DuplicateChildParent,
        KilledParent,
    ],
    activities=[double, pause_once],
)
other = App(task_queue=OTHER_QUEUE, workflows=[OtherQueueLeaf])
