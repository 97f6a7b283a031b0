"""How long the repair loop sleeps after a pass (store invariant 5, issue 30)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from burrow.store.models import SweepResult
from burrow.worker.repair import SKIPPED_RETRY_SECONDS, TIMER_SLACK_SECONDS, pass_delay

NOW = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_nothing_pending_waits_an_interval() -> None:
    assert pass_delay(SweepResult(), interval=1.0, now=NOW) == 1.0


def test_sleeps_until_the_next_timer_or_schedule_fire_at_most_an_interval() -> None:
    """issue 30: an every-second schedule is fired on time, not up to a repair interval late."""
    soon = SweepResult(next_timer_at=NOW + timedelta(seconds=0.3))
    assert pass_delay(soon, interval=1.0, now=NOW) == pytest.approx(0.3 + TIMER_SLACK_SECONDS)
    later = SweepResult(next_timer_at=NOW + timedelta(seconds=30))
    assert pass_delay(later, interval=1.0, now=NOW) == 1.0


def test_work_already_due_is_taken_again_at_once_by_the_holder() -> None:
    due = SweepResult(next_timer_at=NOW - timedelta(seconds=2))
    assert pass_delay(due, interval=1.0, now=NOW) == 0.01


@pytest.mark.parametrize(("interval", "expected"), [(1.0, SKIPPED_RETRY_SECONDS), (0.2, 0.2)])
def test_a_skipped_pass_does_not_spin_on_work_the_holder_is_doing(
    interval: float, expected: float
) -> None:
    """issue 30: while one sweeper fires many due schedules, the others retry the lock a few
    times a second, not every 10 ms; a timer not yet due is still slept for exactly."""
    due = SweepResult(next_timer_at=NOW - timedelta(seconds=1), skipped=True)
    assert pass_delay(due, interval=interval, now=NOW) == expected
    soon = SweepResult(next_timer_at=NOW + timedelta(seconds=0.05), skipped=True)
    assert pass_delay(soon, interval=interval, now=NOW) == pytest.approx(0.05 + TIMER_SLACK_SECONDS)
