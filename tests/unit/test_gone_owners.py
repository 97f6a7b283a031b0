"""The worker's memory of sticky owners the broker found gone (broker invariant 4, S5c)."""

from __future__ import annotations

import pytest

from burrow.worker import gone_owners
from burrow.worker.gone_owners import GoneOwners


def test_owners_heard_gone_are_kept_for_a_while_then_left_to_staleness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(gone_owners.time, "monotonic", lambda: now[0])
    owners = GoneOwners(remember_seconds=30)
    assert owners.current() == ()

    owners.note("w2")
    now[0] += 10
    owners.note("w1")
    assert owners.current() == ("w1", "w2")

    now[0] += 25  # w2 heard 35 s ago, w1 25 s ago
    assert owners.current() == ("w1",)
    owners.note("w2")  # heard again: remembered afresh
    now[0] += 10
    assert owners.current() == ("w2",)
