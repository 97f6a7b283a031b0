"""assert_eventually() and replay_history() for users' and our own tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

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


def history_from_json(records: Sequence[Mapping[str, object]], run_id: str) -> list[HistoryEvent]:
    """Rebuild HistoryEvents from their JSON records (golden files)."""
    return [_event_of(record, run_id) for record in records]


def _event_of(record: Mapping[str, object], run_id: str) -> HistoryEvent:
    payload, task_id = record["payload"], record.get("workflow_task_id")
    if not isinstance(payload, Mapping):
        raise ValueError(f"history record {record.get('sequence')!r}: payload is not an object")
    return HistoryEvent.from_record(
        run_id=run_id,
        sequence=int(str(record["sequence"])),
        event_type=str(record["event_type"]),
        payload=dict(payload),
        recorded_at=datetime.fromisoformat(str(record["recorded_at"])),
        workflow_task_id=None if task_id is None else str(task_id),
    )
