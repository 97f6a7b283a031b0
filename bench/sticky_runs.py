"""What the parts of bench/sticky.py share: variants, worker options, cache figures, retries."""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bench.throughput import delete_wake_topology, stop_workers, wake_env
from bench.wake_latency import BROKER_TROUBLE
from burrow.client import Client

# The variants compared: the workers' default cache, or none (every task a cold replay).
CAPACITIES: dict[str, int | None] = {"warm": None, "cold": 0}
# Short, so that the figures a worker last reported cover the whole run soon after it ends.
HEARTBEAT_SECONDS = 0.5

Workers = list[tuple[str, Any, Path]]

REPLAY_MODES = text(
    "SELECT sticky_replay_mode, count(*) FROM workflow_tasks"
    " WHERE sticky_replay_mode IS NOT NULL GROUP BY 1"
)
# A heartbeat's figures are read just before its transaction starts: one that started at least
# `margin` after the last run closed counts every task of the run.
CACHE_REPORTS = text(
    "SELECT worker_id, sticky_cache, heartbeat_at >= (SELECT max(closed_at) FROM runs)"
    " + make_interval(secs => :margin) AS fresh FROM worker_registrations ORDER BY worker_id"
)
CACHE_COUNTERS = ("hit_count", "miss_count", "forced_cold_replay_count", "eviction_count")


def worker_options(args: argparse.Namespace, workers: int) -> argparse.Namespace:
    """The namespace bench.throughput.start_workers reads, with `workers` processes."""
    return argparse.Namespace(
        workers=workers,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
    )


def bench_env(prefix: str) -> dict[str, str]:
    """Wakes on under `prefix`, and heartbeats often enough to read final cache figures."""
    return {
        **wake_env(prefix, wakes=True),
        "BURROW_HEARTBEAT_INTERVAL_SECONDS": str(HEARTBEAT_SECONDS),
    }


async def tear_down(
    client: Client, workers: Workers, bench: AsyncEngine, prefix: str
) -> list[int | None]:
    """Close the client, stop the workers (their exit codes), drop the run's engine and queues."""
    await client.close()
    codes = stop_workers(workers)
    await bench.dispose()
    await delete_wake_topology(prefix)
    return codes


async def cache_reports(conn: AsyncConnection, workers: Workers) -> list[dict[str, Any]]:
    """Each worker's last heartbeat figures, once it heartbeat after the last run closed."""
    deadline = time.monotonic() + 10 * HEARTBEAT_SECONDS
    while True:
        rows = (await conn.execute(CACHE_REPORTS, {"margin": HEARTBEAT_SECONDS / 2})).all()
        if all(row.fresh for row in rows) or time.monotonic() > deadline:
            break
        await asyncio.sleep(HEARTBEAT_SECONDS / 5)
    stale = [row.worker_id for row in rows if not row.fresh]
    if stale or len(rows) != len(workers):
        print(f"# WARNING cache figures may be stale: {stale or rows}", flush=True)
    return [dict(row.sticky_cache or {}) for row in rows]


async def replay_modes(conn: AsyncConnection) -> dict[str, int]:
    """How many claimed workflow tasks had each sticky_replay_mode."""
    return {str(row[0]): int(row[1]) for row in (await conn.execute(REPLAY_MODES)).all()}


def cache_totals(reports: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The workers' cache counters summed, and the hit rate they give."""
    totals = {key: float(sum(r.get(key, 0) for r in reports)) for key in CACHE_COUNTERS}
    tried = totals["hit_count"] + totals["miss_count"] + totals["forced_cold_replay_count"]
    totals["hit_rate"] = totals["hit_count"] / tried if tried else math.nan
    return totals


def broker_trouble(log_paths: Iterable[Path]) -> list[str]:
    """The broker trouble events the worker logs name (the shared RabbitMQ may be restarted)."""
    logs = [path.read_text() for path in log_paths]
    return [event for event in BROKER_TROUBLE if any(event in log for log in logs)]


def log_figures(workers: Workers, codes: Sequence[int | None]) -> dict[str, float]:
    return {
        "worker_log_lines": float(sum(len(p.read_text().splitlines()) for _, _, p in workers)),
        "worker_bad_exits": float(sum(1 for c in codes if c != 0)),
        "broker_disturbed": float(bool(broker_trouble(p for _, _, p in workers))),
    }


def with_retries(
    args: argparse.Namespace,
    what: str,
    measure: Callable[[], Coroutine[Any, Any, dict[str, float]]],
    disturbed: str,
) -> dict[str, float]:
    """Run a measurement again (up to --retries times) while the broker was disturbed in it."""
    for attempt in range(args.retries + 1):
        figures = asyncio.run(measure())
        if not figures[disturbed]:
            break
        print(f"# WARNING {what}: broker disturbed (worker logs)", flush=True)
        if attempt < args.retries:
            print(f"# {what}: measuring again", flush=True)
    return figures


def ratio(figures: Mapping[str, float], numerator: str, denominator: str) -> float:
    value = figures[numerator] / figures[denominator] if figures[denominator] else math.nan
    return float(value)


def medians(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}
