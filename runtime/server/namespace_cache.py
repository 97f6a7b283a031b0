"""The namespaces the server serves: every namespace in the store (issue 30).

Read from the store and kept for REFRESH_SECONDS, so a request costs no query; a name not known
is looked up afresh (at most every MISS_SECONDS), so a namespace another server created is served
at once, and one deleted stops being served within REFRESH_SECONDS. This server's own creates and
deletes update it at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from fastapi import Request

from burrow.server.auth import namespace_of, requested_namespace
from burrow.server.settings import ServerSettings
from burrow.store import Store

REFRESH_SECONDS = 2.0
MISS_SECONDS = 0.25


@dataclass
class KnownNamespaces:
    """The store's namespace names as last read, and when."""

    store: Store | None = None
    names: frozenset[str] = frozenset()
    read_at: float = float("-inf")
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def load(self) -> None:
        """Read the names afresh."""
        if self.store is None:
            return
        async with self._lock:
            self.names = await self.store.namespace_names()
            self.read_at = time.monotonic()

    async def refresh_for(self, name: str) -> None:
        """Read afresh when stale, or when `name` is unknown and the last read is not recent."""
        age = time.monotonic() - self.read_at
        if age > REFRESH_SECONDS or (name not in self.names and age > MISS_SECONDS):
            await self.load()

    def add(self, name: str) -> None:
        """A namespace this server created."""
        self.names = self.names | {name}

    def discard(self, name: str) -> None:
        """A namespace this server deleted."""
        self.names = self.names - {name}

    async def served(self, request: Request, settings: ServerSettings) -> str:
        """The request's namespace; 404 `namespace_not_found` unless the store has it."""
        if self.store is None:
            return namespace_of(request, settings)
        await self.refresh_for(requested_namespace(request, settings))
        return namespace_of(request, settings, self.names)
