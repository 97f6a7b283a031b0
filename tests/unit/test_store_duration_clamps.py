"""Stored durations past the bounds are clamped, never overflowed (issue 25 item 1)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from burrow.store import activities
from burrow.store.activities import MAX_DURATION_SECONDS


@pytest.mark.parametrize(
    ("seconds", "clamped"),
    [
        (1e14, MAX_DURATION_SECONDS),
        (math.inf, MAX_DURATION_SECONDS),
        (math.nan, MAX_DURATION_SECONDS),
        (-5.0, 0.0),
        (-math.inf, 0.0),
        (30.0, 30.0),
    ],
)
def test_clamp_seconds_keeps_a_duration_within_zero_and_a_hundred_years(
    seconds: float, clamped: float
) -> None:
    """Issue 25 item 1: any stored float gives a duration a datetime can be offset by."""
    assert activities.clamp_seconds(seconds) == clamped
    assert datetime.now(UTC) + timedelta(seconds=activities.clamp_seconds(seconds))


@pytest.mark.parametrize(
    "policy",
    [
        {"initial_interval_seconds": 1e12, "maximum_interval_seconds": 1e12},
        {"initial_interval_seconds": 1.0, "maximum_interval_seconds": math.inf},
        {"backoff_seconds": [1e300]},
    ],
)
def test_backoff_of_a_policy_stored_before_the_bounds_is_at_most_a_hundred_years(
    policy: dict[str, object],
) -> None:
    """Issue 25 item 1: a retry is scheduled at most 100 years out, never past datetime's end."""
    for attempt in (1, 5, 2000):
        assert activities.backoff_seconds(policy, attempt) <= MAX_DURATION_SECONDS
