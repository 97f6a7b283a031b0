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

Part 1 lives in bench/sticky_latency.py, what the parts share in bench/sticky_runs.py.
See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench import throughput
from bench.app import TASK_QUEUE, Steps
from bench.sticky_latency import measure_latency, print_latency
from bench.sticky_runs import (
    CAPACITIES,
    Workers,
    bench_env,
    broker_trouble,
    cache_reports,
    cache_totals,
    log_figures,
    medians,
    ratio,
    replay_modes,
    tear_down,
    with_retries,
    worker_options,
)
from bench.throughput import (
    MAX_IN_FLIGHT_STARTS,
    RESULTS,
    check_bench_url,
    connect_client,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    sticky_args,
    wait_closed,
    wait_registered,
)
from bench.wake_latency import percentile, print_figures
from burrow.client import Client

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_sticky"
PARTS = ("latency", "hit-rate", "throughput")
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


# -- part 1: latency against history length ----------------------------------------------------


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
