"""Sticky execution: what a warm workflow task saves, how often workers hit, what it costs.

Run from the repo root: `python -m bench.sticky`. Three parts, each measurement on a fresh
database, fresh worker processes (`bench.app`) and an AMQP prefix of its own:

- latency:    workflow task latency and worker CPU per task against history length (10, 100,
              1000, 5000 events), warm (the workers' default cache) and forced cold
              (`--sticky-cache-capacity 0`), a warm and a cold run per pair.
- hit-rate:   hits / (hits + misses + forced cold replays) while many Steps workflows run, with
              1 and with 3 workers: from the workers' heartbeat figures and from the
              `sticky_replay_mode` of the claimed workflow tasks.
- throughput: bench.throughput's one-activity workload with the default cache and with
              `--sticky-cache-capacity 0`, a run of each per pair.

A latency sample is the workflow task one signal made: from its `created_at` (the start of the
signal's transaction) to the `recorded_at` of the SideEffectRecorded its completion wrote (the
start of the completion's transaction), both on the database clock.

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench import throughput
from bench.app import SIGNAL, TASK_QUEUE, LongHistory, Steps
from bench.throughput import (
    IDLE_SAMPLE_SECONDS,
    MAX_IN_FLIGHT_STARTS,
    RESULTS,
    check_bench_url,
    connect_client,
    cpu_seconds,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    sticky_args,
    stop_workers,
    wait_closed,
    wait_registered,
    wake_env,
)
from bench.wake_latency import BROKER_TROUBLE, percentile, print_figures
from burrow.client import Client
from burrow.handle import WorkflowHandle

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_sticky"
PARTS = ("latency", "hit-rate", "throughput")
# The variants compared: the workers' default cache, or none (every task a cold replay).
CAPACITIES: dict[str, int | None] = {"warm": None, "cold": 0}
# Short, so that the figures a worker last reported cover the whole run soon after it ends.
HEARTBEAT_SECONDS = 0.5
SIGNAL_POLL_SECONDS = 0.01
SIGNAL_TIMEOUT_SECONDS = 60.0

Workers = list[tuple[str, Any, Path]]

# One row per workflow task a LongHistory signal made, once its completion committed. The
# claim moves the signal into history with the task's id; the completion writes one side
# effect, whose recorded_at is now() of the completion's transaction.
SIGNAL_TASKS = text(
    """
    SELECT r.workflow_id, s.sequence - 1 AS history_before, t.sticky_replay_mode,
           extract(epoch FROM t.claimed_at - t.created_at) * 1000 AS wait_ms,
           extract(epoch FROM d.done_at - t.claimed_at) * 1000 AS service_ms,
           extract(epoch FROM d.done_at - t.created_at) * 1000 AS latency_ms
    FROM workflow_tasks t
    JOIN runs r USING (run_id)
    JOIN history_events s ON s.run_id = t.run_id AND s.workflow_task_id = t.task_id
        AND s.event_type = 'SignalReceived'
    JOIN LATERAL (
        SELECT max(h.recorded_at) AS done_at FROM history_events h
        WHERE h.run_id = t.run_id AND h.workflow_task_id = t.task_id
          AND h.event_type = 'SideEffectRecorded'
    ) d ON true
    WHERE r.workflow_type = 'LongHistory' AND t.state = 'completed'
    ORDER BY r.workflow_id, s.sequence
    """
)
COMPLETED_TASKS = text(
    "SELECT count(*) FROM workflow_tasks WHERE run_id = :run_id AND state = 'completed'"
)
REPLAY_MODES = text(
    "SELECT sticky_replay_mode, count(*) FROM workflow_tasks"
    " WHERE sticky_replay_mode IS NOT NULL GROUP BY 1"
)
# Ready to claim of every workflow task but each run's first (the one the start made, which no
# binding can route): with the cache on, how long a task bound to its owner waits for it.
FOLLOW_UP_WAITS = text(
    "SELECT ms FROM (SELECT extract(epoch FROM claimed_at - created_at) * 1000 AS ms,"
    " row_number() OVER (PARTITION BY run_id ORDER BY created_at) AS nth"
    " FROM workflow_tasks WHERE claimed_at IS NOT NULL) t WHERE nth > 1"
)
# Little's law: the mean number of runs open at once over the measurement.
RUNS_IN_FLIGHT = text(
    "SELECT sum(extract(epoch FROM closed_at - created_at))"
    " / nullif(extract(epoch FROM max(closed_at) - min(created_at)), 0) FROM runs"
)
# A heartbeat's figures are read just before its transaction starts: one that started at least
# `margin` after the last run closed counts every task of the run.
CACHE_REPORTS = text(
    "SELECT worker_id, sticky_cache, heartbeat_at >= (SELECT max(closed_at) FROM runs)"
    " + make_interval(secs => :margin) AS fresh FROM worker_registrations ORDER BY worker_id"
)
CACHE_COUNTERS = ("hit_count", "miss_count", "forced_cold_replay_count", "eviction_count")


@dataclass
class Phase:
    """The measured signals of one history length: worker CPU and wall time they took."""

    tasks: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0


@dataclass
class LatencyRun:
    """What one latency run saw, beyond the per-task rows."""

    idle_cpu_per_second: float = math.nan
    phases: dict[int, Phase] = field(default_factory=dict)
    complete: bool = True


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


def history_id(length: int, i: int) -> str:
    return f"hist-{length}-{i}"


def length_of(workflow_id: str) -> int:
    return int(workflow_id.split("-")[1])


async def idle_cpu_rate(workers: Workers) -> float:
    """Worker CPU seconds per second while the registered workers have nothing to do."""
    before, t0 = cpu_seconds(workers), time.perf_counter()
    await asyncio.sleep(IDLE_SAMPLE_SECONDS)
    return (cpu_seconds(workers) - before) / (time.perf_counter() - t0)


async def wait_tasks(conn: AsyncConnection, run_id: str, count: int) -> None:
    """Poll until `count` workflow tasks of the run completed."""
    deadline = time.monotonic() + SIGNAL_TIMEOUT_SECONDS
    while (await conn.execute(COMPLETED_TASKS, {"run_id": run_id})).scalar_one() < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id}: fewer than {count} workflow tasks completed")
        await asyncio.sleep(SIGNAL_POLL_SECONDS)


async def build_histories(
    client: Client, conn: AsyncConnection, args: argparse.Namespace
) -> dict[int, list[WorkflowHandle[Any]]]:
    """Start the LongHistory runs of every length and wait until each has its history.

    A run of length N records N - 1 - 2 * warmup side effects in its first task, so that the
    first measured signal finds N events in history (each warm-up signal adds two).
    """
    handles: dict[int, list[WorkflowHandle[Any]]] = {}
    for length in args.lengths:
        side_effects = length - 1 - 2 * args.warmup_signals
        handles[length] = [
            await client.start_workflow(
                LongHistory,
                side_effects,
                args.warmup_signals + args.signals,
                id=history_id(length, i),
                task_queue=TASK_QUEUE,
                check_workers=False,
            )
            for i in range(args.latency_workflows)
        ]
    for runs in handles.values():
        for handle in runs:
            await wait_tasks(conn, str(handle.run_id), 1)
    return handles


async def signal_rounds(
    conn: AsyncConnection, handles: Sequence[WorkflowHandle[Any]], first: int, rounds: int
) -> int:
    """Signal each run in turn, one signal in flight at a time; returns the tasks made.

    Round k's signal is the run's (first + k + 1)-th, so its task is its (first + k + 2)-th.
    """
    for k in range(rounds):
        for handle in handles:
            await handle.signal(SIGNAL)
            await wait_tasks(conn, str(handle.run_id), first + k + 2)
    return rounds * len(handles)


async def run_signals(
    conn: AsyncConnection,
    workers: Workers,
    handles: dict[int, list[WorkflowHandle[Any]]],
    args: argparse.Namespace,
    seen: LatencyRun,
) -> None:
    """Per length, ascending: the warm-up signals, then the measured ones under a CPU window."""
    for length in args.lengths:
        runs = handles[length]
        await signal_rounds(conn, runs, 0, args.warmup_signals)
        cpu0, t0 = cpu_seconds(workers), time.perf_counter()
        tasks = await signal_rounds(conn, runs, args.warmup_signals, args.signals)
        seen.phases[length] = Phase(tasks, cpu_seconds(workers) - cpu0, time.perf_counter() - t0)


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


# -- part 1: latency against history length ----------------------------------------------------


async def measure_latency(
    args: argparse.Namespace, url: URL, mode: str, pair: int
) -> dict[str, float]:
    plain_url = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = bench_env(prefix)
    capacity = CAPACITIES[mode]
    print(
        f"# latency pair {pair} {mode}: sticky_cache_capacity="
        f"{'default' if capacity is None else capacity} amqp_prefix={prefix}",
        flush=True,
    )
    await recreate_database(url)
    bench = create_async_engine(url, poolclass=NullPool)
    log_name = f"sticky-latency-{mode}-p{pair}"
    options = worker_options(args, args.latency_workers)
    workers = start_workers(
        options, plain_url, pair, env=env, log_name=log_name, worker_args=sticky_args(capacity)
    )
    client = await connect_client(plain_url, env)
    seen = LatencyRun()
    try:
        # One read-committed transaction for all of the bench's reads, as in bench.throughput.
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            seen.idle_cpu_per_second = await idle_cpu_rate(workers)
            try:
                handles = await build_histories(client, conn, args)
                await run_signals(conn, workers, handles, args, seen)
            except TimeoutError as exc:
                print(f"# WARNING latency {mode}: {exc}", flush=True)
                seen.complete = False
            rows = (await conn.execute(SIGNAL_TASKS)).all()
            reports = await cache_reports(conn, workers) if seen.complete else []
            modes = await replay_modes(conn)
            await conn.commit()
    finally:
        codes = await tear_down(client, workers, bench, prefix)
    cache = cache_totals(reports)
    print(
        f"# latency pair {pair} {mode}: replay_modes={modes}"
        f" cache_hits={cache['hit_count']:.0f} misses={cache['miss_count']:.0f}"
        f" forced_cold_replays={cache['forced_cold_replay_count']:.0f}"
        f" worker_exit_codes={codes} (logs: {RESULTS}/{log_name}-*)",
        flush=True,
    )
    figures = latency_figures(args, mode, rows, seen)
    figures[f"complete_{mode}"] = float(seen.complete)
    figures[f"cache_hits_{mode}"] = cache["hit_count"]
    figures[f"cache_misses_{mode}"] = cache["miss_count"] + cache["forced_cold_replay_count"]
    figures.update({f"{k}_latency_{mode}": v for k, v in log_figures(workers, codes).items()})
    return figures


def latency_figures(
    args: argparse.Namespace, mode: str, rows: Sequence[Any], seen: LatencyRun
) -> dict[str, float]:
    """Per history length: the measured tasks' percentiles, CPU per task, the warm-up tasks."""
    figures: dict[str, float] = {}
    for length in args.lengths:
        mine = [r for r in rows if length_of(r.workflow_id) == length]
        by_run: dict[str, list[Any]] = {}
        for row in mine:  # ordered by workflow id, then history position
            by_run.setdefault(row.workflow_id, []).append(row)
        warmup = [r for run in by_run.values() for r in run[: args.warmup_signals]]
        measured = [r for run in by_run.values() for r in run[args.warmup_signals :]]
        latency = [float(r.latency_ms) for r in measured]
        phase = seen.phases.get(length, Phase())
        tasks = phase.tasks or math.nan
        idle = seen.idle_cpu_per_second * phase.wall_seconds
        key = f"{mode}_{length}"
        figures |= {
            f"samples_{key}": float(len(measured)),
            f"history_events_{key}_min": min((r.history_before for r in measured), default=0),
            f"history_events_{key}_max": max((r.history_before for r in measured), default=0),
            f"latency_{key}_p50_ms": percentile(latency, 0.5),
            f"latency_{key}_p90_ms": percentile(latency, 0.9),
            f"wait_{key}_p50_ms": percentile([float(r.wait_ms) for r in measured], 0.5),
            f"service_{key}_p50_ms": percentile([float(r.service_ms) for r in measured], 0.5),
            f"worker_cpu_{key}_ms_per_task": phase.cpu_seconds * 1000 / tasks,
            f"worker_cpu_{key}_net_ms_per_task": (phase.cpu_seconds - idle) * 1000 / tasks,
        }
        if warmup:
            after_build = [float(r.latency_ms) for r in warmup]
            figures[f"first_signal_{key}_p50_ms"] = percentile(after_build, 0.5)
    return figures


def ratio(figures: Mapping[str, float], numerator: str, denominator: str) -> float:
    value = figures[numerator] / figures[denominator] if figures[denominator] else math.nan
    return float(value)


def length_ratios(length: int, shortest: int, figures: Mapping[str, float]) -> dict[str, float]:
    """Cold over warm at one history length, and warm growth from the shortest history."""
    return {
        f"cold_over_warm_{length}_p50": ratio(
            figures, f"latency_cold_{length}_p50_ms", f"latency_warm_{length}_p50_ms"
        ),
        f"cold_over_warm_{length}_p90": ratio(
            figures, f"latency_cold_{length}_p90_ms", f"latency_warm_{length}_p90_ms"
        ),
        f"cold_over_warm_{length}_cpu": ratio(
            figures,
            f"worker_cpu_cold_{length}_net_ms_per_task",
            f"worker_cpu_warm_{length}_net_ms_per_task",
        ),
        f"warm_{length}_over_{shortest}_p50": ratio(
            figures, f"latency_warm_{length}_p50_ms", f"latency_warm_{shortest}_p50_ms"
        ),
    }


def print_latency(args: argparse.Namespace, pairs: Sequence[Mapping[str, float]]) -> None:
    """Per length: warm then cold figures (medians of the pairs), then their ratios."""
    figures = medians(pairs)
    shortest, longest = min(args.lengths), max(args.lengths)
    shown: set[str] = set()
    for length in args.lengths:
        events = [
            p[f"history_events_{mode}_{length}_{end}"]
            for p in pairs
            for mode in CAPACITIES
            for end in ("min", "max")
        ]
        print(
            f"# length {length}: {min(events):.0f} to {max(events):.0f} events in history"
            " before each measured signal"
        )
        for mode in CAPACITIES:
            mine = {k: v for k, v in figures.items() if f"_{mode}_{length}_" in f"{k}_"}
            shown |= mine.keys()
            print_figures({k: v for k, v in mine.items() if not k.startswith("history_events_")})
        ratios = length_ratios(length, shortest, figures)
        print_figures(ratios)
        for key in ratios:
            each = ", ".join(f"{length_ratios(length, shortest, p)[key]:.2f}" for p in pairs)
            if len(pairs) > 1:
                print(f"# {key} per pair: {each}")
    print_figures({k: v for k, v in figures.items() if k not in shown})
    print(
        f"# targets: warm_{longest}_over_{shortest}_p50 <= 2,"
        f" cold_over_warm_{longest}_p50 >= 20 (read them on an idle machine)"
    )


# -- part 2: steady-state hit rate ---------------------------------------------------------------


async def start_steps(client: Client, n: int, steps: int, rate: float) -> tuple[int, float]:
    """Start N Steps runs, the i-th at i/rate s (all at once if rate is 0): (failed, seconds)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)
    t0 = loop.time()

    async def one(i: int) -> None:
        async with gate:
            await client.start_workflow(
                Steps, steps, id=f"steps-{i}", task_queue=TASK_QUEUE, check_workers=False
            )

    tasks = []
    for i in range(n):
        if rate > 0:
            await asyncio.sleep(max(0.0, t0 + i / rate - loop.time()))
        tasks.append(asyncio.create_task(one(i)))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        print(f"# {len(failed)} starts failed, first: {failed[0]!r}", file=sys.stderr)
    return len(failed), loop.time() - t0


async def measure_hit_rate(args: argparse.Namespace, url: URL, count: int) -> dict[str, float]:
    plain_url = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = bench_env(prefix)
    n = args.hit_workflows
    capacity_name = "default" if args.hit_cache_capacity is None else args.hit_cache_capacity
    print(
        f"# hit-rate workers={count}: sticky_cache_capacity={capacity_name} amqp_prefix={prefix}",
        flush=True,
    )
    await recreate_database(url)
    bench = create_async_engine(url, poolclass=NullPool)
    log_name = f"sticky-hit-rate-w{count}"
    options = worker_options(args, count)
    capacity = sticky_args(args.hit_cache_capacity)
    workers = start_workers(options, plain_url, 0, env=env, log_name=log_name, worker_args=capacity)
    client = await connect_client(plain_url, env)
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            starts = asyncio.create_task(start_steps(client, n, args.steps, args.hit_rate))
            closed, failed_starts, wall = await wait_closed(conn, starts, n, args.timeout)
            reports = await cache_reports(conn, workers)
            modes = await replay_modes(conn)
            waits = [float(r[0]) for r in (await conn.execute(FOLLOW_UP_WAITS)).all()]
            in_flight = float((await conn.execute(RUNS_IN_FLIGHT)).scalar_one() or math.nan)
            completed = (
                await conn.execute(text("SELECT count(*) FROM runs WHERE status = 'completed'"))
            ).scalar_one()
            await conn.commit()
    finally:
        codes = await tear_down(client, workers, bench, prefix)
    print(
        f"# hit-rate workers={count}: wall={wall:.2f}s closed={closed}/{n}"
        f" replay_modes={modes} per_worker={[cache_totals([r]) for r in reports]}"
        f" worker_exit_codes={codes} (logs: {RESULTS}/{log_name}-*)",
        flush=True,
    )
    figures = hit_rate_figures(count, reports, modes, waits, workers, codes)
    return {
        f"completed_w{count}": float(completed),
        f"failed_starts_w{count}": float(failed_starts),
        f"runs_in_flight_mean_w{count}": in_flight,
        **figures,
    }


def hit_rate_figures(
    count: int,
    reports: Sequence[Mapping[str, Any]],
    modes: Mapping[str, int],
    waits: Sequence[float],
    workers: Workers,
    codes: Sequence[int | None],
) -> dict[str, float]:
    cache = cache_totals(reports)
    hit, forced = modes.get("sticky_hit_expected", 0), modes.get("forced_cold_replay", 0)
    w = f"w{count}"
    return {
        f"hit_rate_heartbeat_{w}": cache["hit_rate"],
        f"hits_{w}": cache["hit_count"],
        f"misses_{w}": cache["miss_count"],
        f"forced_cold_replays_{w}": cache["forced_cold_replay_count"],
        f"evictions_{w}": cache["eviction_count"],
        f"hit_rate_claims_{w}": hit / (hit + forced) if hit + forced else math.nan,
        f"claims_sticky_hit_expected_{w}": float(hit),
        f"claims_forced_cold_replay_{w}": float(forced),
        f"claims_cold_replay_{w}": float(modes.get("cold_replay", 0)),
        f"follow_up_task_wait_{w}_p50_ms": percentile(waits, 0.5),
        f"follow_up_task_wait_{w}_p90_ms": percentile(waits, 0.9),
        f"follow_up_task_wait_{w}_p99_ms": percentile(waits, 0.99),
        **{f"{k}_{w}": v for k, v in log_figures(workers, codes).items()},
    }


# -- part 3: one-activity throughput with and without the cache ----------------------------------

THROUGHPUT_FIGURES = (
    "completed",
    "workflows_per_second",
    "commits_per_workflow",
    "worker_cpu_ms_per_workflow",
    "postgres_cpu_ms_per_workflow",
    "start_to_result_p50_ms",
    "worker_log_lines",
    "worker_bad_exits",
    "broker_disturbed",
)


def throughput_options(args: argparse.Namespace, mode: str) -> argparse.Namespace:
    """The namespace bench.throughput.measure reads, for one variant."""
    return argparse.Namespace(
        workflows=args.throughput_workflows,
        workers=args.throughput_workers,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
        timeout=args.timeout,
        no_wakes=False,
        prefix=None,
        sticky_cache_capacity=CAPACITIES[mode],
    )


async def measure_throughput(
    args: argparse.Namespace, url: URL, mode: str, run: int
) -> dict[str, float]:
    options = throughput_options(args, mode)
    figures = await throughput.measure(options, url, run)
    logs = [RESULTS / f"run{run}-bench-w{i}.log" for i in range(options.workers)]
    figures["broker_disturbed"] = float(bool(broker_trouble(logs)))
    return {f"throughput_{mode}_{key}": figures[key] for key in THROUGHPUT_FIGURES}


def throughput_ratios(pairs: Sequence[Mapping[str, float]]) -> None:
    """Warm over cold workflows per second: of the medians, and per pair."""
    key = "throughput_{}_workflows_per_second"
    warm = statistics.median(p[key.format("warm")] for p in pairs)
    cold = statistics.median(p[key.format("cold")] for p in pairs)
    print_figures({"throughput_warm_over_cold": warm / cold})
    if len(pairs) > 1:
        each = [f"{ratio(p, key.format('warm'), key.format('cold')):.2f}" for p in pairs]
        print(f"# throughput_warm_over_cold per pair: {', '.join(each)}")


# -- driver ------------------------------------------------------------------------------------


def medians(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def run_pairs(
    args: argparse.Namespace, url: URL, part: str
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Alternate warm and cold runs, `args.pairs` times: (each pair's figures, their medians)."""
    pairs = []
    for pair in range(1, args.pairs + 1):
        figures: dict[str, float] = {}
        for index, mode in enumerate(CAPACITIES):
            if part == "latency":
                figures |= with_retries(
                    args,
                    f"latency pair {pair} {mode}",
                    partial(measure_latency, args, url, mode, pair),
                    f"broker_disturbed_latency_{mode}",
                )
            else:
                run = 2 * (pair - 1) + index + 1
                figures |= with_retries(
                    args,
                    f"throughput run {run} {mode}",
                    partial(measure_throughput, args, url, mode, run),
                    f"throughput_{mode}_broker_disturbed",
                )
        pairs.append(figures)
    return pairs, medians(pairs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sticky", description=__doc__)
    add = parser.add_argument
    add("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    add("--pairs", type=int, default=2, help="warm/cold pairs (latency, throughput); medians")
    add("--lengths", default="10,100,1000,5000", help="history lengths (events) to measure at")
    add("--latency-workflows", type=int, default=4, help="LongHistory runs per length")
    add("--signals", type=int, default=5, help="measured signals per LongHistory run")
    add("--warmup-signals", type=int, default=1, help="signals per run sent first, not measured")
    add("--latency-workers", type=int, default=1, help="worker processes (latency)")
    add("--hit-workers", default="1,3", help="worker counts to measure the hit rate with")
    add("--hit-workflows", type=int, default=300, help="Steps runs per hit-rate measurement")
    add("--steps", type=int, default=5, help="activities per Steps run")
    add("--hit-rate", type=float, default=30.0, help="Steps starts per second (0: all at once)")
    add(
        "--hit-cache-capacity",
        type=int,
        default=None,
        help="--sticky-cache-capacity of the hit-rate workers (default: theirs)",
    )
    add("--throughput-workflows", type=int, default=1000, help="OneActivity runs per run")
    add("--throughput-workers", type=int, default=2, help="worker processes (throughput)")
    add("--concurrency", type=int, default=32, help="activity slots per worker")
    add("--workflow-concurrency", type=int, default=16, help="workflow task slots per worker")
    add(
        "--retries",
        type=int,
        default=2,
        help="measure a run again (up to this many times) when a worker log shows the broker"
        " connection dropped; the shared RabbitMQ may be restarted by other people's tests",
    )
    add("--timeout", type=float, default=300.0, help="seconds per hit-rate or throughput run")
    add("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    add("--json", type=Path, default=None, help="also write figures here")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or any(p not in PARTS for p in args.parts):
        parser.error(f"--parts: choose from {list(PARTS)}")
    args.lengths = sorted(int(n) for n in args.lengths.split(","))
    args.hit_workers = [int(n) for n in args.hit_workers.split(",")]
    if min(args.lengths) < 2 * args.warmup_signals + 1:
        parser.error("--lengths: each must be at least 2 x --warmup-signals + 1")
    if args.pairs < 1 or args.signals < 1:
        parser.error("--pairs and --signals must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url = check_bench_url(args.database_url)
    quiet_logging()
    print(
        f"# bench: parts={','.join(args.parts)} pairs={args.pairs} database={url.database}"
        f" lengths={args.lengths} latency_workflows={args.latency_workflows}"
        f" signals={args.signals} warmup_signals={args.warmup_signals}"
        f" latency_workers={args.latency_workers} hit_workers={args.hit_workers}"
        f" hit_workflows={args.hit_workflows} steps={args.steps} hit_rate={args.hit_rate}/s"
        f" throughput_workflows={args.throughput_workflows}"
        f" throughput_workers={args.throughput_workers}",
        flush=True,
    )
    output: dict[str, Any] = {"parameters": vars(args)}
    complete = True
    if "latency" in args.parts:
        pairs, figures = run_pairs(args, url, "latency")
        print_latency(args, pairs)
        output["latency"] = {"pairs": pairs, "median": figures}
        complete &= all(figures[f"complete_{mode}"] == 1 for mode in CAPACITIES)
    if "hit-rate" in args.parts:
        figures = {}
        for count in args.hit_workers:
            figures |= with_retries(
                args,
                f"hit-rate workers={count}",
                partial(measure_hit_rate, args, url, count),
                f"broker_disturbed_w{count}",
            )
            complete &= figures[f"completed_w{count}"] == args.hit_workflows
        print_figures(figures)
        output["hit_rate"] = figures
    if "throughput" in args.parts:
        pairs, figures = run_pairs(args, url, "throughput")
        print_figures(figures)
        throughput_ratios(pairs)
        output["throughput"] = {"pairs": pairs, "median": figures}
        complete &= all(
            p[f"throughput_{mode}_completed"] == args.throughput_workflows
            for p in pairs
            for mode in CAPACITIES
        )
    if args.json is not None:
        args.json.write_text(json.dumps(output, indent=2, default=str))
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
