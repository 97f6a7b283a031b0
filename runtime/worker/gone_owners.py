"""Sticky owners the broker found gone, remembered for a while (broker invariant 4, S5c).

A sticky queue dies with its worker's connection, so a wake the broker returned unroutable comes
back to the shared queue naming that owner. Until the owner's heartbeat goes stale the store
would still hold its bound tasks for it; the workers that heard the fallback claim them at once
instead (a cold replay). An owner that was only reconnecting loses nothing but warm runs (S1).
"""

from __future__ import annotations

import time


class GoneOwners:
    """Owner ids heard as gone, each kept for `remember_seconds` (by then staleness covers it)."""

    def __init__(self, remember_seconds: float) -> None:
        self.remember_seconds = remember_seconds
        self._heard: dict[str, float] = {}

    def note(self, worker_id: str) -> None:
        """A fallback wake named `worker_id` as the owner whose queue is gone."""
        self._heard[worker_id] = time.monotonic()

    def current(self) -> tuple[str, ...]:
        """The owners heard as gone within the last `remember_seconds`, sorted."""
        if not self._heard:
            return ()
        cutoff = time.monotonic() - self.remember_seconds
        self._heard = {w: t for w, t in self._heard.items() if t > cutoff}
        return tuple(sorted(self._heard))
