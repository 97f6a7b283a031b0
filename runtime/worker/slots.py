"""Execution slots of one task kind: what a claim (or an eager lease) may take at most."""

from __future__ import annotations

import asyncio


class Slots:
    """A counter of free slots that pollers can wait on; closed slots are never handed out."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.closed = False
        self._freed = asyncio.Event()

    def reserve(self, wanted: int) -> int:
        """Take up to `wanted` free slots without waiting; how many were taken (maybe 0)."""
        if self.closed:
            return 0
        taken = max(0, min(wanted, self.free))
        self.free -= taken
        return taken

    def release(self, count: int = 1) -> None:
        """Give back reserved slots."""
        self.free += count
        if count > 0:
            self._freed.set()

    def close(self) -> None:
        """Hand out no more slots (a draining worker claims nothing new)."""
        self.closed = True

    async def wait_free(self) -> None:
        """Return once a slot is free; never returns while closed."""
        while self.free <= 0 or self.closed:
            self._freed.clear()
            await self._freed.wait()
