"""Workflow authoring API: decorators plus the durable calls workflow code may make."""

from __future__ import annotations

import asyncio
import math
import numbers
import random as _random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypedDict, TypeVar, Unpack, overload

import structlog
from pydantic import ValidationError

from burrow.protocol import shapes
from burrow.workflow import context
from burrow.workflow.definition import (
    WorkflowDefinition,
    defn,
    get_definition,
    query,
    run,
    signal,
    update,
)
from burrow.workflow.sessions import WorkerSession, WorkerSessionOptions, worker_session

__all__ = [
    "MAX_DURATION_SECONDS",
    "ActivityOptions",
    "LocalActivityOptions",
    "RetryPolicy",
    "WorkerSession",
    "WorkerSessionOptions",
    "WorkflowDefinition",
    "WorkflowInfo",
    "activity",
    "continue_as_new",
    "defn",
    "get_definition",
    "get_version",
    "info",
    "is_replaying",
    "local_activity",
    "logger",
    "now",
    "query",
    "random",
    "run",
    "side_effect",
    "signal",
    "sleep",
    "update",
    "uuid4",
    "wait_condition",
    "worker_session",
]

Duration = timedelta | float | int

T = TypeVar("T")
R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")
A5 = TypeVar("A5")
A6 = TypeVar("A6")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Durable retry policy of one activity call, snapped onto the execution when scheduled.

    The default retries until the activity succeeds (issue 13 item 6): `max_attempts=None`
    (sent as `max_attempts: 0`, which also means unlimited), waiting `initial_interval` (1 s)
    after the first failure, `backoff_coefficient` (2.0) times longer after each next one, at
    most `maximum_interval` (100 s). Attempts lost to a crashed worker count like failures, so
    bound the whole execution with `schedule_to_close_timeout` or set `max_attempts`; errors
    named in `non_retryable_error_types`, or raised with `non_retryable=True`, end it at once.
    `backoff_seconds` gives explicit per-attempt delays instead (the last one repeats).
    Intervals and delays are at most 100 years (`MAX_DURATION_SECONDS`). Invalid values raise
    ValueError, a duration that is not a timedelta or a number TypeError, when the policy is built
    (issue 13 item 7, issue 25 item 1).
    """

    max_attempts: int | None = None
    initial_interval: Duration = shapes.DEFAULT_INITIAL_INTERVAL_SECONDS
    backoff_coefficient: float = shapes.DEFAULT_BACKOFF_COEFFICIENT
    maximum_interval: Duration = shapes.DEFAULT_MAXIMUM_INTERVAL_SECONDS
    non_retryable_error_types: list[str] = field(default_factory=list)
    backoff_seconds: list[float] | None = None

    def __post_init__(self) -> None:
        self.to_wire()  # refuse a bad policy where it is written, not when it is first used

    def to_wire(self) -> dict[str, Any]:
        """The DW command shape: every value spelled out, so a later default never changes it."""
        try:
            wire: dict[str, Any] = {
                "max_attempts": self.max_attempts or shapes.UNLIMITED_ATTEMPTS,
                "non_retryable_error_types": list(self.non_retryable_error_types),
                "initial_interval_seconds": _seconds(self.initial_interval, "initial_interval"),
                "backoff_coefficient": self.backoff_coefficient,
                "maximum_interval_seconds": _seconds(self.maximum_interval, "maximum_interval"),
            }
            if self.backoff_seconds is not None:
                wire["backoff_seconds"] = [
                    _seconds(b, "backoff_seconds") for b in self.backoff_seconds
                ]
            shapes.RetrySpec.model_validate(wire)
        except ValidationError as exc:
            raise ValueError(f"invalid RetryPolicy: {_reasons(exc)}") from None
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"invalid RetryPolicy: {exc}") from None
        return wire


def _reasons(exc: ValidationError) -> str:
    """The validators' own messages, without pydantic's framing."""
    return "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())


@dataclass(frozen=True, slots=True)
class WorkflowInfo:
    """Identity of the running workflow."""

    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    task_queue: str


class ActivityOptions(TypedDict, total=False):
    """The keyword options of `workflow.activity()`, spelled once for its typed overloads."""

    queue: str | None
    retry_policy: RetryPolicy | None
    start_to_close_timeout: Duration | None
    schedule_to_close_timeout: Duration | None
    schedule_to_start_timeout: Duration | None
    heartbeat_timeout: Duration | None


MAX_DURATION_SECONDS = shapes.MAX_DURATION_SECONDS
"""The longest timeout, interval, delay or sleep workflow code may ask for: 100 years."""


def _seconds(value: Duration, name: str) -> float:
    """Seconds from a timedelta or a real number (not a bool or a string: TypeError naming it)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        raise ValueError(
            f"{name} is out of range: durations are at most {MAX_DURATION_SECONDS} seconds"
            " (100 years)"
        ) from None


def _timeout_seconds(owner: str, **timeouts: Duration | None) -> dict[str, float | None]:
    """The timeouts in seconds; ValueError or TypeError naming `owner` and the option."""
    try:
        seconds = {
            name: None if value is None else _seconds(value, name)
            for name, value in timeouts.items()
        }
        shapes.check_timeouts(seconds)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{owner}: {exc}") from None
    return seconds


def _activity_timeouts(activity_type: str, **timeouts: Duration | None) -> dict[str, float | None]:
    """The timeouts in seconds; ValueError naming the call and the option when one is invalid."""
    return _timeout_seconds(f"workflow.activity({activity_type!r})", **timeouts)


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
async def activity(fn: str, /, *args: Any, **options: Unpack[ActivityOptions]) -> Any: ...
async def activity(
    fn: Callable[..., Any] | str,
    *args: Any,
    queue: str | None = None,
    retry_policy: RetryPolicy | None = None,
    start_to_close_timeout: Duration | None = None,
    schedule_to_close_timeout: Duration | None = None,
    schedule_to_start_timeout: Duration | None = None,
    heartbeat_timeout: Duration | None = None,
) -> Any:
    """Run a queued activity (A1) and return its result; raises ActivityError when it fails.

    `fn` is an `@activity.defn` function (async or plain), so type checkers match the arguments
    against its parameters and the result against its return type (up to six positional
    arguments; pass more through a dataclass), or an activity type name, whose result is `Any`.
    Options are keyword-only (ActivityOptions); the default `RetryPolicy()` retries without
    limit. Timeouts must be positive, at most 100 years (`MAX_DURATION_SECONDS`), and
    `heartbeat <= start_to_close <= schedule_to_close`, `schedule_to_start <= schedule_to_close`:
    otherwise ValueError (TypeError for a value that is not a duration), which fails the workflow
    task like any bug in workflow code (issue 13 item 7, issue 25 item 1).
    """
    from burrow.activity import get_definition as activity_definition

    instance = context.current()
    if isinstance(fn, str):
        name, result_type = fn, Any
    else:
        definition = activity_definition(fn)
        name, result_type = definition.name, definition.result_type
    timeouts = _activity_timeouts(
        name,
        start_to_close_timeout=start_to_close_timeout,
        schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=schedule_to_start_timeout,
        heartbeat_timeout=heartbeat_timeout,
    )
    future = instance.schedule_activity(
        name,
        args,
        queue=queue,
        retry_policy=(retry_policy or RetryPolicy()).to_wire(),
        timeouts=timeouts,
        result_type=result_type,
    )
    return await future


@dataclass(frozen=True, slots=True)
class LocalActivityOptions:
    """Options of `workflow.local_activity()` (A3); invalid values raise ValueError when built.

    `max_attempts` bounds the attempts (None: as `retry_policy` says; the default policy retries
    without limit, but one local execution reports at most 100 attempts, so it ends there).
    `start_to_close_timeout` bounds each attempt, `schedule_to_close_timeout` all of them with
    their backoffs, `heartbeat_timeout` the silence between two heartbeats. Timeouts must be
    positive, at most 100 years, and `heartbeat <= start_to_close <= schedule_to_close`. A local
    activity has no queue, connection or schedule-to-start timeout: it never waits for a worker.
    """

    max_attempts: int | None = None
    start_to_close_timeout: Duration | None = None
    schedule_to_close_timeout: Duration | None = None
    heartbeat_timeout: Duration | None = None
    retry_policy: RetryPolicy | None = None
    # Validated once here: a workflow usually passes the same options to every step.
    _policy: shapes.RetrySpec = field(init=False, repr=False, compare=False)
    _timeouts: dict[str, float | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(
                f"LocalActivityOptions: max_attempts must be >= 1, got {self.max_attempts}"
            )
        policy_limit = None if self.retry_policy is None else self.retry_policy.max_attempts
        if None not in (self.max_attempts, policy_limit) and self.max_attempts != policy_limit:
            raise ValueError(
                f"LocalActivityOptions: max_attempts={self.max_attempts} contradicts"
                f" retry_policy.max_attempts={policy_limit}; give it once"
            )
        timeouts = _timeout_seconds(
            "LocalActivityOptions",
            start_to_close_timeout=self.start_to_close_timeout,
            schedule_to_close_timeout=self.schedule_to_close_timeout,
            heartbeat_timeout=self.heartbeat_timeout,
        )
        wire = (self.retry_policy or RetryPolicy()).to_wire()
        if self.max_attempts is not None:
            wire["max_attempts"] = self.max_attempts
        object.__setattr__(self, "_timeouts", timeouts)
        object.__setattr__(self, "_policy", shapes.RetrySpec.model_validate(wire))

    def timeouts(self) -> dict[str, float | None]:
        """The timeouts in seconds, by their `record_local_activity` names."""
        return dict(self._timeouts)

    def retry_policy_wire(self) -> dict[str, Any]:
        """The retry policy as recorded: the engine default unless given, `max_attempts` in it."""
        return self._policy.to_json()

    def retry_policy_model(self) -> shapes.RetrySpec:
        """The recorded retry policy, validated (an immutable model: shared by every step)."""
        return self._policy


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
    fn: str, /, *args: Any, options: LocalActivityOptions | None = None
) -> Any: ...
async def local_activity(
    fn: Callable[..., Any] | str, *args: Any, options: LocalActivityOptions | None = None
) -> Any:
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
    from burrow.activity import get_definition as activity_definition

    instance = context.current()
    if isinstance(fn, str):
        name, result_type = fn, Any
    else:
        definition = activity_definition(fn)
        name, result_type = definition.name, definition.result_type
    chosen = options or LocalActivityOptions()
    future = instance.local_activity(
        name,
        args,
        retry_policy=chosen.retry_policy_model(),
        timeouts=chosen._timeouts,
        result_type=result_type,
    )
    return await future


async def sleep(duration: Duration) -> None:
    """Wait on a durable timer; `sleep(0)` only lets other workflow coroutines run (no timer).

    A negative or non-finite duration, or one over 100 years (`MAX_DURATION_SECONDS`), raises
    ValueError (issue 13 item 7, issue 25 item 5), which fails the workflow task like any bug in
    workflow code.
    """
    context.current()
    seconds = _seconds(duration, "workflow.sleep() duration")
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
    seconds = None if timeout is None else _seconds(timeout, "workflow.wait_condition() timeout")
    if seconds is not None:
        shapes.check_positive_seconds("workflow.wait_condition() timeout", seconds)
    future = instance.wait_condition(predicate)
    if seconds is None:
        await future
    else:
        await asyncio.wait_for(future, seconds)


def continue_as_new(
    *args: Any, workflow_type: str | None = None, queue: str | None = None
) -> NoReturn:
    """End this run and start a new one of the same workflow id with `args` as input."""
    from burrow.replay.instance import ContinueAsNewRequest

    context.current()
    raise ContinueAsNewRequest(args, workflow_type, queue)


def info() -> WorkflowInfo:
    """Identity of the running workflow."""
    run_context = context.current().run
    return WorkflowInfo(
        workflow_id=run_context.workflow_id,
        run_id=run_context.run_id,
        workflow_type=run_context.workflow_type,
        namespace=run_context.namespace,
        task_queue=run_context.task_queue,
    )


def is_replaying() -> bool:
    """Whether the code is re-running steps already in history."""
    return context.current().is_replaying


class _ReplayAwareLogger:
    """Logs from workflow code, silent while replaying so each line appears once."""

    def __getattr__(self, level: str) -> Callable[..., None]:
        def emit(event: str, **kw: Any) -> None:
            instance = context.current()
            if instance.is_replaying:
                return
            log = structlog.get_logger("burrow.workflow")
            getattr(log, level)(
                event,
                workflow_id=instance.run.workflow_id,
                run_id=instance.run.run_id,
                namespace=instance.run.namespace,
                **kw,
            )

        return emit


logger = _ReplayAwareLogger()
