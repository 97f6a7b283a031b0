"""Waiting for outcomes: a run's close, a query's answer, an update's result.

One `OutcomeWaiter` serves a process (a client, or the HTTP server's query and update routes).
It wakes the coroutines waiting on a key (a run id for `result()` and updates, a query task id
for queries) when a change of that key is heard: from the broker (`broker.run_changes`), or from
a commit of this very process (`after_commit`). A closed run's change carries its outcome as
committed, so a waiter on the close returns without reading the run back; any other waiter reads
Postgres, so for it a wake is only a hint. Lost wakes are covered by one fallback loop per
waiter: every interval it asks Postgres in a single query which of the awaited runs have closed,
however many waiters there are, and nudges query and update waiters to read again. The interval
is short while changes are not heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol, TypeVar

import structlog

from burrow.protocol import shapes
from burrow.store import Store
from burrow.store.errors import StoreError, StoreUnavailable
from burrow.store.models import (
    JsonDict,
    QueryTaskInfo,
    RunInfo,
    RunStatus,
    TaskState,
    UpdateInfo,
    UpdateState,
)
from burrow.store.ready import Change, Notice, RunChanged, RunChangeMessage, RunOutcome

log = structlog.get_logger("burrow.client")

T = TypeVar("T")
POLL_WITHOUT_WAKES_SECONDS = 0.05
MAX_KEYS_PER_POLL = 5_000


class Listener(Protocol):
    """What the waiter needs of a broker listener (`KeyListener`)."""

    @property
    def ready(self) -> bool:
        """Whether changes are flowing."""
        ...

    async def bind(self, key: str) -> bool:
        """Hear changes of `key`; False when the broker cannot be used now."""
        ...

    def unbind(self, key: str) -> None:
        """Stop hearing changes of `key`."""
        ...

    @property
    def queue_name(self) -> str | None:
        """The queue changes reach now (None until it is declared)."""
        ...

    def attach(self, key: str, queue_name: str) -> bool:
        """Hear `key` unbound, its changes sent to `queue_name`; False if that queue is gone."""
        ...


@dataclass(frozen=True, slots=True)
class ClosedRun:
    """How a run closed: read from Postgres, or heard in its change."""

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
        """The outcome a run change carried."""
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
        ValueError: negative, not finite, or past MAX_DURATION_SECONDS: the deadline must stay
            a date Python and Postgres can hold.
    """
    seconds = seconds_of(value)
    if not seconds:
        return default
    return shapes.check_positive_seconds(name, float(seconds))


def query_done(row: QueryTaskInfo) -> bool:
    """Whether a query has its answer (or its failure)."""
    return row.state in (TaskState.COMPLETED, TaskState.FAILED)


def update_done(row: UpdateInfo) -> bool:
    """Whether an update has its outcome."""
    return row.state in (UpdateState.COMPLETED, UpdateState.FAILED)


@dataclass(eq=False, slots=True)
class Watch:
    """One waiter's view of a key: `wait()` returns when something may have changed."""

    key: str
    closes_with_run: bool
    """The key is a run id whose closing ends the wait (`result()`); the fallback checks it."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: RunOutcome | None = None
    """How the run closed, when its change said so (set once, before `changed`)."""

    async def wait(self, timeout: float | None) -> None:
        """Until a change of the key is heard (or may have been missed), or `timeout` passes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.changed.wait()
        self.changed.clear()


class OutcomeWaiter:
    """Wakes waiters on keys; one per client or server.

    Args:
        store: Where the fallback poll looks.
        fallback_seconds: The fallback poll interval while changes are heard (a lost wake
            costs this).
        unheard_seconds: The interval while they are not.
        wakes_flowing: Whether the broker link is up (else `unheard_seconds` applies).
    """

    def __init__(
        self,
        store: Store,
        *,
        fallback_seconds: float,
        unheard_seconds: float = POLL_WITHOUT_WAKES_SECONDS,
        wakes_flowing: Callable[[], bool] = lambda: False,
    ) -> None:
        self.store = store
        self.fallback_seconds = fallback_seconds
        self.unheard_seconds = unheard_seconds
        self.listener: Listener | None = None
        self._wakes_flowing = wakes_flowing
        self._watches: dict[str, set[Watch]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    def attach(self, listener: Listener) -> None:
        """Hear run changes through this listener from now on."""
        self.listener = listener

    def notify_queue(self) -> str | None:
        """Where a run this client starts now may send its changes: this client's queue."""
        listener = self.listener
        return listener.queue_name if listener is not None and self._wakes_flowing() else None

    @contextlib.asynccontextmanager
    async def watch(
        self,
        key: str,
        *,
        closes_with_run: bool,
        bind_within: float | None = None,
        notify_queue: str | None = None,
    ) -> AsyncIterator[Watch]:
        """Watch a key; bound on the broker before it yields.

        So a check made inside misses nothing: a change committed after it wakes the watch.
        A bind still unanswered after `bind_within` seconds (a slow broker) is not waited for:
        the caller's own deadline comes first, and the fallback poll covers what the watch
        misses until the bind lands. `notify_queue`: the queue the run sends its changes to (its
        start named it, `notify_queue()`); while it is still this client's, the key needs no
        binding.
        """
        watch = Watch(key, closes_with_run)
        watches = self._watches.setdefault(key, set())
        first = not watches
        watches.add(watch)
        try:
            listener = self.listener
            heard_unbound = (
                first
                and listener is not None
                and notify_queue is not None
                and listener.attach(key, notify_queue)
            )
            if first and listener is not None and not heard_unbound:
                await self._bind(listener, key, bind_within)
            self._ensure_poller()
            yield watch
        finally:
            watches.discard(watch)
            if not watches and self._watches.get(key) is watches:
                del self._watches[key]
                if self.listener is not None:
                    self.listener.unbind(key)

    async def wait_for(
        self,
        key: str,
        fetch: Callable[[], Awaitable[T | None]],
        is_done: Callable[[T], bool],
        seconds: float,
    ) -> T | None:
        """Read until `is_done`, woken by changes of `key`; the last read, done or not.

        The key is watched before the first read: a change committed after it wakes the wait.
        """
        deadline = time.monotonic() + seconds
        async with self.watch(key, closes_with_run=False, bind_within=seconds) as watch:
            while True:
                row = await fetch()
                left = deadline - time.monotonic()
                if (row is not None and is_done(row)) or left <= 0:
                    return row
                await watch.wait(left)

    async def wait_closed(
        self,
        run_id: str,
        read: Callable[[], Awaitable[RunInfo]],
        *,
        deadline: float | None,
        skip_first_read: bool = False,
        notify_queue: str | None = None,
    ) -> ClosedRun | None:
        """The run once it is closed, from its change or from `read`; None at `deadline`.

        Watched before the first read, so a close committed after that read wakes the watch.
        `skip_first_read`: the run was started an instant ago by this process, so it was open
        then, and its close can only be published after it: the bound watch hears it. Should
        the close have beaten the bind (no run finishes that fast), the fallback poll finds it,
        as it finds a lost wake. `deadline` is monotonic; the run is read at least once.
        """
        async with self.watch(
            run_id,
            closes_with_run=True,
            bind_within=left_of(deadline),
            notify_queue=notify_queue,
        ) as watch:
            must_read = not (skip_first_read and self.hears_changes())
            while True:
                if watch.outcome is not None:
                    return ClosedRun.heard(run_id, watch.outcome)
                if must_read or left_of(deadline) == 0:  # never time out unread
                    run = await read()
                    if run.status != RunStatus.RUNNING:
                        return ClosedRun.of(run)
                    if left_of(deadline) == 0:
                        return None
                must_read = True
                await watch.wait(left_of(deadline))
                if watch.outcome is not None:
                    return ClosedRun.heard(run_id, watch.outcome)

    @staticmethod
    async def _bind(listener: Listener, key: str, within: float | None) -> None:
        if within is None:
            await listener.bind(key)
            return
        with contextlib.suppress(TimeoutError):  # the bind goes on; the poll covers meanwhile
            async with asyncio.timeout(within):
                await listener.bind(key)

    def changed(self, key: str, body: bytes = b"") -> None:
        """A change of `key` arrived (with its broker body, if any): wake its waiters."""
        message = RunChangeMessage.decode(body) if body else None
        closed = (
            message.outcome if message is not None and message.change is Change.CLOSED else None
        )
        self._wake(key, closed)

    def after_commit(self, notices: Iterable[Notice]) -> None:
        """Wake the waiters on what this process's own commit changed."""
        for notice in notices:
            if isinstance(notice, RunChanged):
                closed = notice.outcome if notice.change is Change.CLOSED else None
                self._wake(notice.key, closed)

    def _wake(self, key: str, outcome: RunOutcome | None) -> None:
        """Wake the waiters on `key`; `outcome`, when known, answers those waiting on a close."""
        for watch in self._watches.get(key, ()):
            if outcome is not None and watch.closes_with_run:
                watch.outcome = outcome
            watch.changed.set()

    def resync(self) -> None:
        """Changes may have been missed (a reconnect): every waiter re-checks."""
        for watches in self._watches.values():
            for watch in watches:
                watch.changed.set()

    def hears_changes(self) -> bool:
        """Whether run changes are arriving: the listener is bound and wakes flow."""
        listener = self.listener
        return listener is not None and listener.ready and self._wakes_flowing()

    def _interval(self) -> float:
        return self.fallback_seconds if self.hears_changes() else self.unheard_seconds

    def _ensure_poller(self) -> None:
        if self._poller is None and not self._closed:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        try:
            while self._watches and not self._closed:
                await asyncio.sleep(self._interval())
                await self._poll_once()
        finally:
            self._poller = None
            if self._watches and not self._closed:
                self._ensure_poller()  # a watch arrived as the loop ended

    async def _poll_once(self) -> None:
        runs: list[str] = []
        for key, watches in list(self._watches.items()):
            if any(w.closes_with_run for w in watches):
                runs.append(key)
            else:
                self._wake(key, None)  # queries and updates re-check themselves (few waiters)
        try:
            for start in range(0, len(runs), MAX_KEYS_PER_POLL):
                batch = runs[start : start + MAX_KEYS_PER_POLL]
                for run_id, outcome in (await self.store.closed_runs(batch)).items():
                    self._wake(run_id, outcome)  # waiters read only what the poll could not carry
        except StoreUnavailable as exc:
            log.debug("result_fallback_poll_unavailable", error=str(exc))
        except StoreError as exc:  # e.g. a dropped database: waiters time out, the loop goes on
            log.warning("result_fallback_poll_failed", error=str(exc))

    async def close(self) -> None:
        """Stop the fallback loop; waiters still waiting time out on their own."""
        self._closed = True
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            await asyncio.gather(poller, return_exceptions=True)
