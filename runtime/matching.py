"""The dedicated matching role (SPEC M4c): the repair pass in a loop, outside any worker.

Execution nodes then run with `DW_V2_MATCHING_ROLE_QUEUE_WAKE=0`: they neither re-poll on a
timer nor sweep; this process expires leases, fires timers, enforces activity timeouts, ends
orphaned sticky bindings and sessions, and re-publishes wakes for ready work that waited longer
than the wake TTL (a lost wake costs latency, never stranded work: M5, C4).

Any number may run at once: the store's pass takes a transaction-level advisory lock, so one
sweeps at a time and the others skip that pass; every repair also locks its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from datetime import timedelta

import structlog

from burrow.config import Settings
from burrow.store import Store
from burrow.store import errors as store_errors
from burrow.store.fleet import MATCHING_APPLICATION_PREFIX
from burrow.supervision import Backoff, Loops, supervise
from burrow.wake_link import WakeLink
from burrow.worker.repair import RepairLoop

log = structlog.get_logger("burrow.matching")
# A failing pass is retried at most this far apart, starting from the repair interval.
MAX_BACKOFF_SECONDS = 5.0
LOOP_NAME = "repair_pass"
# Retrying cannot fix these: the process exits with the message.
_FATAL = (store_errors.DatabaseNotReady, store_errors.CredentialsRejected)


def new_matching_id() -> str:
    """A matching process id unique per process start (names its broker connection and logs)."""
    return f"matching-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class MatchingRole:
    """Runs the repair pass until `shutdown()`, publishing what it makes ready as wakes."""

    def __init__(self, settings: Settings, *, matching_id: str | None = None) -> None:
        self.settings = settings
        self.matching_id = matching_id or new_matching_id()
        self.wakes: WakeLink | None = None
        if settings.wakes.enabled:
            self.wakes = WakeLink(settings, name=f"burrow-matching:{self.matching_id}")
        # A pass is one transaction: two connections cover it and a reconnect.
        self.store = Store.connect(
            settings.database_url,
            pool_size=2,
            max_payload_bytes=settings.max_payload_bytes,
            after_commit=None if self.wakes is None else self.wakes.publish_ready,
            # Operator metrics count live matching processes by this name (63 bytes at most).
            application_name=f"{MATCHING_APPLICATION_PREFIX}{self.matching_id}"[:63],
        )
        self.loops = Loops()
        """The supervised loop's state: last success, failures, restarts, last error."""
        self.repair = RepairLoop(
            store=self.store,
            worker_id=self.matching_id,
            health=self.loops.add(LOOP_NAME),
            interval=timedelta(seconds=settings.worker.repair_interval_seconds),
            # Ready work older than a wake's TTL has lost its wake (or never had one).
            republish_after=timedelta(seconds=settings.wakes.ttl_seconds),
            owner_stale=timedelta(seconds=settings.sticky.owner_stale_seconds),
        )
        self._stop = asyncio.Event()
        self._stopped = asyncio.Event()

    async def run(self) -> None:
        """Sweep until `shutdown()`; a failing pass is logged and retried, never fatal.

        Raises:
            ConfigurationError: The database refused the credentials.
            StoreError: The database is missing or not migrated (DatabaseNotReady).
        """
        log.info(
            "matching_started",
            matching_id=self.matching_id,
            repair_interval_seconds=self.repair.interval,
            republish_after_seconds=self.repair.republish_after.total_seconds(),
            wakes=self.wakes is not None,
        )
        if self.wakes is not None:
            await self.wakes.start()  # connects in the background; never fails
            # A reconnect may follow lost wakes: re-check durable state at once.
            self.wakes.on_reconnect(self.repair.poke)
        try:
            await self._loop()
        finally:
            await self._close()

    async def _loop(self) -> None:
        """The passes, supervised: whatever a pass raises is logged and the loop goes on."""
        interval = self.repair.interval
        await supervise(
            self._passes,
            self.repair.health,
            backoff=Backoff(first=interval, maximum=max(interval, MAX_BACKOFF_SECONDS)),
            log=log.bind(matching_id=self.matching_id),
            event="matching_pass_failed",
            fatal=_FATAL,
            wait=lambda delay: self.repair.wait(delay, stop=self._stop),
            stopped=self._stop.is_set,
        )

    async def _passes(self) -> None:
        while not self._stop.is_set():
            await self.repair.wait(await self.repair.sweep_once(), stop=self._stop)

    async def shutdown(self) -> None:
        """Stop after the pass in progress (its transaction commits or rolls back whole)."""
        self._stop.set()
        self.repair.poke()
        await self._stopped.wait()

    async def _close(self) -> None:
        if self.wakes is not None:
            await self.wakes.close()  # wakes of the last pass go out first (bounded)
        with contextlib.suppress(store_errors.StoreError):
            await self.store.close()
        log.info("matching_stopped", matching_id=self.matching_id)
        self._stopped.set()
