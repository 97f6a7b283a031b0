"""Does Burrow's cost stay flat as its store grows? An empty store against a big one, alternated.

On a private Postgres (with pg_stat_statements) two databases: `scale_empty`, only migrated,
and `scale_big`, seeded with 1,000,000 closed runs and 10,000 open ones (times `--scale`) by
running a few real workflows of each shape and cloning their rows set-wise (bench/store_seed.py).
Then phases alternate between the two stores, each with fresh worker processes: `--workflows`
OneActivity workflows one at a time (start -> result, as bench/result_latency.py), and per
phase the workflow-task claim latency (claimed_at - available_at of the measured runs' tasks),
commits per workflow (pg_stat_database.xact_commit), the CPU split, and Postgres statement time
per workflow by statement (pg_stat_statements, reset per phase). The report gives the medians
over rounds for each store, big / empty ratios, and the statements whose time grew most.

Run from the repo root: `python -m bench.store_scale` (`--scale 0.01` for a quick check).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL

from bench.result_latency import one_mode
from bench.scale_common import (
    CpuSplit,
    Statement,
    add_setting_argument,
    bench_engine,
    enable_statements,
    private_postgres,
    reset_statements,
    seed_big_store,
    statements,
    table_sizes,
)
from bench.throughput import (
    admin_engine,
    connect_client,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
    xact_counters,
)
from bench.wake_latency import percentile
from burrow.store.engine import async_url

STORES = ("empty", "big")
CLOSED_RUNS = 1_000_000
OPEN_RUNS = 10_000
WARMUP = 20
TARGET_RATIO = 1.2

# The measured runs' workflow tasks (ids lat-<lo>.. lat-<hi>), claim latency in ms.
_CLAIMS = sa.text(
    "SELECT extract(epoch FROM w.claimed_at - w.available_at) * 1000 FROM workflow_tasks w"
    " JOIN runs r USING (run_id) WHERE r.workflow_id = ANY(:ids) AND w.claimed_at IS NOT NULL"
)


async def phase(
    args: argparse.Namespace, url: URL, offset: int
) -> tuple[dict[str, float], dict[str, Statement]]:
    """One store, fresh workers: the figures of `args.workflows` workflows, one at a time."""
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    workers = start_workers(args, plain, 0, env=env, log_name=f"scale-{url.database}")
    admin = admin_engine(url)
    engine = bench_engine(url)
    client = await connect_client(plain, env)
    n = args.workflows
    try:
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
        await one_mode(client, WARMUP, offset + 500_000)  # connections, caches, sticky workers
        cpu = CpuSplit(plain, workers)
        await reset_statements(admin)
        before = await xact_counters(admin, str(url.database))
        cpu.start()
        latencies = await one_mode(client, n, offset)
        split = cpu.per_item_ms(n)
        after = await xact_counters(admin, str(url.database))
        found = await statements(admin, str(url.database))
        async with engine.connect() as conn:
            ids = [f"lat-{offset + i}" for i in range(n)]
            claims = [float(v) for v in (await conn.execute(_CLAIMS, {"ids": ids})).scalars()]
    finally:
        await client.close()
        stop_workers(workers)
        await engine.dispose()
        await admin.dispose()
        await delete_wake_topology(prefix)
    figures = {
        "claim_p50_ms": percentile(claims, 0.5),
        "claim_p99_ms": percentile(claims, 0.99),
        "start_to_result_p50_ms": statistics.median(latencies),
        "start_to_result_p99_ms": percentile(latencies, 0.99),
        "commits_per_workflow": (after[0] - before[0]) / n,
        "statement_ms_per_workflow": sum(s.total_ms for s in found.values()) / n,
        **{f"{key}_per_workflow": value for key, value in split.items()},
    }
    return figures, found


def growth(
    empty: dict[str, Statement], big: dict[str, Statement], n: int, top: int
) -> list[tuple[float, float, float, str]]:
    """(big ms/wf, empty ms/wf, rows per call in big, query) of the statements that grew most."""
    rows = []
    for query, stmt in big.items():
        small = empty.get(query)
        small_ms = small.total_ms / n if small else 0.0
        rows.append((stmt.total_ms / n, small_ms, stmt.rows / max(stmt.calls, 1), query))
    rows.sort(key=lambda r: r[0] - r[1], reverse=True)
    return rows[:top]


def report(args: argparse.Namespace, rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict]:
    medians = {
        store: {k: statistics.median(r[store][k] for r in rounds) for k in rounds[0][store]}
        for store in STORES
    }
    print(f"\n# medians over {len(rounds)} rounds; {args.workflows} workflows per phase")
    print(f"{'figure':<34} {'empty':>10} {'big':>10} {'big/empty':>10}")
    ratios = {}
    for key, small in medians["empty"].items():
        big = medians["big"][key]
        ratios[key] = big / small if small else float("nan")
        print(f"{key:<34} {small:10.2f} {big:10.2f} {ratios[key]:10.2f}")
    watched = ("claim_p50_ms", "claim_p99_ms", "start_to_result_p50_ms", "commits_per_workflow")
    over = [k for k in watched if ratios[k] > TARGET_RATIO]
    print(f"within {TARGET_RATIO - 1:.0%}: {'yes' if not over else 'no: ' + ', '.join(over)}")
    return {"median": medians, "ratio_big_to_empty": ratios}


async def run(args: argparse.Namespace) -> int:
    closed, open_runs = int(CLOSED_RUNS * args.scale), int(OPEN_RUNS * args.scale)
    print(f"# store scale: closed={closed:,} open={open_runs:,} workflows={args.workflows}")
    with private_postgres(args.setting) as server:
        await enable_statements(server)
        urls = {store: async_url(server.url(f"scale_{store}")) for store in STORES}
        for url in urls.values():
            await recreate_database(url)
        await seed_big_store(args, urls["big"], closed=closed, open_runs=open_runs)
        sizes = await table_sizes(urls["big"])
        print("# big store rows: " + ", ".join(f"{k}={v:,}" for k, v in sorted(sizes.items())))
        rounds: list[dict[str, dict[str, float]]] = []
        last: dict[str, dict[str, Statement]] = {}
        offset = 0
        for r in range(args.rounds):
            figures: dict[str, dict[str, float]] = {}
            for store in STORES if r % 2 == 0 else reversed(STORES):
                offset += 1_000_000
                figures[store], last[store] = await phase(args, urls[store], offset)
                shown = {k: round(v, 2) for k, v in figures[store].items() if "cpu" not in k}
                print(f"round {r + 1} {store:5s} {shown}", flush=True)
            rounds.append(figures)
        summary = report(args, rounds)
        print("\n# statements that grew most (last round): ms/wf big, empty; rows/call in big")
        for big_ms, small_ms, rows, query in growth(
            last["empty"], last["big"], args.workflows, args.top
        ):
            print(f"{big_ms:8.3f} {small_ms:8.3f} {rows:8.1f}  {query[:110]}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"parameters": vars(args), "big_store_rows": sizes, "rounds": rounds, **summary},
                indent=2,
                default=str,
            )
        )
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store_scale", description=__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="x 1M closed, 10k open runs")
    parser.add_argument("--workflows", type=int, default=200, help="measured per phase")
    parser.add_argument("--rounds", type=int, default=2, help="alternated (empty, big) rounds")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per phase")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workflow-concurrency", type=int, default=16)
    parser.add_argument("--top", type=int, default=10, help="grown statements to list")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    add_setting_argument(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
