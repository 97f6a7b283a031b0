"""Issue 31: the UI's metric samples: the ring buffer, the sampler and the chart geometry."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from burrow.ui.charts import line
from burrow.ui.metrics_history import MetricsHistory, Ring, Sample
from burrow.ui.metrics_page import charts

T0 = datetime(2026, 12, 7, tzinfo=UTC)


def sample(seconds: float, backlog: int = 0) -> Sample:
    return Sample(T0 + timedelta(seconds=seconds), backlog, 0.0, 0.5)


def test_a_ring_keeps_the_newest_samples_oldest_first() -> None:
    """Issue 31: a full ring drops its oldest sample; `since` filters by time."""
    ring = Ring(3)
    assert ring.latest() is None and len(ring) == 0
    for i in range(5):
        ring.add(sample(i, backlog=i))
    assert [s.backlog for s in ring.since()] == [2, 3, 4]
    assert [s.backlog for s in ring.since(T0 + timedelta(seconds=3))] == [3, 4]
    assert ring.latest() == sample(4, backlog=4) and ring.capacity == 3
    with pytest.raises(ValueError):
        Ring(0)


async def test_the_sampler_keeps_an_hour_per_namespace_at_its_interval() -> None:
    """Issue 31: capacity follows the interval; each namespace has its own ring."""
    taken: list[str] = []

    async def measure(namespace: str) -> Sample:
        taken.append(namespace)
        if namespace == "broken":
            raise RuntimeError("store down")
        return sample(len(taken))

    history = MetricsHistory(measure=measure, namespaces=lambda: ["a", "broken", "b"], interval=30)
    assert history.capacity == 121
    await history.sample_now()
    assert taken == ["a", "broken", "b"]  # one failing namespace does not stop the others
    assert len(history.series("a")) == 1 and history.series("broken") == []
    assert history.series("unknown") == []
    history.record("a", sample(7200))
    assert [s.at for s in history.series("a")] == [T0 + timedelta(seconds=7200)]
    with pytest.raises(ValueError):
        MetricsHistory(measure=measure, namespaces=list, interval=0)


async def test_the_sampler_samples_every_interval_until_stopped() -> None:
    """Issue 31: started, it samples each interval (the first one interval in); stop ends it."""
    taken: list[str] = []
    twice = asyncio.Event()

    async def measure(namespace: str) -> Sample:
        taken.append(namespace)
        if len(taken) >= 2:
            twice.set()
        return sample(len(taken))

    history = MetricsHistory(measure=measure, namespaces=lambda: ["a"], interval=0.01)
    history.start()
    await asyncio.wait_for(twice.wait(), 5)
    await history.stop()
    count = len(taken)
    await asyncio.sleep(0.03)
    assert len(taken) == count and len(history.series("a")) == count
    await history.stop()  # stopping twice is harmless


def test_a_chart_needs_two_points_and_scales_from_zero() -> None:
    """Issue 31: zero or one sample is "collecting"; a line spans the window, 0 at the bottom."""
    assert all(c.collecting for c in charts([], 3600))
    one = charts([sample(0, backlog=4)], 3600)
    assert all(c.collecting for c in one) and one[0].latest == "4 tasks"
    drawn = line(
        [(T0, 0.0), (T0 + timedelta(hours=1), 10.0)],
        key="k",
        title="t",
        label=str,
        window=timedelta(hours=1),
    )
    assert not drawn.collecting and drawn.points == "4.0,116.0 596.0,4.0"
    assert drawn.top == "10.0" and drawn.latest == "10.0" and drawn.samples == 2
    young = line(
        [(T0, 2.0), (T0 + timedelta(minutes=1), 0.0), (T0 + timedelta(minutes=2), 1.0)],
        key="k",
        title="t",
        label=str,
        window=timedelta(hours=1),
    )
    # Younger than the window: the samples span the chart, not its right edge.
    assert young.points == "4.0,4.0 300.0,116.0 596.0,60.0" and young.start == T0
