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

from burrow.store.ready import Notice, ReadyTask, RunChanged

WakeKey = tuple[str, str, str]
"""(kind, namespace, queue) of a held poll, or ("change", namespace, key) of an awaited change;
kind is "workflow", "activity" or "query"."""
CHANGE = "change"


class PollWakes:
    """One event per key that held polls and awaiting calls wait on."""

    def __init__(self) -> None:
        self._events: defaultdict[WakeKey, asyncio.Event] = defaultdict(asyncio.Event)

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
                self.wake((CHANGE, notice.namespace, notice.key))

    def forget(self, key: WakeKey) -> None:
        """Drop the event of a key nobody will wait on again (an answered query)."""
        self._events.pop(key, None)

    async def wait(self, key: WakeKey, timeout: float) -> None:
        """Return when `key` is woken or after `timeout` seconds, whichever comes first."""
        event = self._events[key]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
