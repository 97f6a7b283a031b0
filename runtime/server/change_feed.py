"""The server's run-change wakes, fanned out to the web UI's live pages (issue 31).

The server binds its run-change listener to a run's changes (or to every change, for a list)
only while a page listens, so a server nobody watches receives nothing extra.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from burrow.broker.run_changes import KeyListener

EVERY_RUN = "#"
"""The binding key of a list's stream: every run's changes."""


@dataclass(eq=False)
class Subscription:
    """One stream's interest: a run's changes, or any (run_id None)."""

    run_id: str | None
    heard: asyncio.Event = field(default_factory=asyncio.Event)

    def hear(self, key: str | None) -> None:
        """A change of `key` (None: changes may have been missed) arrived."""
        if key is None or self.run_id is None or key == self.run_id:
            self.heard.set()

    async def wait(self, timeout: float) -> bool:
        """True when a change was heard within `timeout` seconds (and clears it)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.heard.wait()
        heard = self.heard.is_set()
        self.heard.clear()
        return heard


class ChangeFeed:
    """The server's run-change wakes, fanned out to the UI's streams."""

    def __init__(self, listener: KeyListener | None = None) -> None:
        self._listener = listener
        self._subscriptions: set[Subscription] = set()
        self._bound: Counter[str] = Counter()
        self._binds: set[asyncio.Task[bool]] = set()

    def attach(self, listener: KeyListener) -> None:
        """Bind through this listener from now on."""
        self._listener = listener

    def changed(self, key: str, body: bytes = b"") -> None:
        """The listener's callback: a run changed."""
        for subscription in list(self._subscriptions):
            subscription.hear(key)

    def resync(self) -> None:
        """The listener reconnected: every stream re-reads its mark."""
        for subscription in list(self._subscriptions):
            subscription.hear(None)

    @contextlib.contextmanager
    def subscribe(self, run_id: str | None) -> Iterator[Subscription]:
        """Hear changes of `run_id` (every run's for None) while the block runs."""
        subscription = Subscription(run_id)
        key = run_id or EVERY_RUN
        self._subscriptions.add(subscription)
        self._bound[key] += 1
        if self._bound[key] == 1 and self._listener is not None:
            bind = asyncio.get_running_loop().create_task(self._listener.bind(key))
            self._binds.add(bind)
            bind.add_done_callback(self._binds.discard)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)
            self._bound[key] -= 1
            if self._bound[key] <= 0:
                del self._bound[key]
                if self._listener is not None:
                    self._listener.unbind(key)
