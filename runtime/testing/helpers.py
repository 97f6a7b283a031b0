"""assert_eventually() and replay_history() for users' and our own tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from burrow.app import App
from burrow.protocol.commands import Command
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance

T = TypeVar("T")


async def assert_eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition not met",
) -> T:
    """Await `probe()` until it returns a truthy value; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"{message} within {timeout}s (last value: {last!r})")


def replay_history(
    app: App, run: RunContext, history: Sequence[HistoryEvent], *, split_at: Sequence[int] = ()
) -> list[Command]:
    """Replay a history cold (or in slices, like a warm cache) and return the final commands.

    `split_at` lists event sequences after which the instance is resumed with only the
    following events, as a sticky cache would; the result must equal a single cold replay.
    Raises the activation's failure (e.g. NondeterminismError).
    """
    instance = WorkflowInstance(
        definition=app.workflows[run.workflow_type], run=run, known_activities=app.activities.keys()
    )
    bounds = [*sorted(split_at), max((e.sequence for e in history), default=0)]
    commands: list[Command] = []
    start = 0
    for bound in bounds:
        chunk = [e for e in history if start < e.sequence <= bound]
        activation = instance.activate(chunk)
        if activation.failure is not None:
            raise activation.failure
        commands = activation.commands
        start = bound
    return commands


def history_from_json(records: Sequence[dict[str, Any]], run_id: str) -> list[HistoryEvent]:
    """Rebuild HistoryEvents from their JSON records (golden files)."""
    from datetime import datetime

    return [
        HistoryEvent.from_record(
            run_id=run_id,
            sequence=int(r["sequence"]),
            event_type=str(r["event_type"]),
            payload=dict(r["payload"]),
            recorded_at=datetime.fromisoformat(str(r["recorded_at"])),
            workflow_task_id=r.get("workflow_task_id"),
        )
        for r in records
    ]
