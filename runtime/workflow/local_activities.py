"""`workflow.local_activity()`: an activity run inside the workflow task, in this worker (A3)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from burrow.workflow import context
from burrow.workflow.activities import activity_type_of
from burrow.workflow.options import LocalActivityOptions

R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")
A6 = TypeVar("A6")

_DEFAULT_OPTIONS = LocalActivityOptions()


@overload
async def local_activity(
    fn: Callable[[], Awaitable[R]],
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1], Awaitable[R]],
    a1: A1,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2], Awaitable[R]],
    a1: A1,
    a2: A2,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4, A5], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4, A5, A6], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    a6: A6,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[], R],
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1], R],
    a1: A1,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2], R],
    a1: A1,
    a2: A2,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3], R],
    a1: A1,
    a2: A2,
    a3: A3,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4, A5], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: Callable[[A1, A2, A3, A4, A5, A6], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    a6: A6,
    /,
    *,
    options: LocalActivityOptions | None = None,
) -> R: ...


@overload
async def local_activity(
    fn: str, /, *args: object, options: LocalActivityOptions | None = None
) -> Any: ...
async def local_activity(
    fn: Callable[..., object] | str, *args: object, options: LocalActivityOptions | None = None
) -> object:
    """Run an activity inside this workflow task, in this worker's process (A3, A4).

    No activity task is queued: the worker running the workflow task calls `fn` (retrying it
    in-process with backoff as `options` allow), then the code goes on in the same task. History
    records it like a queued activity (ActivityScheduled, ActivityStarted per attempt, its
    heartbeats, ActivityRetryScheduled, then ActivityCompleted, -Failed, -TimedOut or
    -Cancelled), all marked `execution_mode=local`. Its heartbeats renew the workflow task's
    lease. It runs at least once: if the worker dies before the task is committed, the next
    worker runs it again; once committed, replay returns the recorded result and never runs it.

    Use it for short, idempotent side effects; use `activity()` for slow or remote work. `fn`
    must be registered on this worker's App. A failure raises ActivityError (ActivityTimedOut
    for timeouts); a cancellation of the run while it runs reaches it through its heartbeats and
    reaches the code as asyncio cancellation.
    """
    runtime = context.current()
    name, result_type = activity_type_of(fn)
    chosen = options or _DEFAULT_OPTIONS
    future = runtime.local_activity(
        name,
        args,
        retry_policy=chosen.retry_policy_model(),
        timeouts=chosen.timeout_map(),
        result_type=result_type,
    )
    return await future
