"""Wakes for held long polls and for callers awaiting an answer (PROTOCOL.md 2.5, SPEC M5).

The store reports, after commit, what its transactions made ready; a held poll on that
namespace, queue and kind wakes at once. Run changes (a query answered, an update completed)
wake the control-plane calls that wait on them. A wake is only a hint: every held poll re-probes
Postgres at `poll_probe_seconds`, so work made ready elsewhere is still found.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Protocol

from burrow.store.ready import Notice, ReadyTask, RunChanged

WakeKey = tuple[str, str, str]
"""(kind, namespace, queue) of a held poll, or ("change", namespace, key) of an awaited change;
kind is "workflow", "activity" or "query"."""
CHANGE = "change"


def change_key(key: str) -> WakeKey:
    """The wake key of a change to `key` (a query task id or a run id: unique across namespaces)."""
    return (CHANGE, "", key)


class Tap(Protocol):
    """Where wakes from other processes come from (the broker, `broker_wakes.WakeTap`)."""

    async def watch_queue(self, *, namespace: str, connection: str, queue: str, kind: str) -> None:
        """Hear the wakes of this queue from now on; never fails."""

    async def watch_change(self, key: str) -> None:
        """Hear the changes of `key` from now on; never fails."""

    def unwatch_change(self, key: str) -> None:
        """Stop hearing the changes of `key`."""


class PollWakes:
    """One event per key that held polls and awaiting calls wait on.

    Wakes come from this process's own commits (`after_commit`) and, once a tap is attached,
    from the broker: `watch_queue` and `watch_change` ask it for the wakes of a key first.
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

    async def watch_change(self, key: str) -> None:
        """Hear other processes' changes of `key` too (a no-op without a tap)."""
        if self.tap is not None:
            await self.tap.watch_change(key)

    def unwatch_change(self, key: str) -> None:
        """Stop hearing other processes' changes of `key`."""
        if self.tap is not None:
            self.tap.unwatch_change(key)

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
        """Store.after_commit: wake the polls and calls waiting for what the commit changed."""
        for notice in notices:
            if isinstance(notice, ReadyTask):
                self.wake((notice.kind, notice.namespace, notice.queue))
            elif isinstance(notice, RunChanged):
                self.wake(change_key(notice.key))

    def forget(self, key: WakeKey) -> None:
        """Drop the event of a key nobody will wait on again (an answered query)."""
        self._events.pop(key, None)

    def arm(self, key: WakeKey) -> asyncio.Event:
        """The event the next wake of `key` sets.

        Take it before checking for work: a wake between the check and the wait is not lost.
        """
        return self._events[key]

    async def wait(self, armed: asyncio.Event, timeout: float) -> None:
        """Return when the armed event is set or after `timeout` seconds, whichever is first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(armed.wait(), timeout)
