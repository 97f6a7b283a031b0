"""Ready routing: the one place that decides who hears about work a commit made ready.

Every committing store call reports typed ready notices after commit (`Store(after_commit=)`).
Work the completing worker leased in the same transaction (eager dispatch) is already retracted
from them. What is left goes to the broker as wakes, so any worker with a free slot claims it;
without healthy wakes, this worker pokes its own pollers for notices on its queues instead
(when they are due), so polling-only and broker-down workers still start the next step at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, datetime
from typing import Protocol

from burrow.broker.messages import TaskKind
from burrow.store.ready import Notice, ReadyTask


class WakeSink(Protocol):
    """Where wakes go: the worker's `WakeLink` (publish after commit, report health)."""

    @property
    def healthy(self) -> bool:
        """Whether wakes are flowing right now."""
        ...

    async def publish_ready(self, notices: Iterable[Notice]) -> None:
        """Publish wakes for these notices (in the background)."""
        ...


class ReadyRouter:
    """Turns ready notices into broker wakes, or local pokes when wakes are not flowing."""

    def __init__(
        self,
        *,
        namespace: str,
        queue: str,
        kinds: Collection[TaskKind],
        poke: Callable[[TaskKind], None],
        connection: str = "default",
    ) -> None:
        self.namespace = namespace
        self.connection = connection
        self.queue = queue
        self.kinds = frozenset(kinds)
        self.poke = poke
        self.wakes: WakeSink | None = None

    def attach(self, wakes: WakeSink | None) -> None:
        """Publish through this wake link from now on (None: local pokes only)."""
        self.wakes = wakes

    async def on_commit(self, notices: list[Notice]) -> None:
        """The store's after-commit hook (broker invariant 1: never inside the transaction)."""
        wakes = self.wakes
        if wakes is not None:
            await wakes.publish_ready(notices)
            if wakes.healthy:
                # The commit's own wake reaches a worker with a free slot; a local claim as well
                # would only race it for the same task.
                return
        self.poke_local(notices)

    def poke_local(self, notices: Iterable[Notice]) -> None:
        """Poke this worker's pollers for notices on its queues, each when it is due."""
        now = datetime.now(UTC)
        loop = asyncio.get_running_loop()
        for notice in notices:
            if not isinstance(notice, ReadyTask):
                continue  # a run change: only clients wait on those
            kind = TaskKind(notice.kind)
            if notice.namespace != self.namespace or notice.queue != self.queue:
                continue
            if notice.connection != self.connection:
                continue  # M7: another partition's work
            if kind not in self.kinds:
                continue
            delay = (
                0.0 if notice.available_at is None else (notice.available_at - now).total_seconds()
            )
            if delay <= 0:
                self.poke(kind)
            else:
                loop.call_later(delay, self.poke, kind)
