"""A run's history as timeline lanes, laid out for an inline SVG (issue 31).

Pure: history events in (parsed, or as stored: only their JSON payloads are read), typed lanes
of bars and marks with their geometry out; the template only draws what this module placed.
Each activity attempt is its own bar (a failed one `bar-failed`), the retry backoff after a
failed attempt a `bar-backoff` segment; timers, children and condition waits are bars; signals
and updates are point marks. What is still open runs to `now` with `bar-open`. At most
`max_lanes` lanes are drawn: the rest are counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from burrow.protocol.activity_events import NO_ATTEMPT_ID

MAX_LANES = 300
LABEL_WIDTH = 220
CHART_WIDTH = 900
LANE_HEIGHT = 22
BAR_HEIGHT = 14
AXIS_HEIGHT = 24
MIN_BAR = 2.0
TICKS = 6
LABEL_CHARS = 30


_CHILD_CLOSED = frozenset(
    {"ChildRunCompleted", "ChildRunFailed", "ChildRunCancelled", "ChildRunTerminated"}
)


class Record(Protocol):
    """A history event as the timeline reads it: a parsed HistoryEvent or a stored row."""

    @property
    def event_type(self) -> str:
        """The catalogue name."""
        ...

    @property
    def payload(self) -> Mapping[str, Any]:
        """The event's JSON (timestamps as RFC 3339 text)."""
        ...

    @property
    def recorded_at(self) -> datetime:
        """When history recorded it."""
        ...


@dataclass(frozen=True, slots=True)
class Shape:
    """One bar (or point mark) placed on the chart; `title` is its tooltip (escaped later)."""

    kind: str
    """activity, backoff, timer, child, wait, signal or update (the `data-kind`)."""
    css: str
    title: str
    start: datetime
    end: datetime
    attempt: int | None = None
    is_open: bool = False
    mark: bool = False
    x: float = 0.0
    width: float = 0.0


@dataclass(slots=True)
class Lane:
    """One row of the chart: an activity execution, a timer, a child, a wait, or the marks."""

    key: str
    label: str
    kind: str
    shapes: list[Shape] = field(default_factory=list)
    y: float = 0.0


@dataclass(frozen=True, slots=True)
class Tick:
    """A time axis tick: its x and the time from the chart's start."""

    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """The laid-out chart."""

    lanes: list[Lane]
    ticks: list[Tick]
    start: datetime
    end: datetime
    width: int
    height: int
    hidden_lanes: int
    hidden_summary: str
    label_width: int = LABEL_WIDTH
    bar_height: int = BAR_HEIGHT
    lane_height: int = LANE_HEIGHT

    @property
    def open_shapes(self) -> list[tuple[Lane, Shape]]:
        """The drawn bars still open (pending work), with their lanes."""
        return [(lane, s) for lane in self.lanes for s in lane.shapes if s.is_open and not s.mark]


def short_duration(seconds: float) -> str:
    """A compact duration for the axis and tooltips: 850 ms, 12.4 s, 3 m 05 s, 2 h 14 m."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} m"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _clip(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


@dataclass(slots=True)
class _Activity:
    """An activity execution being read: its open attempt and what comes next."""

    lane: Lane
    kind: str
    scheduled_at: datetime
    attempt_start: datetime | None = None
    attempt_number: int = 1
    backoff_from: datetime | None = None
    backoff_until: datetime | None = None
    closed: bool = False
    cursor: datetime | None = None
    """A local execution's next attempt starts here (its events share one time)."""
    ran_ms: float | None = None
    """How long the open local attempt ran (its events' `activity_attempt`)."""


@dataclass(slots=True)
class _Reader:
    """Reads events in order into lanes; open items are closed at `now` by `finish`."""

    now: datetime
    lanes: dict[str, Lane] = field(default_factory=dict)
    activities: dict[str, _Activity] = field(default_factory=dict)
    opened: dict[str, tuple[datetime, str, str]] = field(default_factory=dict)
    """Open timers, children and waits: lane key -> (start, kind, tooltip)."""

    def lane(self, key: str, label: str, kind: str) -> Lane:
        found = self.lanes.get(key)
        if found is None:
            found = self.lanes[key] = Lane(key=key, label=_clip(label), kind=kind)
        return found

    def read(self, kind: str, p: Mapping[str, Any], at: datetime) -> None:
        if kind.startswith("Activity"):
            self._activity(kind, p, at)
        elif kind == "TimerScheduled":
            lane = f"timer:{p.get('timer_id')}"
            self.lane(lane, f"timer {p.get('sequence')}", "timer")
            delay = short_duration(float(p.get("delay_seconds") or 0))
            self.opened[lane] = (at, "timer", f"timer {p.get('sequence')}: {delay}")
        elif kind in ("TimerFired", "TimerCancelled"):
            how = "fired" if kind == "TimerFired" else "cancelled"
            when = _ts(p.get("fired_at") or p.get("cancelled_at")) or at
            self._end_open(f"timer:{p.get('timer_id')}", when, "bar-timer", how)
        elif kind == "ChildWorkflowScheduled":
            lane = f"child:{p.get('sequence')}"
            self.lane(lane, f"child {p.get('child_workflow_type')}", "child")
            tip = f"child {p.get('child_workflow_type')} {p.get('child_workflow_instance_id')}"
            self.opened[lane] = (at, "child", tip)
        elif kind in _CHILD_CLOSED:
            how = str(p.get("child_status") or kind)
            when = _ts(p.get("closed_at")) or at
            self._end_open(f"child:{p.get('sequence')}", when, "bar-child", how)
        elif kind == "ConditionWaitOpened":
            lane = f"wait:{p.get('condition_wait_id')}"
            self.lane(lane, f"wait {p.get('condition_key') or p.get('sequence')}", "wait")
            self.opened[lane] = (at, "wait", f"condition wait {p.get('sequence')}")
        elif kind in ("ConditionWaitSatisfied", "ConditionWaitTimedOut"):
            how = "satisfied" if kind == "ConditionWaitSatisfied" else "timed out"
            self._end_open(f"wait:{p.get('condition_wait_id')}", at, "bar-wait", how)
        elif kind == "SignalReceived":
            self._mark("signals", "signals", "signal", at, f"signal {p.get('signal_name')}")
        elif kind == "UpdateAccepted":
            tip = f"update {p.get('update_name')} accepted"
            self._mark("updates", "updates", "update", at, tip)
        elif kind == "UpdateCompleted":
            failed = " (failed)" if p.get("message") is not None else ""
            self._mark("updates", "updates", "update", at, f"update completed{failed}")

    def _activity(self, kind: str, p: Mapping[str, Any], at: datetime) -> None:
        execution_id = str(p.get("activity_execution_id"))
        if kind == "ActivityScheduled":
            self._scheduled(execution_id, p, at)
            return
        act = self.activities.get(execution_id)
        if act is None or act.closed:
            return
        if kind == "ActivityStarted":
            self._started(act, p, at)
        elif kind == "ActivityRetryScheduled":
            self._attempt_ended(act, p, at, "failed", retry=True)
        elif kind == "ActivityCompleted":
            self._attempt_ended(act, p, _ts(p.get("finished_at")) or at, "completed")
            act.closed = True
        elif kind in ("ActivityFailed", "ActivityTimedOut", "ActivityCancelled"):
            outcome = "cancelled" if kind == "ActivityCancelled" else "failed"
            self._attempt_ended(act, p, at, outcome)
            act.closed = True

    def _scheduled(self, execution_id: str, p: Mapping[str, Any], at: datetime) -> None:
        spec = p.get("activity") or {}
        local = bool(p.get("local_activity")) or p.get("execution_mode") == "local"
        session = isinstance(spec, Mapping) and spec.get("worker_session") is not None
        kind = "local" if local else "session" if session else "queued"
        label = f"{p.get('activity_type')} #{p.get('sequence')}"
        lane = self.lane(f"activity:{execution_id}", label, "activity")
        self.activities[execution_id] = _Activity(lane, kind, at)

    def _started(self, act: _Activity, p: Mapping[str, Any], at: datetime) -> None:
        start = _ts(p.get("started_at")) or at
        if act.kind == "local" and act.cursor is not None:
            start = max(start, act.cursor)
        self._backoff(act, start)
        act.attempt_start, act.attempt_number = start, int(p.get("attempt_number") or 1)
        act.ran_ms = _ran_ms(p)

    def _backoff(self, act: _Activity, until: datetime) -> None:
        if act.backoff_from is None:
            return
        end = max(act.backoff_from, until)
        tip = f"{act.lane.label}: retry backoff {short_duration(_secs(act.backoff_from, end))}"
        act.lane.shapes.append(Shape("backoff", "bar-backoff", tip, act.backoff_from, end))
        act.backoff_from = act.backoff_until = None

    def _attempt_ended(
        self,
        act: _Activity,
        p: Mapping[str, Any],
        at: datetime,
        outcome: str,
        *,
        retry: bool = False,
    ) -> None:
        number = int(p.get("attempt_number") or 0) or act.attempt_number
        start = act.attempt_start
        if start is None:
            # No start recorded (a local attempt, or none ran): from the backoff or schedule.
            start = act.backoff_until or act.backoff_from or act.scheduled_at
            self._backoff(act, start)
        end = at
        available = _ts(p.get("retry_available_at")) if retry else None
        if available is not None:
            # A retry's event may be written after the attempt failed (recorded_at is late):
            # it failed its backoff before the next attempt became available.
            end = available - timedelta(seconds=float(p.get("retry_backoff_seconds") or 0))
        ran_ms = _ran_ms(p) or act.ran_ms
        if act.kind == "local" and ran_ms is not None:
            end = start + timedelta(milliseconds=ran_ms)
        end = max(start, end)
        if p.get("activity_attempt_id") != NO_ATTEMPT_ID or number > 0:
            failed = outcome != "completed"
            tip = f"{act.lane.label} attempt {number} ({act.kind}): {outcome}"
            tip += f" after {short_duration(_secs(start, end))}"
            if failed and p.get("message"):
                tip += f": {p.get('message')}"
            css = f"bar-{act.kind}" + (" bar-failed" if failed else "")
            act.lane.shapes.append(Shape("activity", css, tip, start, end, number))
        act.attempt_start, act.ran_ms = None, None
        act.attempt_number = number + 1
        if retry:
            act.backoff_from = end
            seconds = float(p.get("retry_backoff_seconds") or 0)
            act.backoff_until = _ts(p.get("retry_available_at")) or end + timedelta(seconds=seconds)
            if act.kind == "local":  # ran in-process: the backoff is already over
                act.cursor = act.backoff_until
                self._backoff(act, act.backoff_until)

    def _end_open(self, key: str, at: datetime, css: str, how: str) -> None:
        opened = self.opened.pop(key, None)
        lane = self.lanes.get(key)
        if opened is None or lane is None:
            return
        start, kind, tip = opened
        text = f"{tip}: {how} after {short_duration(_secs(start, at))}"
        lane.shapes.append(Shape(kind, css, text, start, max(start, at)))

    def _mark(self, key: str, label: str, kind: str, at: datetime, tip: str) -> None:
        lane = self.lane(key, label, kind)
        lane.shapes.append(Shape(kind, f"mark-{kind}", tip, at, at, mark=True))

    def finish(self) -> None:
        """Close what is still open at `now`, as open bars."""
        now = self.now
        for act in self.activities.values():
            if not act.closed:
                self._finish_activity(act, now)
        for key, (start, kind, tip) in self.opened.items():
            shape = Shape(kind, f"bar-{kind} bar-open", f"{tip}: open", start, max(start, now))
            self.lanes[key].shapes.append(_opened(shape))
        self.opened.clear()

    def _finish_activity(self, act: _Activity, now: datetime) -> None:
        label, number = act.lane.label, act.attempt_number
        if act.backoff_from is not None:
            begun, until = act.backoff_from, act.backoff_until or now
            if until > now:
                tip = f"{label}: retry backoff before attempt {number}"
                act.lane.shapes.append(
                    _opened(Shape("backoff", "bar-backoff bar-open", tip, begun, max(begun, now)))
                )
                return
            self._backoff(act, until)
            tip = f"{label} attempt {number} ({act.kind}): waiting for a worker"
            css = f"bar-{act.kind} bar-open"
            act.lane.shapes.append(_opened(Shape("activity", css, tip, until, now, number)))
            return
        if act.attempt_start is None and act.lane.shapes:
            return
        start = act.attempt_start or act.scheduled_at
        state = "running" if act.attempt_start is not None else "waiting for a worker"
        tip = f"{label} attempt {number} ({act.kind}): {state}"
        css = f"bar-{act.kind} bar-open"
        act.lane.shapes.append(_opened(Shape("activity", css, tip, start, max(start, now), number)))


def _opened(shape: Shape) -> Shape:
    return Shape(
        shape.kind, shape.css, shape.title, shape.start, shape.end, shape.attempt, True, shape.mark
    )


def _ran_ms(p: Mapping[str, Any]) -> float | None:
    summary = p.get("activity_attempt")
    if isinstance(summary, Mapping) and summary.get("duration_ms") is not None:
        return float(summary["duration_ms"])
    return None


def _ts(value: object) -> datetime | None:
    """A timestamp of a payload: stored JSON holds RFC 3339 text."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _secs(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def build(
    events: Iterable[Record],
    *,
    now: datetime,
    closed_at: datetime | None = None,
    max_lanes: int = MAX_LANES,
) -> Timeline:
    """The timeline of a run's history: lanes in order of first appearance, placed in time.

    `closed_at` ends the chart of a closed run (else it runs to `now`); items a closed run left
    open are drawn to its close.
    """
    end_of_run = closed_at or now
    reader = _Reader(now=end_of_run)
    first: datetime | None = None
    for record in events:
        first = first or record.recorded_at
        reader.read(record.event_type, record.payload, record.recorded_at)
    reader.finish()
    start = first or end_of_run
    lanes = [lane for lane in reader.lanes.values() if lane.shapes]
    last = max([end_of_run, *(s.end for lane in lanes for s in lane.shapes)])
    shown, hidden = lanes[:max_lanes], lanes[max_lanes:]
    return _layout(shown, hidden, start, last)


def _layout(shown: list[Lane], hidden: list[Lane], start: datetime, end: datetime) -> Timeline:
    span = max(_secs(start, end), 0.001)

    def x_of(at: datetime) -> float:
        return round(LABEL_WIDTH + _secs(start, at) / span * CHART_WIDTH, 1)

    for index, lane in enumerate(shown):
        lane.y = AXIS_HEIGHT + index * LANE_HEIGHT
        placed = []
        for shape in lane.shapes:
            x = x_of(shape.start)
            width = max(MIN_BAR, round(x_of(shape.end) - x, 1))
            placed.append(
                Shape(
                    shape.kind,
                    shape.css,
                    shape.title,
                    shape.start,
                    shape.end,
                    shape.attempt,
                    shape.is_open,
                    shape.mark,
                    x,
                    width,
                )
            )
        lane.shapes = placed
    ticks = [
        Tick(
            round(LABEL_WIDTH + CHART_WIDTH * n / (TICKS - 1), 1),
            "+" + short_duration(span * n / (TICKS - 1)),
        )
        for n in range(TICKS)
    ]
    kinds: dict[str, int] = {}
    for lane in hidden:
        kinds[lane.kind] = kinds.get(lane.kind, 0) + 1
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    return Timeline(
        lanes=shown,
        ticks=ticks,
        start=start,
        end=end,
        width=LABEL_WIDTH + CHART_WIDTH + 40,
        height=AXIS_HEIGHT + max(1, len(shown)) * LANE_HEIGHT + 8,
        hidden_lanes=len(hidden),
        hidden_summary=summary,
    )


__all__ = [
    "MAX_LANES",
    "Lane",
    "Record",
    "Shape",
    "Tick",
    "Timeline",
    "build",
    "short_duration",
]
