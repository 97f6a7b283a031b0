"""Subscribers held on run output streams, woken by this server's appends and closes.

An append or close made by another process (or by a workflow task's command) is seen at the
next probe: a held subscription rereads the stream every `PROBE_SECONDS` until its wait ends.
"""

from __future__ import annotations

import asyncio
import contextlib

PROBE_SECONDS = 0.5
"""How often a held subscription rereads its stream when no wake arrives."""


class StreamWaits:
    """One event per (run, stream) that held subscriptions wait on."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = {}

    async def wait(self, run_id: str, stream_name: str, *, timeout: float) -> None:
        """Until the stream changes here, or `timeout` (at most PROBE_SECONDS) passes."""
        event = self._events.setdefault((run_id, stream_name), asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), min(timeout, PROBE_SECONDS))

    def changed(self, run_id: str, stream_name: str) -> None:
        """Wake every subscription held on the stream."""
        event = self._events.pop((run_id, stream_name), None)
        if event is not None:
            event.set()
