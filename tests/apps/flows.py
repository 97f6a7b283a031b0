"""Workflows and activities that the acceptance tests run in real worker processes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from burrow import ActivityError, App, ApplicationError, activity, workflow

TASK_QUEUE = "test-flows"


def _note(path: str, line: str) -> None:
    with Path(path).open("a") as handle:
        handle.write(line + "\n")


@activity.defn
async def greet(name: str) -> str:
    return f"hello, {name}"


@activity.defn
async def flaky(marker: str) -> int:
    """Fails on its first attempt (any worker), succeeds after: retried durably."""
    ctx = activity.context()
    if ctx.attempt_number == 1:
        raise RuntimeError(f"transient failure of {marker}")
    return ctx.attempt_number


@activity.defn
async def fails_until(attempts_to_fail: int) -> int:
    """Fails its first `attempts_to_fail` attempts (any worker), then returns its attempt number."""
    attempt = activity.context().attempt_number
    if attempt <= attempts_to_fail:
        raise RuntimeError(f"attempt {attempt} failed on purpose")
    return attempt


@activity.defn
async def slow_write(path: str, seconds: float) -> str:
    """Records each execution, then takes its time (a worker may be killed meanwhile)."""
    ctx = activity.context()
    _note(path, f"start {ctx.activity_attempt_id} {os.getpid()}")
    await asyncio.sleep(seconds if ctx.attempt_number == 1 else 0)
    _note(path, f"done {ctx.activity_attempt_id} {os.getpid()}")
    return ctx.activity_execution_id


@activity.defn
def blocking_add(a: int, b: int) -> int:
    """A plain function: runs in the worker's thread pool."""
    return a + b


@workflow.defn
class OrderFlow:
    """Activities with a retry, a timer, a signal, a side effect and a version marker."""

    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.signal
    def approve(self, who: str) -> None:
        self.approved_by = who

    @workflow.query
    def approver(self) -> str | None:
        return self.approved_by

    @workflow.run
    async def run(self, name: str) -> dict[str, object]:
        token = await workflow.side_effect(lambda: os.urandom(4).hex())
        version = workflow.get_version("greet-twice", 1, 2)
        greeting = await workflow.activity(greet, name, start_to_close_timeout=10)
        attempts = await workflow.activity(
            flaky,
            name,
            start_to_close_timeout=10,
            retry_policy=workflow.RetryPolicy(max_attempts=3, initial_interval=0.1),
        )
        total = await workflow.activity(blocking_add, 2, 3, start_to_close_timeout=10)
        await workflow.sleep(0.3)
        await workflow.wait_condition(lambda: self.approved_by is not None)
        return {
            "greeting": greeting,
            "attempts": attempts,
            "total": total,
            "approved_by": self.approved_by,
            "token_len": len(token),
            "version": version,
        }


@workflow.defn
class SlowActivityFlow:
    """One slow activity that records every execution in a file."""

    @workflow.run
    async def run(self, path: str, seconds: float) -> str:
        result: str = await workflow.activity(
            slow_write,
            path,
            seconds,
            start_to_close_timeout=60,
            retry_policy=workflow.RetryPolicy(max_attempts=5, initial_interval=0.1),
        )
        return result


def _burn(seconds_of_work: int) -> int:
    """Deterministic CPU work that keeps a workflow task busy (no clock, no I/O)."""
    total = 0
    for i in range(seconds_of_work * 4_000_000):
        total = (total + i * i) % 1_000_003
    return total


@workflow.defn
class BusyDecisionFlow:
    """A workflow task that computes for a while, so a worker can be killed inside it.

    A timer wakes it: a fired timer is always observed by a workflow task of its own.
    """

    @workflow.run
    async def run(self, path: str) -> int:
        await workflow.sleep(0.05)
        checksum = _burn(2)
        await workflow.activity(slow_write, path, 0.0, start_to_close_timeout=10)
        return checksum


@workflow.defn
class BusyOnResultFlow:
    """Computes for a while on an activity's result, so a worker can be killed meanwhile.

    With the run warm, the worker that ran the activity runs this code before it records the
    result (worker/completion.py); cold, a workflow task of its own runs it after.
    """

    @workflow.run
    async def run(self, path: str) -> int:
        await workflow.activity(slow_write, path, 0.0, start_to_close_timeout=10)
        checksum = _burn(2)
        await workflow.activity(slow_write, path, 0.0, start_to_close_timeout=10)
        return checksum


@workflow.defn
class CountdownFlow:
    """Continues as new until the counter reaches zero."""

    @workflow.run
    async def run(self, remaining: int) -> str:
        await workflow.sleep(0.05)
        if remaining > 0:
            workflow.continue_as_new(remaining - 1)
        return "liftoff"


@workflow.defn
class ClockFlow:
    """Reads the wall clock in workflow code: not replay-safe."""

    @workflow.run
    async def run(self) -> float:
        time.sleep(0.01)  # noqa: ASYNC251 - the point of this flow
        return 0.0


@workflow.defn
class PersistentFlow:
    """One activity under the default RetryPolicy: retried until it succeeds (issue 13 item 6)."""

    @workflow.run
    async def run(self, attempts_to_fail: int) -> int:
        return await workflow.activity(fails_until, attempts_to_fail, start_to_close_timeout=10)


app = App(
    task_queue=TASK_QUEUE,
    workflows=[
        OrderFlow,
        SlowActivityFlow,
        BusyDecisionFlow,
        BusyOnResultFlow,
        CountdownFlow,
        ClockFlow,
        PersistentFlow,
    ],
    activities=[greet, flaky, slow_write, blocking_add, fails_until],
)


@activity.defn
async def heartbeat_until_cancelled(path: str) -> str:
    """Heartbeats progress until the workflow is cancelled (W8: via the heartbeat response)."""
    ctx = activity.context()
    start = int(ctx.heartbeat_details or 0)
    for step in range(start, 600):
        await ctx.aheartbeat(step)
        _note(path, f"beat {step}")
        await asyncio.sleep(0.05)
    return "never cancelled"


@workflow.defn
class CartFlow:
    """Updates change state durably; queries read it; cancellation is handled in code."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked_out = False

    @workflow.update
    async def add_item(self, item: str) -> int:
        if not item:
            raise ApplicationError("empty item", {"field": "item"}, type="InvalidItem")
        self.items.append(item)
        return len(self.items)

    @workflow.signal
    def checkout(self) -> None:
        self.checked_out = True

    @workflow.query
    def contents(self) -> list[str]:
        return list(self.items)

    @workflow.query
    def item(self, index: int) -> str:
        if not 0 <= index < len(self.items):
            raise ApplicationError("no such item", index, type="NoSuchItem")
        return self.items[index]

    @workflow.run
    async def run(self, path: str) -> list[str]:
        try:
            await workflow.wait_condition(lambda: self.checked_out)
        except asyncio.CancelledError:
            await workflow.activity(slow_write, path, 0.0, start_to_close_timeout=10)
            raise
        return self.items


@workflow.defn
class HeartbeatFlow:
    """A long activity that only a cancellation stops."""

    @workflow.run
    async def run(self, path: str) -> str:
        result: str = await workflow.activity(
            heartbeat_until_cancelled, path, start_to_close_timeout=60, heartbeat_timeout=5
        )
        return result


@activity.defn
async def decline_card(order_id: str, cents: int) -> str:
    """Always refused, for good: the failure carries details for the workflow to read."""
    raise ApplicationError(
        f"card declined for {order_id}",
        {"code": 51, "cents": cents},
        type="CardDeclined",
        non_retryable=True,
    )


@workflow.defn
class DeclinedFlow:
    """An activity failure the code does not catch: it fails the run."""

    @workflow.run
    async def run(self, order_id: str) -> str:
        return await workflow.activity(decline_card, order_id, 4200, start_to_close_timeout=10)


@workflow.defn
class DeclineDetailsFlow:
    """Catches the activity failure and returns what workflow code sees of it."""

    @workflow.run
    async def run(self, order_id: str) -> dict[str, object]:
        try:
            await workflow.activity(decline_card, order_id, 99, start_to_close_timeout=10)
        except ActivityError as exc:
            cause = exc.cause
            return {
                "type": exc.type,
                "details": exc.details,
                "activity_type": exc.activity_type,
                "cause_type": cause.type if isinstance(cause, ApplicationError) else None,
                "cause_details": cause.details if isinstance(cause, ApplicationError) else None,
            }
        return {}


extras = App(
    task_queue="test-extras",
    workflows=[CartFlow, HeartbeatFlow, DeclinedFlow, DeclineDetailsFlow],
    activities=[slow_write, heartbeat_until_cancelled, decline_card],
)
