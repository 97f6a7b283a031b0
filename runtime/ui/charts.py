"""Small line charts as inline SVG geometry: no script, no library (issue 31).

The template draws a <polyline> from `Chart.points`; every other part of a chart (its title, its
latest value, its scale) is text a screen reader reads too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH = 600
HEIGHT = 120
PAD = 4


@dataclass(frozen=True, slots=True)
class Chart:
    """One series ready to draw; `points` is None while fewer than two samples exist."""

    key: str
    title: str
    points: str | None
    latest: str | None
    top: str
    samples: int
    start: datetime | None = None
    """The time at the left edge: the window's start, or the first sample while younger."""
    end: datetime | None = None
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def collecting(self) -> bool:
        """Too few samples for a line yet."""
        return self.points is None


def line(
    series: Sequence[tuple[datetime, float]],
    *,
    key: str,
    title: str,
    label: Callable[[float], str],
    window: timedelta,
    floor_top: float = 1.0,
) -> Chart:
    """The chart of `series` (time, value) over `window` ending at its newest time.

    While the samples span less than the window (a server started recently), the chart spans
    them: a line squeezed into the right edge would show nothing. The vertical scale runs from
    0 to the largest value (at least `floor_top`, so a flat zero line sits at the bottom rather
    than filling the chart).
    """
    latest = label(series[-1][1]) if series else None
    top = max([floor_top, *(value for _, value in series)])
    if len(series) < 2:
        return Chart(key, title, None, latest, label(top), len(series))
    end = series[-1][0]
    start = max(end - window, series[0][0])
    span = max((end - start).total_seconds(), 1e-9)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    coords = []
    for at, value in series:
        x = PAD + inner_w * max(0.0, (at - start).total_seconds()) / span
        y = PAD + inner_h * (1 - value / top)
        coords.append(f"{x:.1f},{y:.1f}")
    return Chart(key, title, " ".join(coords), latest, label(top), len(series), start, end)
