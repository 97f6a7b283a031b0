"""The server's repair pass in a supervised loop (store invariant 5, issue 25 item 1).

`burrow server` fires due timers, expires leases and times out activities itself, whatever
else runs, every `interval` seconds or at once when poked: a commit that leaves a closed
parent's close policies pending pokes it (asgi_app.py), so they apply without waiting a whole
interval. A pass that raises, for any reason, is logged with its traceback and the loop goes
on after a capped backoff; its state (`LoopHealth`) is what `/api/health` and the operator
metrics report. Stopping it never raises, so the app's shutdown stays clean.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import structlog

from burrow.config import Settings
from burrow.store import Store
from burrow.supervision import Backoff, LoopHealth, supervise

log = structlog.get_logger("burrow.server")
LOOP_NAME = "repair_pass"
# A failing pass is retried at most this far apart, starting from the sweep interval.
MAX_BACKOFF_SECONDS = 5.0


class Sweeper:
    """Runs the repair pass every `interval` seconds, supervised, until `stop()`."""

    def __init__(
        self, *, store: Store, settings: Settings, interval: float, health: LoopHealth
    ) -> None:
        self.store = store
        self.owner_stale = timedelta(seconds=settings.sticky.owner_stale_seconds)
        self.interval = interval
        self.health = health
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """Run the next pass now (a parent closed with close policies to apply)."""
        self._wake.set()

    def start(self) -> None:
        """Start sweeping in the background."""
        backoff = Backoff(first=self.interval, maximum=max(self.interval, MAX_BACKOFF_SECONDS))
        self._task = asyncio.create_task(
            supervise(
                self._passes, self.health, backoff=backoff, log=log, event="repair_pass_failed"
            )
        )

    async def _passes(self) -> None:
        while True:
            result = await self.store.sweep(owner_stale=self.owner_stale)
            self.health.succeeded(isolated=result.isolated)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()

    async def stop(self) -> None:
        """Cancel the loop and wait for it; an error it ended with is logged, never raised."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await self._task
            except Exception:
                log.exception("repair_loop_ended_with_error", loop=LOOP_NAME)
