"""Testing helpers: real-server fixtures (a pytest plugin) and waiting without sleeps."""

from __future__ import annotations

from burrow.testing.helpers import assert_eventually, replay_history

__all__ = ["assert_eventually", "replay_history"]
