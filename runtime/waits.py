"""What a client waits with: closed runs, timeouts and deadlines, and waits woken by run changes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from burrow.protocol import shapes
from burrow.run_watch import RunWatcher
from burrow.store.models import (
    JsonDict,
    QueryTaskInfo,
    RunInfo,
    RunStatus,
    TaskState,
    UpdateInfo,
    UpdateState,
)
from burrow.store.ready import RunOutcome

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ClosedRun:
    """How a run closed: read from Postgres, or heard in its result wake."""

    run_id: str
    status: RunStatus
    result: JsonDict | None
    failure: JsonDict | None
    continued_to_run_id: str | None

    @classmethod
    def of(cls, run: RunInfo) -> ClosedRun:
        """A run read from Postgres."""
        return cls(run.run_id, run.status, run.result, run.failure, run.continued_to_run_id)

    @classmethod
    def heard(cls, run_id: str, outcome: RunOutcome) -> ClosedRun:
        """The outcome a result wake carried."""
        return cls(
            run_id,
            RunStatus(outcome.status),
            outcome.result,
            outcome.failure,
            outcome.continued_to_run_id,
        )


def left_of(deadline: float | None) -> float | None:
    """Seconds until `deadline` (monotonic), at least 0; None without one."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def seconds_of(value: timedelta | float | None) -> float | None:
    """`value` in seconds: a timedelta converted, a number or None as it is."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def timeout_seconds(name: str, value: timedelta | float | None, default: float) -> float:
    """A wait's timeout in seconds; 0 or None take `default`.

    Raises:
        ValueError: negative, not finite, or past MAX_DURATION_SECONDS (issue 25 item 1): the
            deadline must stay a date Python and Postgres can hold.
    """
    seconds = seconds_of(value)
    if not seconds:
        return default
    return shapes.check_positive_seconds(name, float(seconds))


def id_or_new(value: str | None, *, what: str) -> str:
    """`value`, or a new random id when it is None.

    Raises:
        ValueError: `value` is empty or blank. A random id in its place would make a retried
            call a second call (ids are what makes calls idempotent).
    """
    if value is None:
        return str(uuid.uuid4())
    if not value.strip():
        raise ValueError(f"{what} {value!r} is empty or blank; pass None for a new random id")
    return value


def query_done(row: QueryTaskInfo) -> bool:
    """Whether a query has its answer (or its failure)."""
    return row.state in (TaskState.COMPLETED, TaskState.FAILED)


def update_done(row: UpdateInfo) -> bool:
    """Whether an update has its outcome."""
    return row.state in (UpdateState.COMPLETED, UpdateState.FAILED)


async def wait_for(
    runs: RunWatcher,
    key: str,
    fetch: Callable[[], Awaitable[T | None]],
    seconds: float,
    is_done: Callable[[T], bool],
) -> T | None:
    """Read until done, woken by changes of `key` (or the watcher's fallback); None on timeout."""
    deadline = time.monotonic() + seconds
    async with runs.watch(key, closes_with_run=False, bind_within=seconds) as watch:
        while True:
            row = await fetch()  # after the watch is bound: a later change wakes it
            if row is not None and is_done(row):
                return row
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await watch.wait(left)
