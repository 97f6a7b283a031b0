"""Retention purge beside live work: does deleting old runs block claims? (issue 30)

Seeds N runs in namespace `old`, closed 40 days ago (each with its history events and its
completed workflow task), and gives `old` a 7-day retention. One worker process runs
`OneActivity` workflows in `default`. The client measures start -> result of one workflow at a
time (two workflow task claims, an activity claim, three completions): with nothing else
running (before), while retention purges every expired run (`Store.purge_expired_runs`, the
repair pass's step, called back to back with `--batch`; the worker's own repair pass purges
beside it), and after. Reports p50/p99 of each phase and the purge rate, and checks that no
row of an expired run is left and nothing of `default` was deleted.

Run from the repo root: `python -m bench.retention_purge --runs 1000000`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bench.result_latency import one_mode
from bench.throughput import (
    check_bench_url,
    connect_client,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
)
from bench.wake_latency import percentile
from burrow.client import Client
from burrow.store import Store

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_retention"
CHUNK = 100_000
EVENTS_PER_RUN = 4

_SEED_RUNS = """
INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue, status, input,
                  created_at, closed_at, last_event_seq)
SELECT gen_random_uuid(), 'old', 'old-' || i, 'Checkout', 'q', 'completed', '[]'::jsonb,
       now() - interval '41 days' + i * interval '1 millisecond',
       now() - interval '40 days' + i * interval '1 millisecond', :events
FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i
"""
_SEED_HISTORY = """
INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key)
SELECT r.run_id, e, 'SideEffectRecorded', jsonb_build_object('sequence', e), 'seed:' || e
FROM runs r CROSS JOIN generate_series(1, :events) AS e
WHERE r.namespace = 'old' AND r.workflow_id = ANY(CAST(:ids AS text[]))
"""
_SEED_TASKS = """
INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection, queue, state)
SELECT gen_random_uuid(), r.run_id, r.workflow_type, r.namespace, 'default', r.task_queue,
       'completed'
FROM runs r WHERE r.namespace = 'old' AND r.workflow_id = ANY(CAST(:ids AS text[]))
"""


async def seed(engine: AsyncEngine, runs: int) -> None:
    started = time.monotonic()
    for lo in range(1, runs + 1, CHUNK):
        hi = min(lo + CHUNK - 1, runs)
        ids = [f"old-{i}" for i in range(lo, hi + 1)]
        async with engine.begin() as conn:
            await conn.execute(sa.text(_SEED_RUNS), {"lo": lo, "hi": hi, "events": EVENTS_PER_RUN})
            await conn.execute(sa.text(_SEED_HISTORY), {"ids": ids, "events": EVENTS_PER_RUN})
            await conn.execute(sa.text(_SEED_TASKS), {"ids": ids})
        print(f"# seeded {hi:,}/{runs:,} ({time.monotonic() - started:.0f} s)", flush=True)
    async with engine.begin() as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO namespaces (name, retention_days) VALUES ('old', 7)"
                " ON CONFLICT (name) DO UPDATE SET retention_days = 7"
            )
        )
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for table in ("runs", "history_events", "workflow_tasks"):
            await conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
    print(f"# seeded and vacuumed in {time.monotonic() - started:.0f} s", flush=True)


def figures(label: str, latencies: list[float]) -> dict[str, float]:
    p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
    print(f"{label:14s} n {len(latencies):5d}  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms", flush=True)
    return {"p50": p50, "p99": p99}


async def during_purge(
    client: Client, store: Store, batch: int, offset: int
) -> tuple[list[float], int, float]:
    """Latencies measured while the purge runs, how many runs it deleted, and in what time."""
    done = asyncio.Event()
    deleted = 0

    async def purge() -> None:
        nonlocal deleted
        while True:
            n = await store.purge_expired_runs(batch=batch)
            deleted += n
            if n == 0:
                done.set()
                return

    t0 = time.monotonic()
    purger = asyncio.create_task(purge())
    latencies: list[float] = []
    while not done.is_set():
        latencies += await one_mode(client, 20, offset + len(latencies))
    await purger
    return latencies, deleted, time.monotonic() - t0


async def measure(args: argparse.Namespace) -> int:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    await recreate_database(url)
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    await seed(engine, args.runs)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    workers = start_workers(args, plain, 1, env=env, log_name="retention")
    client = await connect_client(plain, env)
    store = Store.connect(plain, pool_size=2)
    try:
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
        await one_mode(client, 20, 10_000_000)  # warm-up
        before = figures("before", await one_mode(client, args.workflows, 0))
        latencies, deleted, seconds = await during_purge(client, store, args.batch, 100_000)
        during = figures("during purge", latencies)
        figures("after", await one_mode(client, args.workflows, 1_000_000))
        print(
            f"purged {deleted:,} runs in {seconds:.1f} s: {deleted / seconds:,.0f} runs/s"
            f" (batch {args.batch})"
        )
        print(
            f"p99 during / before: {during['p99'] / before['p99']:.2f};"
            f" p50 during / before: {during['p50'] / before['p50']:.2f}"
        )
        async with engine.connect() as conn:
            left = (
                await conn.execute(
                    sa.text(
                        "SELECT (SELECT count(*) FROM runs WHERE namespace = 'old'),"
                        " (SELECT count(*) FROM history_events h WHERE NOT EXISTS"
                        "   (SELECT 1 FROM runs r WHERE r.run_id = h.run_id)),"
                        " (SELECT count(*) FROM runs WHERE namespace = 'default')"
                    )
                )
            ).one()
        print(
            f"left: old runs {left[0]}, orphaned history events {left[1]}, default runs {left[2]}"
            f"; the worker's repair pass purged the other {args.runs - deleted:,}"
        )
        # The worker's own pass purges beside the bench's calls: what counts is that none is left.
        return 0 if left[0] == 0 and left[1] == 0 else 1
    finally:
        await client.close()
        await store.close()
        stop_workers(workers)
        await delete_wake_topology(prefix)
        await engine.dispose()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.retention_purge", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000, help="expired runs to purge")
    parser.add_argument("--batch", type=int, default=1000, help="runs per purge call")
    parser.add_argument("--workflows", type=int, default=300, help="per baseline phase")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workflow-concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    args.workers = 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    return asyncio.run(measure(args))


if __name__ == "__main__":
    sys.exit(main())
