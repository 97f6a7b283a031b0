"""The last hour of a few operator figures per namespace, for the UI's charts (issue 31).

The server keeps no metric history, and the UI needs no time-series database for three small
charts: `burrow server` samples what the operator metrics already compute (backlog, oldest-ready
age, sticky hit rate; operator_metrics.snapshot) every `interval` seconds into a ring buffer per
namespace, in memory. A restart starts the charts over; several servers each chart what they
sampled. Tests sample on demand with `sample_now()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from burrow.config import Settings
from burrow.server import operator_metrics
from burrow.store import Store
from burrow.store.metrics import OperatorMetrics

log = structlog.get_logger("burrow.server")
DEFAULT_INTERVAL_SECONDS = 30.0
WINDOW = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Sample:
    """One namespace's figures at one instant (the database's `now()`)."""

    at: datetime
    backlog: int
    """Ready and due tasks of every kind."""
    oldest_ready_age_seconds: float
    """How long the oldest ready task has waited; 0 when none waits."""
    sticky_hit_rate: float
    """Sticky cache hits over the last minute, 0.0 to 1.0."""

    @classmethod
    def of(cls, metrics: OperatorMetrics) -> Sample:
        """The figures of an operator metrics document."""
        return cls(
            at=metrics.generated_at,
            backlog=metrics.backlog.runnable_tasks,
            oldest_ready_age_seconds=metrics.backlog.oldest_ready_age_seconds or 0.0,
            sticky_hit_rate=metrics.sticky_execution.hit_rate_last_minute,
        )


class Ring:
    """The newest `capacity` samples, oldest first; older ones fall off."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a ring holds at least one sample")
        self._samples: deque[Sample] = deque(maxlen=capacity)

    @property
    def capacity(self) -> int:
        """How many samples it keeps."""
        return self._samples.maxlen or 0

    def add(self, sample: Sample) -> None:
        """Keep `sample`, dropping the oldest when full."""
        self._samples.append(sample)

    def since(self, moment: datetime | None = None) -> list[Sample]:
        """The samples taken at or after `moment` (all of them without one), oldest first."""
        return [s for s in self._samples if moment is None or s.at >= moment]

    def latest(self) -> Sample | None:
        """The newest sample, if any."""
        return self._samples[-1] if self._samples else None

    def __len__(self) -> int:
        return len(self._samples)


Measure = Callable[[str], Awaitable[Sample]]


def measuring(store: Store, runtime: Settings) -> Measure:
    """Sample a namespace from the operator metrics, as the API computes them."""

    async def measure(namespace: str) -> Sample:
        return Sample.of(await operator_metrics.snapshot(store, runtime, namespace))

    return measure


class MetricsHistory:
    """A ring per namespace, filled every `interval` seconds between `start()` and `stop()`."""

    def __init__(
        self,
        *,
        measure: Measure,
        namespaces: Callable[[], Iterable[str]],
        interval: float = DEFAULT_INTERVAL_SECONDS,
        window: timedelta = WINDOW,
    ) -> None:
        if interval <= 0:
            raise ValueError("the sampling interval must be positive")
        self.measure = measure
        self.namespaces = namespaces
        self.interval = interval
        self.window = window
        # One more than the window holds, so a full hour is always drawn end to end.
        self.capacity = math.ceil(window.total_seconds() / interval) + 1
        self._rings: dict[str, Ring] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, namespace: str, sample: Sample) -> None:
        """Keep a sample of `namespace`."""
        ring = self._rings.get(namespace)
        if ring is None:
            ring = self._rings[namespace] = Ring(self.capacity)
        ring.add(sample)

    def series(self, namespace: str) -> list[Sample]:
        """The namespace's samples within the window of its newest one, oldest first."""
        ring = self._rings.get(namespace)
        latest = None if ring is None else ring.latest()
        if ring is None or latest is None:
            return []
        return ring.since(latest.at - self.window)

    async def sample_now(self) -> None:
        """Take one sample of every served namespace (one failing does not stop the others)."""
        for namespace in list(self.namespaces()):
            try:
                self.record(namespace, await self.measure(namespace))
            except Exception as exc:  # the next interval tries again; the charts show a gap
                log.warning("ui_metrics_sample_failed", namespace=namespace, error=repr(exc))

    def start(self) -> None:
        """Sample every `interval` seconds in the background, the first an interval from now.

        Not at once: a server (or a test's app) that lives less than an interval costs nothing.
        """
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sample_now()

    async def stop(self) -> None:
        """Stop sampling; never raises."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
