"""The repair loop: runs the store's repair pass and pokes pollers when it changed something."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import structlog

from burrow.store import Store
from burrow.store.models import SweepResult
from burrow.supervision import LoopHealth

log = structlog.get_logger("burrow.worker")
TIMER_SLACK_SECONDS = 0.005
SKIPPED_RETRY_SECONDS = 0.25
"""How soon a sweeper that found the pass held retries for work already due (at most)."""


class RepairLoop:
    """Sweeps expired leases, due timers and activity timeouts (store invariant 5).

    What a pass makes ready reaches pollers through the store's ready notices, like any commit.
    One sweeper runs at a time per database (the store takes an advisory lock); the others skip
    the pass. A full pass runs every `interval` and on a `poke()`; when a timer, deadline or
    schedule fire falls due between them, the loop wakes then and runs only those steps
    (`Store.sweep_due`), so a due timer waits for its own step, not for every other one.
    """

    def __init__(
        self,
        *,
        store: Store,
        worker_id: str,
        interval: timedelta,
        republish_after: timedelta,
        owner_stale: timedelta,
        health: LoopHealth | None = None,
    ) -> None:
        self.store = store
        self.health = health or LoopHealth("repair_pass")
        """Each pass that ends well is recorded here (the loop's supervisor records failures)."""
        self.worker_id = worker_id
        self.interval = interval.total_seconds()
        self.republish_after = republish_after
        self.owner_stale = owner_stale
        self._wake = asyncio.Event()
        self._full_requested = True
        self._last_full = time.monotonic()

    def poke(self, *, full: bool = True) -> None:
        """Run a pass now, a full one unless `full=False`.

        Full: the broker reconnected, or close policies are pending. Otherwise (a timer was
        started, so when the next one is due must be read again) the time-driven steps will do.
        """
        self._full_requested = self._full_requested or full
        self._wake.set()

    async def run(self) -> None:
        """Sweep forever."""
        while True:
            await self.wait(await self.sweep_once())

    async def wait(self, delay: float, *, stop: asyncio.Event | None = None) -> None:
        """Sleep `delay` seconds, or less if poked (or, with `stop`, until it is set)."""
        waiters = [asyncio.ensure_future(self._wake.wait())]
        if stop is not None:
            waiters.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waiters, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        self._wake.clear()

    async def sweep_once(self) -> float:
        """One repair pass, full or due-only; returns how long to wait before the next one."""
        full = self._full_requested or self._full_remaining() <= 0
        if full:
            # Cleared first: a poke during the pass asks for another one.
            self._full_requested = False
            try:
                result = await self.store.sweep(
                    republish_after=self.republish_after, owner_stale=self.owner_stale
                )
            except BaseException:
                self._full_requested = True  # the retry after a failed pass is a full one
                raise
            # From its end: a pass longer than `interval` is not followed by another at once.
            self._last_full = time.monotonic()
        else:
            result = await self.store.sweep_due()
        self.health.succeeded(isolated=result.isolated)
        if result.isolated:
            # Each row was logged with its ids by the store; this says who held them out.
            log.warning("repair_rows_isolated", isolated=result.isolated, worker_id=self.worker_id)
        if result.changed:
            log.info(
                "repair_pass_changed",
                expired_workflow_leases=result.expired_workflow_leases,
                activity_timeouts=result.activity_timeouts,
                timers_fired=result.timers_fired,
                released_bindings=result.released_bindings,
                ended_sessions=result.ended_sessions,
                stranded_session_activities=result.stranded_session_activities,
                runs_timed_out=result.runs_timed_out,
                schedule_fires=result.schedule_fires,
                republished=result.republished,
                worker_id=self.worker_id,
            )
        elif result.republished:
            # Every pass while a backlog is older than the wake TTL: not worth an info line.
            log.debug(
                "stale_ready_republished", republished=result.republished, worker_id=self.worker_id
            )
        return pass_delay(result, interval=self._full_remaining(), now=datetime.now(UTC))

    def _full_remaining(self) -> float:
        """Seconds until the next full pass is due."""
        return self._last_full + self.interval - time.monotonic()


def pass_delay(result: SweepResult, *, interval: float, now: datetime) -> float:
    """How long to sleep after a pass: until the next timer is due, at most `interval`.

    `interval` is the time left until the next full pass.

    When another sweeper held the pass and the next timer is already due, the holder is
    repairing it: this one waits SKIPPED_RETRY_SECONDS (or `interval`, if shorter) instead of
    retrying the lock every 10 ms, which only loads the database the holder is working in (a
    long pass, such as firing many schedules, was slowed by it). Should the holder die, its
    transaction rolls back and this sweeper takes the work at its next try.
    """
    interval = max(0.0, interval)
    if result.next_timer_at is None:
        return interval
    until = (result.next_timer_at - now).total_seconds()
    if result.skipped and until <= 0:
        return min(interval, SKIPPED_RETRY_SECONDS)
    # Sleep until the next timer is due rather than a whole interval.
    return max(0.01, min(interval, until + TIMER_SLACK_SECONDS))
