"""Wakes for held long polls (PROTOCOL.md 2.5, SPEC M5).

The store reports, after commit, what its transactions made ready; a held poll on that
namespace, queue and kind wakes at once. (Run changes, which control-plane calls wait on, go to
the server's `OutcomeWaiter`.) A wake is only a hint: every held poll re-probes Postgres at
`poll_probe_seconds`, so work made ready elsewhere is still found.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Protocol

from burrow.store.ready import Notice, ReadyTask

WakeKey = tuple[str, str, str]
"""(kind, namespace, queue) of a held poll; kind is "workflow", "activity" or "query"."""


class Tap(Protocol):
    """Where wakes from other processes come from (the broker, `broker_wakes.WakeTap`)."""

    async def watch_queue(self, *, namespace: str, connection: str, queue: str, kind: str) -> None:
        """Hear the wakes of this queue from now on; never fails."""


class PollWakes:
    """One event per queue that held polls wait on.

    Wakes come from this process's own commits (`after_commit`) and, once a tap is attached,
    from the broker: `watch_queue` asks it for the wakes of a queue first.
    """

    def __init__(self) -> None:
        self._events: defaultdict[WakeKey, asyncio.Event] = defaultdict(asyncio.Event)
        self.tap: Tap | None = None

    async def watch_queue(self, *, namespace: str, connection: str, queue: str, kind: str) -> None:
        """Hear other processes' wakes for this queue too (a no-op without a tap)."""
        if self.tap is not None:
            await self.tap.watch_queue(
                namespace=namespace, connection=connection, queue=queue, kind=kind
            )

    def wake(self, key: WakeKey) -> None:
        """Wake whoever waits on `key` now (later waiters wait for the next wake)."""
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        """Wake every waiter: wakes may have been missed (a broker reconnect)."""
        events, self._events = self._events, defaultdict(asyncio.Event)
        for event in events.values():
            event.set()

    async def after_commit(self, notices: list[Notice]) -> None:
        """Store.after_commit: wake the polls waiting for what the commit made ready."""
        for notice in notices:
            if isinstance(notice, ReadyTask):
                self.wake((notice.kind, notice.namespace, notice.queue))

    def arm(self, key: WakeKey) -> asyncio.Event:
        """The event the next wake of `key` sets.

        Take it before checking for work: a wake between the check and the wait is not lost.
        """
        return self._events[key]

    async def wait(self, armed: asyncio.Event, timeout: float) -> None:
        """Return when the armed event is set or after `timeout` seconds, whichever is first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(armed.wait(), timeout)
