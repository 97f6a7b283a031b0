"""Schedules: when a schedule fires, what it starts, and what it does about overlaps (issue 30).

A spec is cron expressions (5 fields, 6 with seconds first, or an `@hourly`-style alias) read
in the spec's time zone (across DST: see `_cron_times`), and intervals (ISO 8601 durations
such as `PT30M`, with an `offset`) counted from the Unix epoch in UTC, bounded by `start_at` /
`end_at`. Its fire times are the
union of all of them at second resolution. `fire_times_after` is pure: the store and `describe`
use the same function, so the next fire times shown are the ones fired.

The policies follow Temporal's schedules: an overlap policy applied against the schedule's
previous run while it is still open, a catch-up window within which fires missed while nothing
ran are still fired (older ones are counted as missed, never dropped silently), a jitter that
delays each fire by a deterministic amount, and `max_runs`.

Shapes follow the Durable Workflow client (`ScheduleSpec.to_dict`, `ScheduleAction.to_dict`):
`cron_expressions`, `intervals` of `{every, offset}`, `timezone`.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import count
from typing import Any, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import BaseModel, ConfigDict, Field, model_validator

from burrow import codec
from burrow.errors import InvalidScheduleSpec

__all__ = [
    "CRON_ALIASES",
    "DEFAULT_CATCHUP_WINDOW_SECONDS",
    "EPOCH",
    "IntervalSpec",
    "OverlapPolicy",
    "ScheduleAction",
    "SchedulePolicies",
    "ScheduleSpec",
    "fire_times_after",
    "jitter_for",
    "parse_duration",
    "scheduled_workflow_id",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_CATCHUP_WINDOW_SECONDS = 365 * 24 * 3600
"""Temporal's default: a fire missed by up to a year is still taken after downtime."""
MAX_JITTER_SECONDS = 3600
SCHEDULE_ID_MAX = 128

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_DURATION = re.compile(
    r"P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)S)?)?"
)


class OverlapPolicy(StrEnum):
    """What a fire does while the schedule's previous run is still open (Temporal's names)."""

    SKIP = "skip"
    """Do not start; counted as skipped."""
    BUFFER_ONE = "buffer_one"
    """Start once the open run closes; at most one fire waits, later ones are skipped."""
    BUFFER_ALL = "buffer_all"
    """Start each, in order, as the run before it closes."""
    CANCEL_OTHER = "cancel_other"
    """Ask the open run to cancel; start once it has closed (one fire waits)."""
    TERMINATE_OTHER = "terminate_other"
    """Terminate the open run and start at once."""
    ALLOW_ALL = "allow_all"
    """Start regardless."""


def parse_duration(text: str, *, field: str) -> timedelta:
    """An ISO 8601 duration of weeks, days, hours, minutes and whole seconds (`PT30M`, `P1DT2H`).

    Years and months have no fixed length and fractions of a second are below a schedule's
    resolution: both are refused.

    Raises:
        InvalidScheduleSpec: not such a duration.
    """
    found = _DURATION.fullmatch(text.strip().upper()) if text.strip() != "P" else None
    if found is None or not any(found.groupdict().values()):
        raise InvalidScheduleSpec(
            field=field,
            reason=f"{text!r} is not an ISO 8601 duration of weeks, days, hours, minutes and"
            " whole seconds (such as PT30M or P1DT12H)",
        )
    parts = {name: int(value or 0) for name, value in found.groupdict().items()}
    return timedelta(**parts)


class IntervalSpec(BaseModel):
    """Fire every `every` (an ISO 8601 duration), shifted by `offset`, counted from the epoch."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    every: str
    offset: str | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        every, offset = self.every_seconds, self.offset_seconds
        if every < 1:
            raise InvalidScheduleSpec(field="spec.intervals.every", reason="must be at least PT1S")
        if offset >= every:
            raise InvalidScheduleSpec(
                field="spec.intervals.offset", reason="must be shorter than the interval"
            )
        return self

    @property
    def every_seconds(self) -> int:
        """The interval in whole seconds."""
        return int(parse_duration(self.every, field="spec.intervals.every").total_seconds())

    @property
    def offset_seconds(self) -> int:
        """The offset in whole seconds (0 when none)."""
        if self.offset is None:
            return 0
        return int(parse_duration(self.offset, field="spec.intervals.offset").total_seconds())


def _cron_text(expression: str) -> str:
    text = expression.strip()
    return CRON_ALIASES.get(text.lower(), text)


class ScheduleSpec(BaseModel):
    """When a schedule fires: the union of its cron expressions and intervals (issue 30)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cron_expressions: list[str] = Field(default_factory=list)
    intervals: list[IntervalSpec] = Field(default_factory=list)
    timezone: str = "UTC"
    """An IANA zone name; cron expressions are read in it (intervals are not: they are UTC)."""
    start_at: datetime | None = None
    end_at: datetime | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.cron_expressions and not self.intervals:
            raise InvalidScheduleSpec(
                field="spec", reason="give at least one cron expression or interval"
            )
        zone = self.zone
        for index, expression in enumerate(self.cron_expressions):
            text = _cron_text(expression)
            if len(text.split()) not in (5, 6):
                raise InvalidScheduleSpec(
                    field=f"spec.cron_expressions[{index}]",
                    reason=f"{expression!r} needs 5 fields, 6 with seconds first, or an alias"
                    f" ({', '.join(CRON_ALIASES)})",
                )
            try:
                next(iter(CronSim(text, datetime(2000, 1, 1, tzinfo=zone))))
            except (CronSimError, StopIteration) as exc:
                raise InvalidScheduleSpec(
                    field=f"spec.cron_expressions[{index}]", reason=f"{expression!r}: {exc}"
                ) from None
        for name in ("start_at", "end_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise InvalidScheduleSpec(field=f"spec.{name}", reason="needs a UTC offset")
        if self.start_at is not None and self.end_at is not None and self.end_at < self.start_at:
            raise InvalidScheduleSpec(field="spec.end_at", reason="is before start_at")
        return self

    @property
    def zone(self) -> ZoneInfo:
        """The spec's time zone."""
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidScheduleSpec(
                field="spec.timezone", reason=f"{self.timezone!r} is not an IANA time zone"
            ) from None


class ScheduleAction(BaseModel):
    """The workflow start a fire makes; the workflow id is `<schedule id>-<fire time>`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workflow_type: str = Field(min_length=1)
    task_queue: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=lambda: dict(codec.encode([])))
    """The encoded argument list as a run stores it (the codec's envelope); default none."""
    connection: str = "default"
    execution_timeout_seconds: float | None = Field(default=None, gt=0)
    run_timeout_seconds: float | None = Field(default=None, gt=0)


class SchedulePolicies(BaseModel):
    """Overlap, catch-up window, jitter and run limit of a schedule (issue 30)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    overlap_policy: OverlapPolicy = OverlapPolicy.SKIP
    catchup_window_seconds: int = DEFAULT_CATCHUP_WINDOW_SECONDS
    """A fire found due later than this after its time is counted as missed, not started."""
    jitter_seconds: int = 0
    """Each fire starts up to this many seconds late (deterministic per fire time)."""
    max_runs: int | None = None
    """After this many started runs the schedule fires no more; None: no limit."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.catchup_window_seconds < 1:
            raise InvalidScheduleSpec(field="catchup_window_seconds", reason="must be at least 1")
        if not 0 <= self.jitter_seconds <= MAX_JITTER_SECONDS:
            raise InvalidScheduleSpec(
                field="jitter_seconds", reason=f"must be between 0 and {MAX_JITTER_SECONDS}"
            )
        if self.max_runs is not None and self.max_runs < 1:
            raise InvalidScheduleSpec(field="max_runs", reason="must be at least 1")
        return self


def _whole_second(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def _cron_times(expression: str, after: datetime, zone: ZoneInfo) -> Iterator[datetime]:
    # cronsim walks wall-clock time in the zone. A 5-field expression at a specific time (or
    # coarser than hourly) follows cron's DST rule: a time skipped by a spring-forward fires at
    # the first instant after the gap, and one repeated by a fall-back fires once. A 6-field
    # one matches the clock literally, as Temporal's calendar specs do: a skipped time does not
    # fire that day, a repeated one fires at both instants. Sub-hourly ones follow real time.
    for moment in CronSim(_cron_text(expression), after.astimezone(zone)):
        yield moment.astimezone(UTC)


def _interval_times(interval: IntervalSpec, after: datetime) -> Iterator[datetime]:
    every, offset = interval.every_seconds, interval.offset_seconds
    since = int((after - EPOCH).total_seconds()) - offset
    for k in count(since // every + 1):
        yield EPOCH + timedelta(seconds=k * every + offset)


def fire_times_after(
    spec: ScheduleSpec, after: datetime, *, limit: int, until: datetime | None = None
) -> list[datetime]:
    """The spec's fire times strictly after `after` (UTC, whole seconds), earliest first.

    At most `limit`, none after `until` (when given) or the spec's `end_at`, none before its
    `start_at`. A time two sources share is one fire.
    """
    if limit <= 0:
        return []
    start = _whole_second(after)
    if spec.start_at is not None:
        start = max(start, _whole_second(spec.start_at) - timedelta(seconds=1))
    ends = [moment for moment in (until, spec.end_at) if moment is not None]
    end = min(ends) if ends else None
    zone = spec.zone
    sources = [_cron_times(expr, start, zone) for expr in spec.cron_expressions]
    sources += [_interval_times(interval, start) for interval in spec.intervals]
    found: list[datetime] = []
    for moment in heapq.merge(*sources):
        if end is not None and moment > end:
            break
        if found and found[-1] == moment:
            continue
        found.append(moment)
        if len(found) == limit:
            break
    return found


def jitter_for(schedule_id: str, fire_at: datetime, jitter_seconds: int) -> timedelta:
    """How late the fire at `fire_at` starts: the same for every process that computes it."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{schedule_id}|{fire_at.isoformat()}".encode()).digest()
    return timedelta(seconds=int.from_bytes(digest[:8], "big") % (jitter_seconds + 1))


def scheduled_workflow_id(schedule_id: str, fire_at: datetime) -> str:
    """The workflow id a fire starts: `<schedule id>-<fire time, RFC 3339 UTC, seconds>`."""
    return f"{schedule_id}-{_whole_second(fire_at):%Y-%m-%dT%H:%M:%SZ}"
