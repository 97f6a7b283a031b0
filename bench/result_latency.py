"""Start-to-result latency: one workflow at a time, as a new user would measure it (issue 12).

One worker process runs `OneActivity`; the client starts a workflow, awaits `handle.result()`,
and starts the next. Two client modes alternate in pairs in one run:

- `wakes`: the client hears the run close from RabbitMQ (result wakes).
- `dropped`: every result wake is lost (the client's queue is bound to nothing), so only the
  fallback poll (`BURROW_RESULT_FALLBACK_SECONDS`, one query per interval for all waiters)
  answers; its p99 must stay bounded by that interval.

Run from the repo root: `python -m bench.result_latency --workflows 200 --pairs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, OneActivity
from bench.throughput import (
    DEFAULT_URL,
    check_bench_url,
    connect_client,
    cpu_seconds,
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

MODES = ("wakes", "dropped")


def drop_result_wakes(client: Client) -> None:
    """Lose every result wake of `client`, which still looks ready.

    Its queue is bound to keys nobody publishes, and its starts name a queue nobody reads.
    """
    listener = client.runs.listener
    assert listener is not None
    bind = listener.bind

    async def bind_elsewhere(key: str) -> bool:
        return await bind(f"dropped.{key}")

    listener.bind = bind_elsewhere  # type: ignore[method-assign]
    # Runs it starts name a queue nobody reads, so their closes are not sent to it either.
    client.runs.notify_queue = lambda: "dropped.nobody-reads-this"  # type: ignore[method-assign]


async def one_mode(client: Client, n: int, offset: int) -> list[float]:
    """Milliseconds from start_workflow() to result() for n workflows, one at a time."""
    latencies = []
    for i in range(n):
        t0 = time.perf_counter()
        handle = await client.start_workflow(
            OneActivity, i, id=f"lat-{offset + i}", task_queue=TASK_QUEUE, check_workers=False
        )
        assert await handle.result(timeout=60) == i + 1
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = {**wake_env(prefix, wakes=True), "BURROW_RESULT_FALLBACK_SECONDS": str(args.fallback)}
    await recreate_database(url)
    workers = start_workers(args, plain, 1, env=env, log_name="latency")
    clients = {mode: await connect_client(plain, env) for mode in MODES}
    drop_result_wakes(clients["dropped"])
    figures: dict[str, list[float]] = {f"{m}_{q}": [] for m in MODES for q in ("p50", "p99")}
    figures["worker_cpu_ms_per_workflow"] = []
    try:
        engine = create_async_engine(url, poolclass=NullPool)
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
        await engine.dispose()
        await one_mode(clients["wakes"], 20, 10_000_000)  # warm-up: connections, caches
        offset = 0
        for pair in range(args.pairs):
            for mode in MODES if pair % 2 == 0 else reversed(MODES):
                cpu0 = cpu_seconds(workers)
                latencies = await one_mode(clients[mode], args.workflows, offset)
                offset += args.workflows
                p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
                figures[f"{mode}_p50"].append(p50)
                figures[f"{mode}_p99"].append(p99)
                if mode == "wakes":
                    cpu = (cpu_seconds(workers) - cpu0) * 1000 / args.workflows
                    figures["worker_cpu_ms_per_workflow"].append(cpu)
                print(f"pair {pair + 1} {mode:8s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms", flush=True)
    finally:
        for client in clients.values():
            await client.close()
        stop_workers(workers)
        await delete_wake_topology(prefix)
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.result_latency", description=__doc__)
    parser.add_argument("--workflows", type=int, default=200, help="per mode and pair")
    parser.add_argument("--pairs", type=int, default=3, help="alternated (wakes, dropped) pairs")
    parser.add_argument("--fallback", type=float, default=0.5, help="fallback poll seconds")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
