"""Supervised background loops: restarted with backoff, and their state reported (issue 25).

Every background loop of `burrow server`, `burrow worker` and `burrow matching` runs under
`supervise()`. Whatever the loop raises (short of cancellation and the errors its caller names
fatal) is logged with its traceback, counted, and the loop is started again after a capped
exponential backoff: one bad pass can never stop it for good. Its `LoopHealth` says when it
last succeeded, how often it failed and restarted, and what the last error was; the server
serves it in `/api/health` and the operator metrics.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from structlog.typing import FilteringBoundLogger

from burrow.protocol.shapes import JsonObject
from burrow.store import errors as store_errors

MAX_ERROR_CHARS = 500


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class LoopHealth:
    """The state of one supervised loop, as health and operator metrics report it."""

    name: str
    restarts: int = 0
    """How often the loop was started again after it raised."""
    failures: int = 0
    consecutive_failures: int = 0
    """Failures since the loop last succeeded; above 0, the loop is failing."""
    rows_isolated: int = 0
    """Rows its repair passes isolated (store/isolation.py), for loops that sweep."""
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None
    last_error: str | None = None

    @property
    def failing(self) -> bool:
        """Whether the loop failed since it last succeeded."""
        return self.consecutive_failures > 0

    def succeeded(self, *, isolated: int = 0) -> None:
        """Record a pass that ended well (`isolated` rows held out of it)."""
        self.consecutive_failures = 0
        self.rows_isolated += isolated
        self.last_success_at = _now()

    def failed(self, exc: BaseException) -> None:
        """Record a failure."""
        self.failures += 1
        self.consecutive_failures += 1
        self.last_failure_at = _now()
        self.last_error = "".join(traceback.format_exception_only(exc)).strip()[:MAX_ERROR_CHARS]

    def report(self) -> JsonObject:
        """The JSON shape served by `/api/health` and the operator metrics."""
        return {
            "name": self.name,
            "status": "failing" if self.failing else "ok",
            "restarts": self.restarts,
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "rows_isolated": self.rows_isolated,
            "last_success_at": _iso(self.last_success_at),
            "last_failure_at": _iso(self.last_failure_at),
            "last_error": self.last_error,
        }


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


class Loops:
    """The supervised loops of one process, by name."""

    def __init__(self) -> None:
        self._loops: dict[str, LoopHealth] = {}

    def add(self, name: str) -> LoopHealth:
        """The health record of loop `name`, created on first use."""
        return self._loops.setdefault(name, LoopHealth(name))

    def __iter__(self) -> Iterator[LoopHealth]:
        return iter(self._loops.values())

    def failing(self) -> list[str]:
        """The names of the loops failing now."""
        return [loop.name for loop in self if loop.failing]

    def report(self) -> list[JsonObject]:
        """Every loop's report, by name."""
        return [loop.report() for loop in sorted(self, key=lambda loop: loop.name)]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before a failed loop starts again: doubling, capped."""

    first: float
    maximum: float
    healthy_after: float | None = None
    """A loop that ran this long before it raised had recovered: its backoff starts over."""

    def delay(self, consecutive_failures: int) -> float:
        """The wait after the n-th failure in a row."""
        exponent = min(max(consecutive_failures - 1, 0), 30)
        return float(min(self.first * 2**exponent, self.maximum))


async def supervise(
    body: Callable[[], Awaitable[None]],
    health: LoopHealth,
    *,
    backoff: Backoff,
    log: FilteringBoundLogger,
    event: str,
    outage_event: str | None = None,
    fatal: tuple[type[Exception], ...] = (),
    wait: Callable[[float], Awaitable[object]] = asyncio.sleep,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """Run `body` until it returns, starting it again each time it raises.

    A store outage (StoreUnavailable) is logged as `outage_event` without a traceback: it is
    expected, and the loop resumes once the store is back. Anything else is logged as `event`
    with its traceback. `fatal` errors end the loop (retrying cannot fix them); so does
    `stopped()` turning true while waiting to restart. Lines go to `log`, naming the loop.

    Raises:
        Exception: One of `fatal`.
    """
    log = log.bind(loop=health.name)
    clock = asyncio.get_running_loop()
    while True:
        started = clock.time()
        try:
            await body()
            return
        except fatal:
            raise
        except Exception as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A cancel that broke a statement surfaces as that statement's error: the
                # loop is being stopped, not failing, so it must end now, not back off.
                raise asyncio.CancelledError from exc
            healthy_after = backoff.healthy_after
            if healthy_after is not None and clock.time() - started >= healthy_after:
                health.consecutive_failures = 0  # it had run well: a new outage starts over
            health.failed(exc)
            delay = backoff.delay(health.consecutive_failures)
            _log_failure(log, exc, event, outage_event, health, delay)
        await wait(delay)
        if stopped():
            return
        health.restarts += 1


def _log_failure(
    log: FilteringBoundLogger,
    exc: Exception,
    event: str,
    outage_event: str | None,
    health: LoopHealth,
    delay: float,
) -> None:
    fields = {
        "error": str(exc),
        "consecutive_failures": health.consecutive_failures,
        "restart_in_seconds": delay,
    }
    if isinstance(exc, store_errors.StoreUnavailable):
        log.warning(outage_event or event, **fields)
    else:
        log.error(event, exc_info=exc, **fields)
