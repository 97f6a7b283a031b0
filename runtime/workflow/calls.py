"""The deterministic calls workflow code makes: time, timers, randomness, versions, identity."""

from __future__ import annotations

import asyncio
import math
import random as _random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn, TypeVar

from burrow.protocol import shapes
from burrow.workflow import context
from burrow.workflow.options import Duration, to_seconds

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ParentInfo:
    """The run that started this one as its child workflow."""

    workflow_id: str
    run_id: str


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """Identity of the running workflow, and what its `WorkflowStarted` event recorded.

    `parent` is set for a child workflow; `attempt` is 1, or 2 and up for a retry of a failed
    run (workflow retry policy); the timeouts are those the run was started with and the
    deadlines the instants they end at (None: unbounded). Every value comes from history, so a
    replay and a resumed (sticky) instance see the same.
    """

    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    parent: ParentInfo | None = None
    attempt: int = 1
    execution_timeout: timedelta | None = None
    run_timeout: timedelta | None = None
    execution_deadline: datetime | None = None
    run_deadline: datetime | None = None


async def sleep(duration: Duration) -> None:
    """Wait on a durable timer; `sleep(0)` only lets other workflow coroutines run (no timer).

    A negative or non-finite duration, or one over 100 years (`MAX_DURATION_SECONDS`), raises
    ValueError (issue 13 item 7, issue 25 item 5), which fails the workflow task like any bug in
    workflow code.
    """
    context.current()
    seconds = to_seconds(duration, "workflow.sleep() duration")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"workflow.sleep() needs a finite duration >= 0, got {duration!r}")
    shapes.check_duration_seconds("workflow.sleep() duration", seconds)
    await asyncio.sleep(seconds)  # asyncio.sleep(0) yields without scheduling a timer


def now() -> datetime:
    """The workflow's deterministic clock: when the current activation's events were recorded."""
    return context.current().now


async def side_effect(fn: Callable[[], T]) -> T:
    """Run `fn` once, record its value in history, and return it on every replay.

    The value travels through the payload codec, so return plain data (str, int, float, bool,
    None, lists and str-keyed dicts of those): richer types come back in their plain form.
    """
    value: T = context.current().side_effect(fn)
    return value


def uuid4() -> uuid.UUID:
    """A replay-safe random UUID."""
    return context.current().uuid4()


def random() -> _random.Random:
    """The run's seeded `random.Random` (replay-safe)."""
    return context.current().rng


def get_version(change_id: str, min_supported: int, max_supported: int) -> int:
    """Pick a code branch for `change_id` once per run; old runs keep the old branch."""
    return context.current().get_version(change_id, min_supported, max_supported)


async def wait_condition(predicate: Callable[[], bool], *, timeout: Duration | None = None) -> None:
    """Wait until `predicate()` is true; raises TimeoutError after `timeout` (a durable timer).

    `timeout` must be positive and at most 100 years (None waits without limit): otherwise
    ValueError, raised before anything is recorded (issue 13 item 7, issue 25 item 1).
    """
    instance = context.current()
    seconds = None if timeout is None else to_seconds(timeout, "workflow.wait_condition() timeout")
    if seconds is not None:
        shapes.check_positive_seconds("workflow.wait_condition() timeout", seconds)
    future = instance.wait_condition(predicate)
    if seconds is None:
        await future
    else:
        await asyncio.wait_for(future, seconds)


def continue_as_new(
    *args: object, workflow_type: str | None = None, queue: str | None = None
) -> NoReturn:
    """End this run and start a new one of the same workflow id with `args` as input."""
    context.current()
    raise context.ContinueAsNewRequest(args, workflow_type, queue)


def info() -> WorkflowInfo:
    """Identity of the running workflow, its parent, attempt, timeouts and deadlines."""
    runtime = context.current()
    run_context = runtime.run
    started = runtime.started
    parent = None
    if started is not None and started.parent_workflow_instance_id is not None:
        parent = ParentInfo(
            workflow_id=started.parent_workflow_instance_id,
            run_id=started.parent_workflow_run_id or "",
        )
    return WorkflowInfo(
        workflow_id=run_context.workflow_id,
        run_id=run_context.run_id,
        workflow_type=run_context.workflow_type,
        namespace=run_context.namespace,
        task_queue=run_context.task_queue,
        parent=parent,
        attempt=(started.retry_attempt if started else None) or 1,
        execution_timeout=_timedelta(started.execution_timeout_seconds if started else None),
        run_timeout=_timedelta(started.run_timeout_seconds if started else None),
        execution_deadline=started.execution_deadline_at if started else None,
        run_deadline=started.run_deadline_at if started else None,
    )


def _timedelta(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def is_replaying() -> bool:
    """Whether the code is re-running steps already in history."""
    return context.current().is_replaying
