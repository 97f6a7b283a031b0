"""A deterministic asyncio loop: FIFO ready queue, virtual time, durable timers, no real I/O.

Workflow coroutines run as ordinary asyncio tasks on this loop, so `asyncio.gather`,
`asyncio.wait_for`, `asyncio.sleep` and cancellation behave as users expect, while every source
of time is the activation's recorded timestamp and every timer is a durable command.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import math
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from burrow.errors import WorkflowSandboxError


class TimerSink(Protocol):
    """Where the loop sends timer starts and cancellations (the workflow instance)."""

    def start_timer(self, delay: float, handle: asyncio.TimerHandle) -> None:
        """A durable timer for `handle` was requested; `delay` may be NaN or infinite."""

    def cancel_timer(self, handle: asyncio.TimerHandle) -> None:
        """The timer behind `handle` is no longer wanted."""


def _timer_delay(delay: float) -> float:
    """The delay as asyncio reads it: a past one is due now; NaN and the huge are kept to refuse."""
    try:
        seconds = delay + 0.0  # TypeError for a non-number, as asyncio's own loop raises
    except OverflowError:  # an int past float's range
        return math.inf if delay > 0 else 0.0
    return 0.0 if seconds < 0 else seconds


def _forbidden(what: str) -> Callable[..., NoReturn]:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise WorkflowSandboxError(
            f"{what} inside workflow code cannot replay deterministically: move it into an"
            " activity (or workflow.side_effect for a small value)"
        )

    return refuse


class DeterministicLoop(asyncio.AbstractEventLoop):
    """The event loop one workflow instance runs on; it only advances inside `run_ready()`."""

    def __init__(self, timers: TimerSink) -> None:
        self._ready: collections.deque[asyncio.Handle] = collections.deque()
        self._timers = timers
        self._now = 0.0
        self._errors: list[BaseException] = []
        # Weak, so a dropped task is still reported by asyncio's own "never retrieved" path.
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[object], int] = (
            weakref.WeakKeyDictionary()
        )
        self._created = 0

    # -- what the instance drives ----------------------------------------------------------------

    def close_tasks(self) -> None:
        """Close the coroutine of every unfinished task, innermost `finally` first.

        For an instance let go of: its code's cleanup (a sleep cancelling its timer, say) runs
        now, while the instance it calls back into is whole, not whenever the collector gets to
        it. Whatever the cleanup raises is dropped: the instance is never used again.
        """
        for task in list(self._tasks):
            if not task.done():
                with contextlib.suppress(BaseException):
                    task.get_coro().close()

    def set_time(self, timestamp: float) -> None:
        """Advance virtual time to the activation's recorded timestamp (never backwards)."""
        self._now = max(self._now, timestamp)

    def run_ready(self) -> None:
        """Run callbacks until nothing is ready; the loop is 'running' only meanwhile."""
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        try:
            while self._ready:
                handle = self._ready.popleft()
                if not handle._cancelled:
                    handle._run()
        finally:
            asyncio.events._set_running_loop(previous)

    def fire_timer(self, handle: asyncio.TimerHandle) -> None:
        """A recorded TimerFired: schedule the handle's callback."""
        if not handle.cancelled():
            self._ready.append(handle)

    def take_errors(self) -> list[BaseException]:
        """Exceptions raised by callbacks, or by tasks dropped unawaited, since the last call."""
        errors, self._errors = self._errors, []
        return errors

    def take_unretrieved(self, *, besides: asyncio.Task[object]) -> list[BaseException]:
        """Exceptions of finished tasks other than `besides` that nobody has retrieved yet.

        In creation order; taking them marks them retrieved. A task still held (say in an
        attribute) and never awaited is not dropped, so asyncio would never report it.
        """
        tasks = sorted(self._tasks.items(), key=lambda item: item[1])
        lost = [
            task
            for task, _ in tasks
            if task is not besides and task.done() and not task.cancelled() and task._log_traceback
        ]
        return [error for task in lost if (error := task.exception()) is not None]

    # -- asyncio.AbstractEventLoop ---------------------------------------------------------------

    def time(self) -> float:
        return self._now

    def call_soon(  # type: ignore[override]  # Any-typed callbacks, as asyncio passes them
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(self, *args: object, **kwargs: object) -> asyncio.Handle:
        raise WorkflowSandboxError("threads cannot schedule work on a workflow loop")

    def call_later(  # type: ignore[override]  # Any-typed callbacks, as asyncio passes them
        self,
        delay: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        seconds = _timer_delay(delay)
        handle = asyncio.TimerHandle(self._now + seconds, callback, args, self, context)
        self._timers.start_timer(seconds, handle)
        return handle

    def call_at(  # type: ignore[override]  # Any-typed callbacks, as asyncio passes them
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_later(when - self._now, callback, *args, context=context)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        self._timers.cancel_timer(handle)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=self, name=name, context=context)
        self._created += 1
        self._tasks[task] = self._created
        return task

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return asyncio.events._get_running_loop() is self

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, object]) -> None:
        exc = context.get("exception")
        if isinstance(exc, BaseException):
            self._errors.append(exc)

    def default_exception_handler(self, context: dict[str, object]) -> None:
        self.call_exception_handler(context)

    def get_exception_handler(self) -> None:
        return None

    def get_task_factory(self) -> None:
        return None

    run_in_executor = _forbidden("run_in_executor / to_thread")  # type: ignore[assignment]
    getaddrinfo = _forbidden("DNS lookups")
    getnameinfo = _forbidden("DNS lookups")
    create_connection = _forbidden("network I/O")
    create_server = _forbidden("network I/O")
    create_datagram_endpoint = _forbidden("network I/O")
    create_unix_connection = _forbidden("network I/O")
    subprocess_exec = _forbidden("subprocesses")
    subprocess_shell = _forbidden("subprocesses")
    add_reader = _forbidden("file descriptor I/O")  # type: ignore[assignment]
    add_writer = _forbidden("file descriptor I/O")  # type: ignore[assignment]
    sock_recv = _forbidden("socket I/O")
    sock_sendall = _forbidden("socket I/O")
    sock_connect = _forbidden("socket I/O")
    add_signal_handler = _forbidden("OS signal handlers")  # type: ignore[assignment]
    run_forever = _forbidden("running the workflow loop directly")
    run_until_complete = _forbidden("running the workflow loop directly")
