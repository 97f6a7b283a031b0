"""Wakes for held long polls (PROTOCOL.md 2.5, SPEC M5).

The store reports, after commit, what its transactions made ready; a held poll on that
namespace, queue and kind wakes at once. A wake is only a hint: every held poll re-probes
Postgres at `poll_probe_seconds`, so work made ready elsewhere (another process) is still found.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

from burrow.store.ready import Notice, ReadyTask

WakeKey = tuple[str, str, str]
"""(kind, namespace, queue); kind is "workflow" or "activity"."""


class PollWakes:
    """One event per (kind, namespace, queue) that held polls wait on."""

    def __init__(self) -> None:
        self._events: defaultdict[WakeKey, asyncio.Event] = defaultdict(asyncio.Event)

    async def after_commit(self, notices: list[Notice]) -> None:
        """Store.after_commit: wake the polls waiting for what became ready."""
        for notice in notices:
            if isinstance(notice, ReadyTask):
                event = self._events.pop((notice.kind, notice.namespace, notice.queue), None)
                if event is not None:
                    event.set()

    async def wait(self, key: WakeKey, timeout: float) -> None:
        """Return when `key` is woken or after `timeout` seconds, whichever comes first."""
        event = self._events[key]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
