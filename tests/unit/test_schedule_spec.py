"""Schedule spec math (issue 30): cron, intervals, time zones across DST, bounds, jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from burrow.errors import InvalidScheduleSpec
from burrow.protocol.schedules import (
    IntervalSpec,
    OverlapPolicy,
    SchedulePolicies,
    ScheduleSpec,
    fire_times_after,
    jitter_for,
    parse_duration,
    scheduled_workflow_id,
)


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def test_five_field_cron_fires_each_minute_after_the_moment() -> None:
    """issue 30: 5-field cron, strictly after the given moment, whole seconds."""
    spec = ScheduleSpec(cron_expressions=["*/15 * * * *"])
    times = fire_times_after(spec, at(2026, 1, 1, 0, 15, 0), limit=3)
    assert times == [at(2026, 1, 1, 0, 30), at(2026, 1, 1, 0, 45), at(2026, 1, 1, 1, 0)]


def test_six_field_cron_has_seconds_first() -> None:
    """issue 30: a 6-field expression's first field is the second."""
    spec = ScheduleSpec(cron_expressions=["*/20 * * * * *"])
    times = fire_times_after(spec, datetime(2026, 1, 1, 0, 0, 0, 400, tzinfo=UTC), limit=3)
    assert times == [at(2026, 1, 1, 0, 0, 20), at(2026, 1, 1, 0, 0, 40), at(2026, 1, 1, 0, 1, 0)]


def test_aliases() -> None:
    """issue 30: `@hourly`-style aliases."""
    hourly = ScheduleSpec(cron_expressions=["@hourly"])
    assert fire_times_after(hourly, at(2026, 1, 1, 0, 30), limit=2) == [
        at(2026, 1, 1, 1),
        at(2026, 1, 1, 2),
    ]
    daily = ScheduleSpec(cron_expressions=["@Daily"])
    assert fire_times_after(daily, at(2026, 1, 1, 0, 30), limit=1) == [at(2026, 1, 2)]


def test_intervals_with_offset_count_from_the_epoch() -> None:
    """issue 30: `PT30M` with offset `PT5M` fires at :05 and :35."""
    spec = ScheduleSpec(intervals=[IntervalSpec(every="PT30M", offset="PT5M")])
    assert fire_times_after(spec, at(2026, 1, 1, 0, 5), limit=3) == [
        at(2026, 1, 1, 0, 35),
        at(2026, 1, 1, 1, 5),
        at(2026, 1, 1, 1, 35),
    ]
    every_second = ScheduleSpec(intervals=[IntervalSpec(every="PT1S")])
    assert fire_times_after(every_second, at(2026, 1, 1), limit=2) == [
        at(2026, 1, 1, 0, 0, 1),
        at(2026, 1, 1, 0, 0, 2),
    ]


def test_sources_merge_without_duplicates() -> None:
    """issue 30: a time two sources share is one fire."""
    spec = ScheduleSpec(cron_expressions=["0 * * * *"], intervals=[IntervalSpec(every="PT30M")])
    assert fire_times_after(spec, at(2026, 1, 1), limit=3) == [
        at(2026, 1, 1, 0, 30),
        at(2026, 1, 1, 1),
        at(2026, 1, 1, 1, 30),
    ]


def test_spring_forward_day_fires_once_after_the_gap() -> None:
    """issue 30: 02:30 New York does not exist on 2026-03-08; that day fires at 03:00 EDT."""
    spec = ScheduleSpec(cron_expressions=["30 2 * * *"], timezone="America/New_York")
    times = fire_times_after(spec, at(2026, 3, 7, 12), limit=3)
    assert times == [
        at(2026, 3, 8, 7, 0),  # 03:00 EDT, the first instant after the gap
        at(2026, 3, 9, 6, 30),  # 02:30 EDT
        at(2026, 3, 10, 6, 30),
    ]


def test_fall_back_day_fires_a_daily_time_once_and_an_hourly_one_per_instant() -> None:
    """issue 30: 01:30 New York happens twice on 2026-11-01; a daily cron fires once."""
    daily = ScheduleSpec(cron_expressions=["30 1 * * *"], timezone="America/New_York")
    assert fire_times_after(daily, at(2026, 10, 31, 12), limit=2) == [
        at(2026, 11, 1, 5, 30),  # 01:30 EDT
        at(2026, 11, 2, 6, 30),  # 01:30 EST
    ]
    hourly = ScheduleSpec(cron_expressions=["0 * * * *"], timezone="America/New_York")
    times = fire_times_after(hourly, at(2026, 11, 1, 4, 30), limit=3)
    # 01:00 EDT, 01:00 EST, 02:00 EST: an hour apart each, real time
    assert times == [at(2026, 11, 1, 5), at(2026, 11, 1, 6), at(2026, 11, 1, 7)]
    # Resumed from the first 01:00, the second is next (no repeat, no skip).
    assert fire_times_after(hourly, times[0], limit=1) == [times[1]]


# Europe/Berlin, 2026: 02:00 CET -> 03:00 CEST on 29 March, 03:00 CEST -> 02:00 CET on
# 25 October, so 02:30 is skipped in spring and happens twice in autumn.
BERLIN_SPRING, BERLIN_AUTUMN = at(2026, 3, 28, 12), at(2026, 10, 24, 12)


def test_berlin_0230_daily_five_fields_follows_cron() -> None:
    """issue 30: a 5-field cron is cron's, with cron's documented DST handling (Debian/Vixie
    cron, which cronsim follows): a job in the skipped hour runs as soon as it is over, at
    03:00 CEST; a job in the repeated hour runs once, at its first occurrence (CEST)."""
    spec = ScheduleSpec(cron_expressions=["30 2 * * *"], timezone="Europe/Berlin")
    assert fire_times_after(spec, BERLIN_SPRING, limit=3) == [
        at(2026, 3, 29, 1, 0),  # 03:00 CEST, the first instant after the gap
        at(2026, 3, 30, 0, 30),  # 02:30 CEST
        at(2026, 3, 31, 0, 30),
    ]
    assert fire_times_after(spec, BERLIN_AUTUMN, limit=3) == [
        at(2026, 10, 25, 0, 30),  # 02:30 CEST; the 02:30 CET an hour later does not fire
        at(2026, 10, 26, 1, 30),  # 02:30 CET
        at(2026, 10, 27, 1, 30),
    ]
    # Resumed from the fall-back fire (a repair pass asks for the next after the last one):
    # the repeated 02:30 is not fired.
    assert fire_times_after(spec, at(2026, 10, 25, 0, 30), limit=1) == [at(2026, 10, 26, 1, 30)]


def test_berlin_0230_daily_six_fields_matches_the_clock_literally() -> None:
    """issue 30: a 6-field cron (seconds first, not cron's syntax) matches wall-clock time
    literally, as Temporal documents for its calendar specs: no fire on the day without 02:30,
    two fires on the day with two."""
    spec = ScheduleSpec(cron_expressions=["0 30 2 * * *"], timezone="Europe/Berlin")
    assert fire_times_after(spec, BERLIN_SPRING, limit=2) == [
        at(2026, 3, 30, 0, 30),  # 29 March has no 02:30: skipped
        at(2026, 3, 31, 0, 30),
    ]
    autumn = fire_times_after(spec, BERLIN_AUTUMN, limit=3)
    assert autumn == [
        at(2026, 10, 25, 0, 30),  # 02:30 CEST
        at(2026, 10, 25, 1, 30),  # 02:30 CET, an hour later in real time
        at(2026, 10, 26, 1, 30),
    ]
    # Each is its own fire time, so each gets its own workflow id: none fires twice.
    assert len({scheduled_workflow_id("s", moment) for moment in autumn}) == 3


def test_new_york_0230_daily_on_the_fall_back_day_is_unambiguous() -> None:
    """issue 30: New York falls back from 02:00 EDT to 01:00 EST, so 02:30 happens once that
    day (EST) for both forms; spring-forward differs as in Berlin."""
    for expression in ("30 2 * * *", "0 30 2 * * *"):
        spec = ScheduleSpec(cron_expressions=[expression], timezone="America/New_York")
        assert fire_times_after(spec, at(2026, 10, 31, 12), limit=2) == [
            at(2026, 11, 1, 7, 30),  # 02:30 EST
            at(2026, 11, 2, 7, 30),
        ]
    six = ScheduleSpec(cron_expressions=["0 30 2 * * *"], timezone="America/New_York")
    assert fire_times_after(six, at(2026, 3, 7, 12), limit=1) == [at(2026, 3, 9, 6, 30)]


def test_sub_hourly_cron_fires_on_real_time_across_both_transitions() -> None:
    """issue 30: a job more frequent than hourly is scheduled normally (cron's rule): every
    30 minutes of real time, 46 fires on Berlin's 23-hour day and 50 on its 25-hour day."""
    spec = ScheduleSpec(cron_expressions=["*/30 * * * *"], timezone="Europe/Berlin")
    # Each local day from 00:00 to 23:59, in UTC (the bounds are exclusive, inclusive).
    spring = fire_times_after(
        spec, at(2026, 3, 28, 22, 59, 59), limit=100, until=at(2026, 3, 29, 21, 59)
    )
    autumn = fire_times_after(
        spec, at(2026, 10, 24, 21, 59, 59), limit=100, until=at(2026, 10, 25, 22, 59)
    )
    for day in (spring, autumn):
        gaps = {later - earlier for earlier, later in pairwise(day)}
        assert gaps == {timedelta(minutes=30)}
    assert (len(spring), len(autumn)) == (46, 50)


def test_start_and_end_bound_the_fires() -> None:
    """issue 30: no fire before start_at or after end_at (both inclusive)."""
    spec = ScheduleSpec(
        intervals=[IntervalSpec(every="PT10S")],
        start_at=at(2026, 1, 1, 0, 1),
        end_at=at(2026, 1, 1, 0, 1, 20),
    )
    assert fire_times_after(spec, at(2026, 1, 1), limit=10) == [
        at(2026, 1, 1, 0, 1, 0),
        at(2026, 1, 1, 0, 1, 10),
        at(2026, 1, 1, 0, 1, 20),
    ]
    assert fire_times_after(spec, at(2026, 1, 1, 0, 1, 20), limit=10) == []
    until = fire_times_after(spec, at(2026, 1, 1), limit=10, until=at(2026, 1, 1, 0, 1, 5))
    assert until == [at(2026, 1, 1, 0, 1, 0)]


def test_jitter_is_deterministic_and_bounded() -> None:
    """issue 30: every process computes the same delay for a fire, within the jitter."""
    delays = {jitter_for("s", at(2026, 1, 1, 0, 0, n), 5) for n in range(60)}
    assert delays <= {timedelta(seconds=n) for n in range(6)} and len(delays) > 1
    assert jitter_for("s", at(2026, 1, 1), 5) == jitter_for("s", at(2026, 1, 1), 5)
    assert jitter_for("s", at(2026, 1, 1), 0) == timedelta(0)


def test_workflow_id_names_the_fire_time_in_utc_seconds() -> None:
    """issue 30: `<schedule id>-<fire time RFC 3339, second resolution>`."""
    moment = datetime(2026, 3, 8, 3, 0, 0, 999, tzinfo=UTC)
    assert scheduled_workflow_id("nightly", moment) == "nightly-2026-03-08T03:00:00Z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("PT1S", 1), ("PT30M", 1800), ("P1DT2H", 93600), ("P1W", 604800), ("pt5m", 300)],
)
def test_durations(text: str, seconds: int) -> None:
    """issue 30: ISO 8601 durations."""
    assert parse_duration(text, field="f").total_seconds() == seconds


@pytest.mark.parametrize("text", ["P", "PT", "P1M", "P1Y", "PT1.5S", "30m", "PT-1S", ""])
def test_bad_durations_are_refused(text: str) -> None:
    """issue 30: years, months, fractions and non-durations are refused."""
    with pytest.raises(InvalidScheduleSpec):
        parse_duration(text, field="f")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "spec"),
        ({"cron_expressions": ["* * *"]}, "spec.cron_expressions[0]"),
        ({"cron_expressions": ["61 * * * *"]}, "spec.cron_expressions[0]"),
        ({"cron_expressions": ["@sometimes"]}, "spec.cron_expressions[0]"),
        ({"cron_expressions": ["@hourly"], "timezone": "Mars/Olympus"}, "spec.timezone"),
        ({"intervals": [{"every": "PT0S"}]}, "spec.intervals.every"),
        ({"intervals": [{"every": "PT1M", "offset": "PT1M"}]}, "spec.intervals.offset"),
        (
            {"cron_expressions": ["@hourly"], "start_at": at(2026, 2, 1), "end_at": at(2026, 1, 1)},
            "spec.end_at",
        ),
    ],
)
def test_bad_specs_are_typed_errors(fields: dict[str, object], field: str) -> None:
    """issue 30: a spec that cannot work is InvalidScheduleSpec naming the field."""
    with pytest.raises(InvalidScheduleSpec) as caught:
        ScheduleSpec.model_validate(fields)
    assert caught.value.field == field


def test_policies() -> None:
    """issue 30: the overlap policies by their wire names; bad limits refused."""
    assert {p.value for p in OverlapPolicy} == {
        "skip",
        "buffer_one",
        "buffer_all",
        "cancel_other",
        "terminate_other",
        "allow_all",
    }
    for bad in ({"jitter_seconds": -1}, {"max_runs": 0}, {"catchup_window_seconds": 0}):
        with pytest.raises(InvalidScheduleSpec):
            SchedulePolicies.model_validate(bad)
