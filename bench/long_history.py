"""A run of 20,000 history events against one of 10: warm and cold signal -> result.

Each mode gets a fresh database and one worker: `warm` with the worker's default sticky cache
(the run stays cached between signals), `cold` with `--sticky-cache-capacity 0` (every workflow
task replays the whole history, read page by page). `LongHistory` (bench/app.py) builds its
history for real: its first workflow task records `events - 1 - 2 x warmup` side effects; each
signal then makes one small task adding two events. A sample is one signal's task, measured as
in bench/sticky_latency.py (signal transaction to the completion's side effect, database clock).

Per mode and length it reports the latency percentiles, the CPU split per task (worker, client,
Postgres, RabbitMQ) and the worker's peak resident memory while the measured signals ran.

    python -m bench.long_history                  # 20,000 against 10 events
    python -m bench.long_history --scale 0.05     # 1,000 events: a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, LongHistory
from bench.scale_runs import MIB, CpuSplit, RssPeak, bench_database, status_kib, worker_pids
from bench.sticky_latency import (
    COMPLETED_TASKS,
    SIGNAL_TASKS,
    LatencyRun,
    Phase,
    history_id,
    latency_figures,
    signal_rounds,
)
from bench.sticky_runs import (
    CAPACITIES,
    Workers,
    bench_env,
    cache_reports,
    cache_totals,
    log_figures,
    ratio,
    tear_down,
    worker_options,
)
from bench.throughput import (
    connect_client,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    sticky_args,
    wait_registered,
)
from bench.wake_latency import print_figures
from burrow.client import Client
from burrow.handle import WorkflowHandle

LONG_EVENTS = 20_000
SHORT_EVENTS = 10
DATABASE = "burrow_bench_long_history"
BUILD_TIMEOUT_SECONDS = 600.0


async def build(
    client: Client, conn: AsyncConnection, args: argparse.Namespace
) -> tuple[dict[int, list[WorkflowHandle[Any]]], dict[int, float]]:
    """Start one LongHistory run per length; wait until each built its history (seconds each)."""
    handles: dict[int, list[WorkflowHandle[Any]]] = {}
    seconds: dict[int, float] = {}
    for length in args.lengths:
        t0 = time.perf_counter()
        handle = await client.start_workflow(
            LongHistory,
            length - 1 - 2 * args.warmup_signals,
            args.warmup_signals + args.signals,
            id=history_id(length, 0),
            task_queue=TASK_QUEUE,
            check_workers=False,
        )
        deadline = time.monotonic() + BUILD_TIMEOUT_SECONDS
        params = {"run_id": str(handle.run_id)}
        while (await conn.execute(COMPLETED_TASKS, params)).scalar_one() < 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{length} events not built in {BUILD_TIMEOUT_SECONDS} s")
            await asyncio.sleep(0.05)
        seconds[length] = time.perf_counter() - t0
        handles[length] = [handle]
    return handles, seconds


async def measure(args: argparse.Namespace, url: URL, mode: str) -> dict[str, float]:
    """One mode: build both histories, then per length the warm-up and measured signals."""
    prefix = new_prefix()
    await recreate_database(url)
    bench = create_async_engine(url, poolclass=NullPool)
    plain = url.render_as_string(hide_password=False)
    workers: Workers = start_workers(
        worker_options(args, 1),
        plain,
        0,
        env=bench_env(prefix),
        log_name=f"long-history-{mode}",
        worker_args=sticky_args(CAPACITIES[mode]),
    )
    client = await connect_client(plain, bench_env(prefix))
    seen, figures = LatencyRun(), {}
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            handles, built = await build(client, conn, args)
            figures |= {f"build_seconds_{mode}_{n}": s for n, s in built.items()}
            for length in args.lengths:
                runs = handles[length]
                await signal_rounds(conn, runs, 0, args.warmup_signals)
                split = CpuSplit(workers, url)
                t0 = time.perf_counter()
                async with RssPeak(worker_pids(workers)) as rss:
                    tasks = await signal_rounds(conn, runs, args.warmup_signals, args.signals)
                seen.phases[length] = Phase(tasks, 0.0, time.perf_counter() - t0)
                cpu = split.per(tasks)
                figures |= {f"{k}_cpu_{mode}_{length}_ms_per_task": v for k, v in cpu.items()}
                figures[f"worker_peak_rss_{mode}_{length}_mib"] = rss.peak_mib()
                figures[f"worker_rss_growth_{mode}_{length}_mib"] = rss.growth_mib()
            [pid] = worker_pids(workers)
            figures[f"worker_lifetime_peak_rss_{mode}_mib"] = status_kib(pid, "VmHWM") * 1024 / MIB
            rows = (await conn.execute(SIGNAL_TASKS)).all()
            reports = await cache_reports(conn, workers)
            await conn.commit()
    finally:
        codes = await tear_down(client, workers, bench, prefix)
    cache = cache_totals(reports)
    measured = latency_figures(args, mode, rows, seen)  # its CPU figures are left out: ours
    figures |= {k: v for k, v in measured.items() if not k.startswith("worker_cpu_")}
    figures[f"cache_hits_{mode}"] = cache["hit_count"]
    figures[f"cache_misses_{mode}"] = cache["miss_count"] + cache["forced_cold_replay_count"]
    figures |= {f"{k}_{mode}": v for k, v in log_figures(workers, codes).items()}
    return figures


async def measure_all(args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    with bench_database(args.database_url, DATABASE) as url:
        for mode in args.modes:
            print(f"# {mode}: lengths {args.lengths}, {args.signals} signals each", flush=True)
            figures |= await measure(args, url, mode)
    return figures


def report(args: argparse.Namespace, figures: dict[str, float]) -> dict[str, float]:
    """Print the figures per length, then the ratios the project targets."""
    short, long = min(args.lengths), max(args.lengths)
    for length in args.lengths:
        print(f"# length {length}")
        print_figures(
            {k: v for k, v in figures.items() if k.endswith(f"_{length}") or f"_{length}_" in k}
        )
    ratios: dict[str, float] = {}
    for mode in args.modes:
        ratios[f"{mode}_{long}_over_{short}_p50"] = ratio(
            figures, f"latency_{mode}_{long}_p50_ms", f"latency_{mode}_{short}_p50_ms"
        )
    if set(args.modes) == set(CAPACITIES):
        for what in ("latency", "service"):
            ratios[f"cold_over_warm_{long}_{what}_p50"] = ratio(
                figures, f"{what}_cold_{long}_p50_ms", f"{what}_warm_{long}_p50_ms"
            )
        ratios[f"cold_over_warm_{long}_worker_cpu"] = ratio(
            figures, f"worker_cpu_cold_{long}_ms_per_task", f"worker_cpu_warm_{long}_ms_per_task"
        )
        ratios[f"cold_over_warm_{long}_peak_rss"] = ratio(
            figures, f"worker_peak_rss_cold_{long}_mib", f"worker_peak_rss_warm_{long}_mib"
        )
    print("# ratios")
    print_figures(ratios)
    print(f"# target: warm_{long}_over_{short}_p50 <= 2 (a loaded machine shifts all figures)")
    return ratios


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--scale", type=float, default=1.0, help=f"long history = {LONG_EVENTS:,} x scale events")
    add("--short-events", type=int, default=SHORT_EVENTS, help="events of the short run")
    add("--signals", type=int, default=8, help="measured signals per run")
    add("--warmup-signals", type=int, default=1, help="signals per run first, not measured")
    add("--modes", default="warm,cold", help="warm (default cache), cold (cache off)")
    add("--concurrency", type=int, default=32, help="activity slots of the worker")
    add("--workflow-concurrency", type=int, default=16, help="workflow task slots")
    add("--database-url", default=None, help="dropped and recreated! default: a private server")
    add("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    long = max(int(LONG_EVENTS * args.scale), args.short_events + 1)
    args.lengths = [args.short_events, long]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in CAPACITIES for m in args.modes) or not args.modes:
        parser.error(f"--modes: choose from {list(CAPACITIES)}")
    if args.short_events < 2 * args.warmup_signals + 1 or args.signals < 1:
        parser.error("--short-events must be at least 2 x --warmup-signals + 1, --signals >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    print(f"# bench: long_history lengths={args.lengths} modes={args.modes}", flush=True)
    figures = asyncio.run(measure_all(args))
    ratios = report(args, figures)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"parameters": vars(args), "figures": figures, "ratios": ratios},
                indent=2,
                default=str,
            )
        )
    bad = sum(figures[f"worker_bad_exits_{mode}"] for mode in args.modes)
    samples = [figures[f"samples_{mode}_{n}"] for mode in args.modes for n in args.lengths]
    return 0 if not bad and all(s == args.signals for s in samples) else 1


if __name__ == "__main__":
    sys.exit(main())
