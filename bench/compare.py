"""Burrow vs DBOS Transact on the same workload, alternated in one invocation (issue 12).

The workflow is the same on both sides: one step/activity `noop(i) -> i + 1`, whose result the
workflow returns. Two workloads, each measured once per pair on each side, the order of the
two sides reversed on even pairs:

- batch: a closed batch of N workflows through W worker processes, wall time from the first
  start to the last result (`python -m burrow worker bench.app:app` for Burrow; DBOS queue
  workers polling their queue every 10 ms, fed by a `DBOSClient`).
- latency: start -> result of M workflows, one at a time (Burrow: one worker process, result
  wakes; DBOS: in-process `DBOS.start_workflow`, and through the queue and one worker).

DBOS is installed only into a scratch venv outside the repository (`--dbos-venv`), and its
side runs there (`bench/peers/dbos_workload.py`): never into the project's environment.
That side is driven from bench/compare_dbos.py; the servers' CPU is read by bench/server_cpu.py.

Run from the repo root: `python -m bench.compare --pairs 3`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.compare_dbos import (
    DBOS_LATENCY_MODES,
    DEFAULT_DBOS_URL,
    add_dbos_arguments,
    check_dbos_url,
    dbos_batch,
    dbos_latency,
    ensure_dbos_venv,
    run_pairs,
)
from bench.result_latency import one_mode
from bench.server_cpu import Servers, per_workflow, server_figures, server_ports
from bench.throughput import (
    check_bench_url,
    connect_client,
    cpu_seconds,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_all,
    start_workers,
    stop_workers,
    wait_closed,
    wait_registered,
    wake_env,
)
from bench.wake_latency import percentile

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_compare"
LATENCY_WARMUP = 20
WORKLOADS = ("batch", "latency")


# ---- the Burrow side --------------------------------------------------------------------


def burrow_args(args: argparse.Namespace, workers: int) -> argparse.Namespace:
    """The namespace bench/throughput.py's start_workers() reads."""
    return argparse.Namespace(
        workflows=args.workflows,
        workers=workers,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
        timeout=args.timeout,
        prefix=None,
        no_wakes=False,
        sticky_cache_capacity=None,
    )


async def burrow_batch_async(args: argparse.Namespace, tag: str) -> dict[str, float]:
    """A closed batch as bench/throughput.py runs it, with this bench's CPU accounting."""
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    n = args.workflows
    await recreate_database(url)
    engine = create_async_engine(url, poolclass=NullPool)
    workers = start_workers(
        burrow_args(args, args.workers), plain, 0, env=env, log_name=f"compare-{tag}"
    )
    try:
        client = await connect_client(plain, env)
        try:
            async with engine.connect() as conn:
                await wait_registered(conn, workers)
                cpu0, servers0 = cpu_seconds(workers), args.servers.cpu()
                client0 = time.process_time()
                starts = asyncio.create_task(start_all(client, n))
                closed, _, wall = await wait_closed(conn, starts, n, args.timeout)
                cpu1, servers = cpu_seconds(workers), args.servers.since(servers0)
                client1 = time.process_time()
                row = (await conn.execute(text(BURROW_BATCH_STATS))).one()
                await conn.commit()
        finally:
            await client.close()
    finally:
        codes = stop_workers(workers)
        await engine.dispose()
        await delete_wake_topology(prefix)
    return {
        "completed": float(row[2]),
        "wall_seconds": wall,
        "workflows_per_second": closed / wall,
        "start_to_result_p50_ms": float(row[0] or 0.0),
        "start_to_result_p99_ms": float(row[1] or 0.0),
        "worker_cpu_ms_per_workflow": per_workflow(cpu1 - cpu0, n),
        "client_cpu_ms_per_workflow": per_workflow(client1 - client0, n),
        **server_figures(servers, n),
        "worker_bad_exits": float(sum(1 for c in codes if c != 0)),
    }


BURROW_BATCH_STATS = (
    "WITH l AS (SELECT extract(epoch FROM closed_at - created_at) * 1000 AS ms"
    " FROM runs WHERE closed_at IS NOT NULL)"
    " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
    " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),"
    " (SELECT count(*) FROM runs WHERE status = 'completed') FROM l"
)


async def burrow_latency_async(args: argparse.Namespace, tag: str) -> dict[str, float]:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    n = args.latency_workflows
    await recreate_database(url)
    workers = start_workers(burrow_args(args, 1), plain, 0, env=env, log_name=f"compare-{tag}")
    try:
        client = await connect_client(plain, env)
        try:
            engine = create_async_engine(url, poolclass=NullPool)
            async with engine.connect() as conn:
                await wait_registered(conn, workers)
            await engine.dispose()
            await one_mode(client, LATENCY_WARMUP, 10_000_000)  # connections, caches
            cpu0, servers0 = cpu_seconds(workers), args.servers.cpu()
            client0 = time.process_time()
            latencies = await one_mode(client, n, 0)
            cpu1, servers = cpu_seconds(workers), args.servers.since(servers0)
            client1 = time.process_time()
        finally:
            await client.close()
    finally:
        stop_workers(workers)
        await delete_wake_topology(prefix)
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
        "worker_cpu_ms_per_workflow": per_workflow(cpu1 - cpu0, n),
        "client_cpu_ms_per_workflow": per_workflow(client1 - client0, n),
        **server_figures(servers, n),
    }


# ---- alternation and report -------------------------------------------------------------


def show(pair: int, side: str, figures: dict[str, float]) -> None:
    shown = " ".join(f"{key}={value:.2f}" for key, value in figures.items())
    print(f"pair {pair} {side:24s} {shown}", flush=True)


def measure_pair(args: argparse.Namespace, pair: int) -> dict[str, dict[str, float]]:
    """One pair: every workload on both sides, Burrow first on odd pairs, DBOS first on even."""
    results: dict[str, dict[str, float]] = {}
    burrow_first = pair % 2 == 1
    for workload in args.workloads:
        sides: list[tuple[str, Any]]
        if workload == "batch":
            sides = [
                ("burrow batch", lambda: asyncio.run(burrow_batch_async(args, f"p{pair}-batch"))),
                ("dbos batch", lambda: dbos_batch(args, f"p{pair}-batch")),
            ]
        else:
            dbos_sides = [
                (f"dbos latency {mode}", lambda m=mode: dbos_latency(args, m, f"p{pair}-lat-{m}"))
                for mode in args.dbos_latency_modes
            ]
            burrow_side = (
                "burrow latency",
                lambda: asyncio.run(burrow_latency_async(args, f"p{pair}-latency")),
            )
            sides = [burrow_side, *dbos_sides]
        for side, run in sides if burrow_first else reversed(sides):
            results[side] = run()
            show(pair, side, results[side])
    return results


def ratios(pair: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per-pair ratios, each written so that > 1 means Burrow is better."""
    out: dict[str, float] = {}
    if "burrow batch" in pair:
        burrow, dbos = pair["burrow batch"], pair["dbos batch"]
        out["batch_throughput_burrow_over_dbos"] = (
            burrow["workflows_per_second"] / dbos["workflows_per_second"]
        )
    if "burrow latency" in pair:
        burrow = pair["burrow latency"]
        for side, figures in pair.items():
            if side.startswith("dbos latency "):
                mode = side.removeprefix("dbos latency ")
                for q in ("p50", "p99"):
                    out[f"latency_{q}_dbos_{mode}_over_burrow"] = (
                        figures[f"{q}_ms"] / burrow[f"{q}_ms"]
                    )
    return out


def summarize(pairs: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    medians = {
        side: {key: statistics.median(p[side][key] for p in pairs) for key in pairs[0][side]}
        for side in pairs[0]
    }
    per_pair = [ratios(p) for p in pairs]
    ratio_medians = {key: statistics.median(r[key] for r in per_pair) for key in per_pair[0]}
    return {"medians": medians, "ratios": per_pair, "ratio_medians": ratio_medians}


def targets(summary: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """Issue 12's targets, checked on the medians: (what, figure, met)."""
    out = []
    latency = summary["medians"].get("burrow latency")
    if latency is not None:
        out.append(
            ("burrow start->result p50 <= 10 ms", latency["p50_ms"], latency["p50_ms"] <= 10)
        )
        out.append(
            ("burrow start->result p99 <= 30 ms", latency["p99_ms"], latency["p99_ms"] <= 30)
        )
    ratio = summary["ratio_medians"].get("batch_throughput_burrow_over_dbos")
    if ratio is not None:
        out.append(("batch throughput >= 1.5x DBOS queue mode", ratio, ratio >= 1.5))
    return out


def report(summary: dict[str, Any]) -> None:
    print("median over pairs:")
    for side, figures in summary["medians"].items():
        print(f"  {side}:")
        for key, value in figures.items():
            print(f"    {key}: {value:.2f}")
    print("median of per-pair ratios (> 1: Burrow better):")
    for key, value in summary["ratio_medians"].items():
        print(f"  {key}: {value:.2f}")
    print("cpu ms per workflow (median; worker + client + postgres + broker):")
    for side, figures in summary["medians"].items():
        parts = [
            figures["worker_cpu_ms_per_workflow"],
            figures["client_cpu_ms_per_workflow"],
            figures["postgres_cpu_ms_per_workflow"],
            figures["broker_cpu_ms_per_workflow"],
        ]
        split = " + ".join(f"{part:.2f}" for part in parts)
        print(f"  {side}: {split} = {sum(parts):.2f}")
    print("targets:")
    for what, value, met in targets(summary):
        print(f"  {what}: {value:.2f} {'met' if met else 'NOT met'}")


def csv(choices: Sequence[str]) -> Any:
    def parse(value: str) -> list[str]:
        items = [item.strip() for item in value.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return items

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--pairs", type=int, default=3, help="alternated pairs P")
    parser.add_argument("--workflows", type=int, default=1000, help="N workflows per batch")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per batch")
    parser.add_argument("--latency-workflows", type=int, default=200, help="M, one at a time")
    parser.add_argument(
        "--workloads", type=csv(WORKLOADS), default=list(WORKLOADS), help="batch,latency"
    )
    parser.add_argument(
        "--dbos-latency-modes",
        type=csv(DBOS_LATENCY_MODES),
        default=list(DBOS_LATENCY_MODES),
        help="inprocess,queue",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="Burrow activity slots")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="Burrow, per worker")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per batch")
    parser.add_argument(
        "--database-url", default=DEFAULT_URL, help="Burrow's; dropped and recreated!"
    )
    add_dbos_arguments(parser, DEFAULT_DBOS_URL)
    parser.add_argument("--dbos-poll", type=float, default=0.01, help="DBOS queue polling s")
    parser.add_argument(
        "--dbos-result-poll",
        type=float,
        default=0.01,
        help="DBOS get_result polling s (latency through the queue)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    check_bench_url(args.database_url)
    check_dbos_url(args.dbos_database_url)
    quiet_logging()
    args.dbos_python = ensure_dbos_venv(args.dbos_venv, args.dbos_version)
    args.servers = Servers(server_ports(args.database_url))
    print(
        f"# compare: pairs={args.pairs} workloads={','.join(args.workloads)}"
        f" workflows={args.workflows} workers={args.workers}"
        f" latency_workflows={args.latency_workflows}"
        f" dbos={args.dbos_version} dbos_poll={args.dbos_poll}s"
        f" dbos_latency_modes={','.join(args.dbos_latency_modes)}",
        flush=True,
    )
    return run_pairs(args, measure_pair, summarize, report)


if __name__ == "__main__":
    sys.exit(main())
