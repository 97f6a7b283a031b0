"""Part 1 of bench/sticky.py: workflow task latency and worker CPU against history length.

A sample is the workflow task one signal made: from its `created_at` (the start of the
signal's transaction) to the `recorded_at` of the SideEffectRecorded its completion wrote (the
start of the completion's transaction), both on the database clock.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import SIGNAL, TASK_QUEUE, LongHistory
from bench.sticky_runs import (
    CAPACITIES,
    Workers,
    bench_env,
    cache_reports,
    cache_totals,
    log_figures,
    medians,
    ratio,
    replay_modes,
    tear_down,
    worker_options,
)
from bench.throughput import (
    IDLE_SAMPLE_SECONDS,
    RESULTS,
    connect_client,
    cpu_seconds,
    new_prefix,
    recreate_database,
    start_workers,
    sticky_args,
    wait_registered,
)
from bench.wake_latency import percentile, print_figures
from burrow.client import Client
from burrow.handle import WorkflowHandle

SIGNAL_POLL_SECONDS = 0.01
SIGNAL_TIMEOUT_SECONDS = 60.0


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
