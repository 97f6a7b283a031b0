"""10,000 open runs held warm across 2 workers: memory per cached run and the byte cap.

Three phases, each on a fresh database with fresh workers (`--sticky-cache-capacity` above the
run count, so only bytes bound the cache):

- `off`: `--sticky-cache-capacity 0`. Nothing is cached: the workers' resident memory growth is
  what opening the runs leaves behind anyway (allocator high-water, garbage not yet collected).
- `uncapped`: `--sticky-cache-max-bytes` far above what the runs weigh. Every run stays
  cached. Its growth less the `off` growth, over the cached runs, is what one cached run costs.
- `capped`: `--sticky-cache-max-bytes` at `--cap-mib`, low enough that the cache must evict.
  The workers' growth is compared with the cap.

In each phase the bench starts the runs (`LongHistory(events, 1)`: `events` side effects in its
first workflow task, then one signal to finish), waits until every first task completed, reads
the workers' resident memory and cache figures, then signals every run and waits until all
closed: a run evicted from the cache completes by cold replay, and must complete all the same.

    python -m bench.warm_runs                       # 10,000 runs
    python -m bench.warm_runs --scale 0.05          # 500 runs: a quick check
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

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import SIGNAL, TASK_QUEUE, LongHistory
from bench.scale_runs import MIB, CpuSplit, RssPeak, bench_database, rss_bytes, worker_pids
from bench.sticky_runs import (
    HEARTBEAT_SECONDS,
    Workers,
    bench_env,
    log_figures,
    replay_modes,
    tear_down,
    worker_options,
)
from bench.throughput import (
    MAX_IN_FLIGHT_STARTS,
    connect_client,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    wait_registered,
)
from bench.wake_latency import print_figures
from burrow import codec
from burrow.client import Client
from burrow.handle import WorkflowHandle

RUNS = 10_000
WORKERS = 2
DATABASE = "burrow_bench_warm_runs"
UNCAPPED_BYTES = 16 * 1024 * MIB
POLL_SECONDS = 0.2

FIRST_TASKS_DONE = text(
    "SELECT count(DISTINCT run_id) FROM workflow_tasks WHERE state = 'completed'"
)
RUN_STATES = text("SELECT status, count(*) FROM runs GROUP BY status")
RESULTS = text("SELECT result, count(*) FROM runs WHERE status = 'completed' GROUP BY result")
CACHE_FIGURES = text(
    "SELECT worker_id, sticky_cache FROM worker_registrations"
    " WHERE worker_id = ANY(:ids) ORDER BY worker_id"
)


async def gathered(items: Sequence[Any], fn: Any) -> list[Any]:
    """fn(item) for every item, at most MAX_IN_FLIGHT_STARTS at once."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)

    async def one(item: Any) -> Any:
        async with gate:
            return await fn(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def wait_count(conn: AsyncConnection, query: Any, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (await conn.execute(query)).scalar_one() < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {n} after {timeout} s")
        await asyncio.sleep(POLL_SECONDS)


async def cache_figures(conn: AsyncConnection, workers: Workers) -> list[dict[str, Any]]:
    """Each worker's sticky cache as its next heartbeat reports it."""
    await asyncio.sleep(3 * HEARTBEAT_SECONDS)
    ids = [worker_id for worker_id, _, _ in workers]
    return [dict(r.sticky_cache or {}) for r in await conn.execute(CACHE_FIGURES, {"ids": ids})]


async def measure(args: argparse.Namespace, url: URL, phase: str, cap: int) -> dict[str, float]:
    prefix = new_prefix()
    await recreate_database(url)
    bench = create_async_engine(url, poolclass=NullPool)
    plain = url.render_as_string(hide_password=False)
    flags = ["--sticky-cache-capacity", str(args.runs + 1), "--sticky-cache-max-bytes", str(cap)]
    if phase == "off":
        flags = ["--sticky-cache-capacity", "0"]
    workers = start_workers(
        worker_options(args, WORKERS),
        plain,
        0,
        env=bench_env(prefix),
        log_name=f"warm-runs-{phase}",
        worker_args=flags,
    )
    client = await connect_client(plain, bench_env(prefix))
    f: dict[str, float] = {}
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            await asyncio.sleep(2 * HEARTBEAT_SECONDS)
            base = {pid: rss_bytes(pid) for pid in worker_pids(workers)}
            split, t0 = CpuSplit(workers, url), time.perf_counter()
            async with RssPeak(worker_pids(workers)) as peak:
                handles = await start_runs(client, args)
                await wait_count(conn, FIRST_TASKS_DONE, args.runs, args.timeout)
            f["open_seconds"] = time.perf_counter() - t0
            f |= {f"{k}_cpu_ms_per_run": v for k, v in split.per(args.runs).items()}
            held = await cache_figures(conn, workers)
            f |= memory_figures(workers, base, peak, held, cap)
            split, t0 = CpuSplit(workers, url), time.perf_counter()
            await gathered(handles, lambda h: h.signal(SIGNAL))
            await wait_count(
                conn,
                text("SELECT count(*) FROM runs WHERE closed_at IS NOT NULL"),
                args.runs,
                args.timeout,
            )
            f["close_seconds"] = time.perf_counter() - t0
            f |= {f"{k}_cpu_ms_per_close": v for k, v in split.per(args.runs).items()}
            states = {str(r[0]): int(r[1]) for r in await conn.execute(RUN_STATES)}
            f["completed"] = float(states.get("completed", 0))
            f["wrong_results"] = float(wrong_results((await conn.execute(RESULTS)).all()))
            modes = await replay_modes(conn)
            done = await cache_figures(conn, workers)
            await conn.commit()
    finally:
        codes = await tear_down(client, workers, bench, prefix)
    # The closing task of a run still cached is a hit; of an evicted one, a cold replay.
    f["close_cache_hits"] = float(sum(c.get("hit_count", 0) for c in done))
    f["close_cold_replays"] = float(
        sum(c.get("miss_count", 0) + c.get("forced_cold_replay_count", 0) for c in done)
    )
    f["claims_sticky_hit_expected"] = float(modes.get("sticky_hit_expected", 0))
    f |= log_figures(workers, codes)
    return {f"{k}_{phase}": v for k, v in f.items()}


def wrong_results(rows: Sequence[Any]) -> int:
    """Completed runs whose result is not LongHistory's (the number of signals it took: 1)."""
    return sum(int(count) for result, count in rows if codec.decode(result) != 1)


async def start_runs(client: Client, args: argparse.Namespace) -> list[WorkflowHandle[Any]]:
    async def start(i: int) -> WorkflowHandle[Any]:
        return await client.start_workflow(
            LongHistory, args.events, 1, id=f"warm-{i}", task_queue=TASK_QUEUE, check_workers=False
        )

    return await gathered(range(args.runs), start)


def memory_figures(
    workers: Workers,
    base: dict[int, int],
    peak: RssPeak,
    held: Sequence[dict[str, Any]],
    cap: int,
) -> dict[str, float]:
    """Per worker and in all: RSS growth, cached runs, accounted bytes; growth per cached run."""
    f: dict[str, float] = {}
    growths, sizes, accounted = [], [], []
    for (worker_id, proc, _), cache in zip(workers, held, strict=True):
        growth = rss_bytes(proc.pid) - base[proc.pid]
        growths.append(growth)
        sizes.append(int(cache.get("size", 0)))
        accounted.append(int(cache.get("approximate_bytes", 0)))
        f[f"{worker_id}_rss_growth_mib"] = growth / MIB
        f[f"{worker_id}_peak_rss_growth_mib"] = (peak.peak[proc.pid] - base[proc.pid]) / MIB
        f[f"{worker_id}_cached_runs"] = float(sizes[-1])
        f[f"{worker_id}_accounted_mib"] = accounted[-1] / MIB
        f[f"{worker_id}_evictions"] = float(cache.get("eviction_count", 0))
    f["rss_growth_mib"] = sum(growths) / MIB
    f["cached_runs"] = float(sum(sizes))
    f["cap_mib_per_worker"] = cap / MIB
    f["max_rss_growth_over_cap"] = max(growths) / cap
    if sum(sizes):
        f["rss_bytes_per_cached_run"] = sum(growths) / sum(sizes)
        f["accounted_bytes_per_cached_run"] = sum(accounted) / sum(sizes)
    return f


async def measure_all(args: argparse.Namespace) -> dict[str, float]:
    figures: dict[str, float] = {}
    with bench_database(args.database_url, DATABASE) as url:
        for phase in args.phases:
            cap = UNCAPPED_BYTES if phase == "uncapped" else int(args.cap_mib * MIB)
            print(f"# {phase}: {args.runs} runs, {WORKERS} workers, cap {cap / MIB:.1f} MiB")
            figures |= await measure(args, url, phase, cap)
    if {"off", "uncapped"} <= set(args.phases) and figures["cached_runs_uncapped"]:
        net = figures["rss_growth_mib_uncapped"] - figures["rss_growth_mib_off"]
        figures["net_rss_bytes_per_cached_run"] = net * MIB / figures["cached_runs_uncapped"]
    if {"off", "capped"} <= set(args.phases):
        net = figures["rss_growth_mib_capped"] - figures["rss_growth_mib_off"]
        figures["net_rss_growth_over_cap_capped"] = (
            net / WORKERS / figures["cap_mib_per_worker_capped"]
        )
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--scale", type=float, default=1.0, help=f"runs = {RUNS:,} x scale")
    add("--events", type=int, default=10, help="side effects in each run's first task")
    add("--cap-mib", type=float, default=None, help="capped phase cap (default: 8 x scale MiB)")
    add("--phases", default="off,uncapped,capped", help="off, uncapped, capped")
    add("--concurrency", type=int, default=32, help="activity slots per worker")
    add("--workflow-concurrency", type=int, default=16, help="workflow task slots per worker")
    add("--timeout", type=float, default=900.0, help="seconds to open or close all runs")
    add("--database-url", default=None, help="dropped and recreated! default: a private server")
    add("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    args.runs = max(2, int(RUNS * args.scale))
    args.cap_mib = args.cap_mib if args.cap_mib is not None else max(0.25, 8 * args.scale)
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    if not args.phases or any(p not in ("off", "uncapped", "capped") for p in args.phases):
        parser.error("--phases: choose from off, uncapped, capped")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    print(f"# bench: warm_runs runs={args.runs} events={args.events} phases={args.phases}")
    figures = asyncio.run(measure_all(args))
    print_figures(figures)
    if args.json is not None:
        output = {"parameters": vars(args), "figures": figures}
        args.json.write_text(json.dumps(output, indent=2, default=str))
    ok = all(
        figures[f"completed_{p}"] == args.runs
        and not figures[f"wrong_results_{p}"]
        and not figures[f"worker_bad_exits_{p}"]
        for p in args.phases
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
