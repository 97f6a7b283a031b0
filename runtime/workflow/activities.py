"""`workflow.activity()`: queued activities (A1), and the body a worker session's calls share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Unpack, overload

from burrow.protocol.shapes import ActivityCancellationPolicyName, SessionSpec
from burrow.workflow import context
from burrow.workflow.options import (
    ActivityCancellationPolicy,
    ActivityOptions,
    Duration,
    RetryPolicy,
    activity_timeouts,
)

R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")
A6 = TypeVar("A6")

_DEFAULT_POLICY = RetryPolicy()
# The default is left out of history, as the catalogue reads a missing policy (PROTOCOL.md 7).
_RECORDED_POLICY: dict[ActivityCancellationPolicy, ActivityCancellationPolicyName | None] = {
    ActivityCancellationPolicy.TRY_CANCEL: None,
    ActivityCancellationPolicy.WAIT_CANCELLATION_COMPLETED: "wait_cancellation_completed",
    ActivityCancellationPolicy.ABANDON: "abandon",
}


@overload
async def activity(fn: Callable[[], Awaitable[R]], /, **options: Unpack[ActivityOptions]) -> R: ...


@overload
async def activity(
    fn: Callable[[A1], Awaitable[R]], a1: A1, /, **options: Unpack[ActivityOptions]
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2], Awaitable[R]], a1: A1, a2: A2, /, **options: Unpack[ActivityOptions]
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4, A5], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4, A5, A6], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    a6: A6,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(fn: Callable[[], R], /, **options: Unpack[ActivityOptions]) -> R: ...


@overload
async def activity(fn: Callable[[A1], R], a1: A1, /, **options: Unpack[ActivityOptions]) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2], R], a1: A1, a2: A2, /, **options: Unpack[ActivityOptions]
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3], R], a1: A1, a2: A2, a3: A3, /, **options: Unpack[ActivityOptions]
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4, A5], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(
    fn: Callable[[A1, A2, A3, A4, A5, A6], R],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    a5: A5,
    a6: A6,
    /,
    **options: Unpack[ActivityOptions],
) -> R: ...


@overload
async def activity(fn: str, /, *args: object, **options: Unpack[ActivityOptions]) -> Any: ...
async def activity(
    fn: Callable[..., object] | str,
    *args: object,
    queue: str | None = None,
    connection: str | None = None,
    retry_policy: RetryPolicy | None = None,
    start_to_close_timeout: Duration | None = None,
    schedule_to_close_timeout: Duration | None = None,
    schedule_to_start_timeout: Duration | None = None,
    heartbeat_timeout: Duration | None = None,
    cancellation_policy: ActivityCancellationPolicy = ActivityCancellationPolicy.TRY_CANCEL,
) -> object:
    """Run a queued activity (A1) and return its result; raises ActivityError when it fails.

    `fn` is an `@activity.defn` function (async or plain), so type checkers match the arguments
    against its parameters and the result against its return type (up to six positional
    arguments; pass more through a dataclass), or an activity type name, whose result is `Any`.
    Options are keyword-only (ActivityOptions); the default `RetryPolicy()` retries without
    limit. Timeouts must be positive, at most 100 years (`MAX_DURATION_SECONDS`), and
    `heartbeat <= start_to_close <= schedule_to_close`, `schedule_to_start <= schedule_to_close`:
    otherwise ValueError (TypeError for a value that is not a duration), which fails the workflow
    task like any bug in workflow code (issue 13 item 7, issue 25 item 1). `connection` sends
    the task to the workers serving that connection (M7; default: the run's).
    `cancellation_policy` says what a cancellation of the awaiting code (a cancelled task, the
    run's cancellation) does to the activity (`ActivityCancellationPolicy`; CancelledError
    propagates in every case).
    """
    return await call_activity(
        fn,
        args,
        queue=queue,
        connection=connection,
        retry_policy=retry_policy,
        start_to_close_timeout=start_to_close_timeout,
        schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=schedule_to_start_timeout,
        heartbeat_timeout=heartbeat_timeout,
        cancellation_policy=cancellation_policy,
    )


async def call_activity(
    fn: Callable[..., object] | str,
    args: tuple[object, ...],
    *,
    queue: str | None,
    retry_policy: RetryPolicy | None,
    connection: str | None = None,
    start_to_close_timeout: Duration | None,
    schedule_to_close_timeout: Duration | None,
    schedule_to_start_timeout: Duration | None,
    heartbeat_timeout: Duration | None,
    worker_session: SessionSpec | None = None,
    cancellation_policy: ActivityCancellationPolicy = ActivityCancellationPolicy.TRY_CANCEL,
) -> object:
    """Schedule one queued activity and await its result (a user payload).

    The one body behind `workflow.activity()` and `WorkerSession.activity()`; `worker_session`
    runs it in that session (W4). A cancellation of the awaiting code applies
    `cancellation_policy` before CancelledError propagates.
    """
    runtime = context.current()
    policy = ActivityCancellationPolicy(cancellation_policy)
    name, result_type = activity_type_of(fn)
    timeouts = activity_timeouts(
        name,
        start_to_close_timeout=start_to_close_timeout,
        schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=schedule_to_start_timeout,
        heartbeat_timeout=heartbeat_timeout,
    )
    future = runtime.schedule_activity(
        name,
        args,
        queue=queue,
        connection=connection,
        retry_policy=(retry_policy or _DEFAULT_POLICY).to_spec(),
        timeouts=timeouts,
        result_type=result_type,
        worker_session=worker_session,
        cancellation_policy=_RECORDED_POLICY[policy],
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if future.done() or policy is ActivityCancellationPolicy.ABANDON:
            future.cancel()  # a result that comes later reaches nobody
            raise
        wait = policy is ActivityCancellationPolicy.WAIT_CANCELLATION_COMPLETED
        runtime.cancel_activity(future, wait=wait)
        if wait:
            await asyncio.wait([future])  # its end, recorded as history, resolves the step
        else:
            future.cancel()
        raise


def activity_type_of(fn: Callable[..., object] | str) -> tuple[str, object]:
    """The activity type name and its result type hint (`Any` for a name alone)."""
    # Imported here: burrow.activity imports burrow.workflow.definition, so this package.
    from burrow.activity import get_definition

    if isinstance(fn, str):
        return fn, Any
    definition = get_definition(fn)
    return definition.name, definition.result_type
