"""Local against queued activities: the same ten steps, wall time and Postgres commits (A3).

One worker process runs `TenLocal` (ten `noop` local activities, run inside one workflow task),
`TenQueued` (the same ten steps as queued activities: ten activity tasks and eleven workflow
tasks), `TenMixed` (five queued steps, each followed by a local one) and `NoSteps` (the same
result with no step: the cost every workflow pays, a start, one workflow task and its result).
The client runs N workflows of one kind one at a time (start, then `result()`), then N of the
next, in alternated rounds. Per kind it reports the median start-to-result time, the Postgres
commits per workflow on the bench database (everything: client, worker, background lease
renewals and heartbeats) and per workflow task. Besides the ratio of whole workflows it prints
that of the steps alone: each kind's time less NoSteps' in the same round.

Run from the repo root: `python -m bench.local_activities --workflows 50 --pairs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import STEPS, TASK_QUEUE, NoSteps, TenLocal, TenMixed, TenQueued
from bench.throughput import (
    DEFAULT_URL,
    admin_engine,
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
    xact_counters,
)
from burrow.client import Client

KINDS: dict[str, type[TenLocal | TenQueued | TenMixed | NoSteps]] = {
    "local": TenLocal,
    "queued": TenQueued,
    "mixed": TenMixed,
    "none": NoSteps,
}


async def run_kind(client: Client, kind: str, n: int, offset: int) -> list[float]:
    """Milliseconds from start to result for n workflows of one kind, one at a time."""
    workflow = KINDS[kind]
    latencies = []
    for i in range(n):
        t0 = time.perf_counter()
        handle = await client.start_workflow(
            workflow.run, i, id=f"{kind}-{offset + i}", task_queue=TASK_QUEUE, check_workers=False
        )
        assert await handle.result(timeout=120) == i + STEPS
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    await recreate_database(url)
    workers = start_workers(args, plain, 1, env=env, log_name="local-activities")
    client = await connect_client(plain, env)
    admin = admin_engine(url)
    bench = create_async_engine(url, poolclass=NullPool)
    figures: dict[str, list[float]] = {
        f"{kind}_{what}": []
        for kind in KINDS
        for what in ("ms_p50", "commits_per_workflow", "commits_per_workflow_task")
    }
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
        await run_kind(client, "local", 5, 1_000_000)  # warm-up
        await run_kind(client, "queued", 5, 2_000_000)
        await run_kind(client, "mixed", 5, 3_000_000)
        await run_kind(client, "none", 5, 4_000_000)
        offset = 0
        for pair in range(args.pairs):
            for kind in KINDS if pair % 2 == 0 else reversed(list(KINDS)):
                tasks0 = await _workflow_tasks(bench)
                commits0, _, _ = await xact_counters(admin, str(url.database))
                latencies = await run_kind(client, kind, args.workflows, offset)
                commits1, _, _ = await xact_counters(admin, str(url.database))
                tasks = await _workflow_tasks(bench) - tasks0
                offset += args.workflows
                # The two counter reads commit nothing on the bench database (admin connects
                # to `postgres`); the task count read does, once each: subtract them.
                commits = commits1 - commits0 - 1
                p50 = statistics.median(latencies)
                figures[f"{kind}_ms_p50"].append(p50)
                figures[f"{kind}_commits_per_workflow"].append(commits / args.workflows)
                figures[f"{kind}_commits_per_workflow_task"].append(commits / tasks)
                print(
                    f"pair {pair + 1} {kind:6s} p50 {p50:7.2f} ms"
                    f"  commits/workflow {commits / args.workflows:6.2f}"
                    f"  workflow tasks/workflow {tasks / args.workflows:5.2f}",
                    flush=True,
                )
    finally:
        await client.close()
        stop_workers(workers)
        await admin.dispose()
        await bench.dispose()
        await delete_wake_topology(prefix)
    return figures


async def _workflow_tasks(bench: AsyncEngine) -> int:
    async with bench.connect() as conn:
        return int((await conn.execute(text("SELECT count(*) FROM workflow_tasks"))).scalar_one())


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.local_activities", description=__doc__)
    parser.add_argument("--workflows", type=int, default=50, help="per kind and pair")
    parser.add_argument("--pairs", type=int, default=3, help="alternated (local, queued) pairs")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workflow-concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    args.workers = 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    figures = asyncio.run(measure(args))
    print("median over pairs:")
    for key, values in figures.items():
        print(f"  {key}: {statistics.median(values):.2f}")
    local, queued, none = (figures[f"{k}_ms_p50"] for k in ("local", "queued", "none"))
    ratios = [q / loc for loc, q in zip(local, queued, strict=True)]
    print(f"  queued/local time, median pair ratio: {statistics.median(ratios):.2f}")
    # Each kind's time over NoSteps' in the same pair: what its ten steps themselves cost.
    steps = [(q - n) / (loc - n) for loc, q, n in zip(local, queued, none, strict=True) if loc > n]
    if steps:
        ratio = statistics.median(steps)
        print(f"  queued/local time of the steps alone, median pair ratio: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
