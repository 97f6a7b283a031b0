"""Workflows with local activities (A3) that the acceptance tests run in real worker processes.

Activities note every execution in a file the test reads, so it can count how often each ran.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from burrow import ActivityError, App, RetryPolicy, activity, workflow
from burrow.workflow import LocalActivityOptions

TASK_QUEUE = "local-flows"
QUICK_RETRY = RetryPolicy(initial_interval=0.05, maximum_interval=0.2)


def _note(path: str, line: str) -> None:
    with Path(path).open("a") as handle:
        handle.write(line + "\n")


def notes(path: str) -> list[str]:
    """The lines activities wrote to `path` (none when it does not exist yet)."""
    file = Path(path)
    return file.read_text().splitlines() if file.exists() else []


@activity.defn
async def greet_noted(path: str, name: str) -> str:
    ctx = activity.context()
    _note(path, f"greet {name} {ctx.execution_mode} {ctx.activity_execution_id} {os.getpid()}")
    return f"hello, {name}"


@activity.defn
async def fails_twice(path: str) -> int:
    """Fails its first two attempts, then returns its attempt number."""
    ctx = activity.context()
    _note(path, f"attempt {ctx.attempt_number}")
    if ctx.attempt_number <= 2:
        raise RuntimeError(f"attempt {ctx.attempt_number} failed on purpose")
    return ctx.attempt_number


@activity.defn
def always_fails(path: str) -> None:
    """A plain function (runs in the worker's threads) that never succeeds."""
    _note(path, "failed")
    raise ValueError("never works")


@activity.defn
async def too_slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "finished"


@activity.defn
async def beating(path: str, seconds: float) -> int:
    """Runs `seconds`, heartbeating every 0.1 s, then returns how many heartbeats it sent."""
    _note(path, f"start {os.getpid()}")
    ctx = activity.context()
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sent += 1
        await ctx.aheartbeat({"beat": sent})
        await asyncio.sleep(0.1)
    _note(path, f"done {os.getpid()}")
    return sent


@activity.defn
def beating_in_thread(path: str, seconds: float) -> int:
    """`beating` as a sync activity: its heartbeats come from an executor thread."""
    _note(path, f"start {os.getpid()}")
    ctx = activity.context()
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sent += 1
        ctx.heartbeat({"beat": sent})
        time.sleep(0.1)
    _note(path, f"done {os.getpid()}")
    return sent


@activity.defn
async def beating_until_cancelled(path: str) -> str:
    """Heartbeats until its run is cancelled; notes that it saw the cancellation."""
    ctx = activity.context()
    _note(path, "start")
    try:
        while True:
            ctx.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        _note(path, f"cancelled {ctx.cancel_requested}")
        raise


@activity.defn
async def slow_noted(path: str, seconds: float) -> str:
    """Notes its start, takes its time (the worker may be killed meanwhile), notes its end."""
    _note(path, f"start {os.getpid()}")
    await asyncio.sleep(seconds)
    _note(path, f"done {os.getpid()}")
    return "slow done"


@workflow.defn
class LocalThenSignal:
    """A local activity, a signal wait and a timer, then a second local activity."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, path: str) -> list[str]:
        first = await workflow.local_activity(greet_noted, path, "first")
        await workflow.wait_condition(lambda: self.go)
        await workflow.sleep(0.2)
        second = await workflow.local_activity(greet_noted, path, "second")
        return [first, second]


@workflow.defn
class LocalRetries:
    """Retries in-process until success; a failure and a timeout reach the code as errors."""

    @workflow.run
    async def run(self, path: str) -> dict[str, object]:
        attempts = await workflow.local_activity(
            fails_twice, path, options=LocalActivityOptions(retry_policy=QUICK_RETRY)
        )
        try:
            await workflow.local_activity(
                always_fails,
                path,
                options=LocalActivityOptions(max_attempts=2, retry_policy=QUICK_RETRY),
            )
            failed = "no error"
        except ActivityError as exc:
            failed = f"{type(exc).__name__}: {exc.type}"
        try:
            await workflow.local_activity(
                too_slow,
                5.0,
                options=LocalActivityOptions(max_attempts=1, start_to_close_timeout=0.3),
            )
            timed_out = "no error"
        except ActivityError as exc:
            timed_out = type(exc).__name__
        return {"attempts": attempts, "failed": failed, "timed_out": timed_out}


@activity.defn
async def silent(seconds: float) -> str:
    """Takes its time without a single heartbeat."""
    await asyncio.sleep(seconds)
    return "finished"


@workflow.defn
class LocalTimeouts:
    """A heartbeat timeout retried then final; a schedule-to-close timeout that ends at once."""

    @workflow.run
    async def run(self) -> list[str]:
        kinds = []
        for options in (
            LocalActivityOptions(max_attempts=2, heartbeat_timeout=0.3, retry_policy=QUICK_RETRY),
            LocalActivityOptions(schedule_to_close_timeout=0.5),
        ):
            try:
                await workflow.local_activity(silent, 5.0, options=options)
            except ActivityError as exc:
                kinds.append(f"{type(exc).__name__}: {exc.message}")
        return kinds


@workflow.defn
class LocalMixed:
    """Two local activities and a queued one at once: step order must replay the same (D1)."""

    @workflow.run
    async def run(self, path: str) -> list[str]:
        results = await asyncio.gather(
            workflow.local_activity(greet_noted, path, "one"),
            workflow.activity(greet_noted, path, "queued", start_to_close_timeout=10),
            workflow.local_activity(greet_noted, path, "two"),
        )
        after = await workflow.local_activity(greet_noted, path, "after")
        return [*results, after]


@workflow.defn
class LocalLongBeating:
    """A local activity that outlives the workflow task lease, kept alive by its heartbeats."""

    @workflow.run
    async def run(self, path: str, seconds: float, in_thread: bool = False) -> int:
        options = LocalActivityOptions(heartbeat_timeout=2)
        if in_thread:
            return await workflow.local_activity(beating_in_thread, path, seconds, options=options)
        return await workflow.local_activity(beating, path, seconds, options=options)


@workflow.defn
class LocalCancellable:
    """Waits on a local activity that runs until the run is cancelled."""

    @workflow.run
    async def run(self, path: str) -> str:
        return await workflow.local_activity(beating_until_cancelled, path)


@workflow.defn
class LocalSlow:
    """One slow local activity: a worker can be killed while it runs."""

    @workflow.run
    async def run(self, path: str, seconds: float) -> str:
        return await workflow.local_activity(slow_noted, path, seconds)


app = App(
    workflows=[
        LocalThenSignal,
        LocalRetries,
        LocalMixed,
        LocalTimeouts,
        LocalLongBeating,
        LocalCancellable,
        LocalSlow,
    ],
    activities=[
        beating_in_thread,
        greet_noted,
        fails_twice,
        always_fails,
        too_slow,
        silent,
        beating,
        beating_until_cancelled,
        slow_noted,
    ],
    task_queue=TASK_QUEUE,
)
