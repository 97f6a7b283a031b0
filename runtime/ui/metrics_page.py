"""The Metrics page: the last hour of backlog, oldest-ready age and sticky hit rate (issue 31).

The figures come from the server's own sampler (burrow.ui.metrics_history); the charts are
inline SVG drawn on the server, each with its latest value as text.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse

from burrow.ui.access import Caller
from burrow.ui.charts import Chart, line
from burrow.ui.metrics_history import Sample
from burrow.ui.templating import duration, render

router = APIRouter(prefix="/ui/metrics", include_in_schema=False)


def _tasks(value: float) -> str:
    return "1 task" if round(value) == 1 else f"{value:.0f} tasks"


def charts(samples: list[Sample], window_seconds: float) -> list[Chart]:
    """The page's three charts of `samples` (oldest first)."""
    window = timedelta(seconds=window_seconds)
    return [
        line(
            [(s.at, float(s.backlog)) for s in samples],
            key="backlog",
            title="Backlog (ready tasks)",
            label=_tasks,
            window=window,
        ),
        line(
            [(s.at, s.oldest_ready_age_seconds) for s in samples],
            key="oldest-ready-age",
            title="Oldest ready task's age",
            label=duration,
            window=window,
        ),
        line(
            [(s.at, s.sticky_hit_rate * 100) for s in samples],
            key="sticky-hit-rate",
            title="Sticky hit rate (last minute)",
            label=lambda v: f"{v:.0f} %",
            window=window,
            floor_top=100.0,
        ),
    ]


@router.get("")
async def metrics(request: Request, caller: Caller) -> HTMLResponse:
    """The charts of the caller's namespace."""
    history = caller.state.metrics_history
    samples = [] if history is None else history.series(caller.namespace)
    window = 3600.0 if history is None else history.window.total_seconds()
    return render(
        request,
        caller,
        "metrics.html",
        {
            "charts": charts(samples, window),
            "interval": None if history is None else history.interval,
            "sampled_at": samples[-1].at if samples else None,
        },
    )
