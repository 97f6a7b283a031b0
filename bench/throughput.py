"""Throughput benchmark: N one-activity workflows through W real worker processes.

Run from the repo root: `python -m bench.throughput --workflows 1000 --workers 2`.
See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aio_pika
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, OneActivity
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from burrow.client import Client
from burrow.config import Settings
from burrow.logging import configure_logging
from burrow.store import migrate
from burrow.store.engine import async_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench"
STATS_SETTLE_SECONDS = 1.1  # backends flush their stats at most once a second (PG15+)
IDLE_SAMPLE_SECONDS = 2.0
POLL_SECONDS = 0.05
MAX_IN_FLIGHT_STARTS = 64
BROKER_CLEANUP_SECONDS = 10.0


def new_prefix() -> str:
    """A RabbitMQ name prefix of the bench's own, so runs never share wake queues."""
    return f"bench-{uuid.uuid4().hex[:8]}"


def wake_env(prefix: str, *, wakes: bool, repoll_seconds: float | None = None) -> dict[str, str]:
    """BURROW_* variables for the wake path: on or off, under `prefix`."""
    env = {"BURROW_AMQP_PREFIX": prefix, "BURROW_WAKES": "1" if wakes else "0"}
    if repoll_seconds is not None:
        env["BURROW_REPOLL_INTERVAL_SECONDS"] = str(repoll_seconds)
    return env


def env_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings a process started with os.environ plus `env` would use."""
    return Settings.from_env({**os.environ, **(env or {})})


async def connect_client(url: str, env: Mapping[str, str] | None = None) -> Client:
    """Client.connect as a process with os.environ plus `env` would do it."""
    return await Client.connect(url, environ={**os.environ, **(env or {})})


def wake_queue_names(prefix: str) -> dict[TaskKind, str]:
    """The wake queue of each task kind of the bench's task queue, under `prefix`."""
    settings = env_settings()
    topology = Topology(prefix=prefix)
    return {
        kind: topology.queue_name(
            namespace=settings.namespace, connection="default", queue=TASK_QUEUE, kind=kind
        )
        for kind in TaskKind
    }


async def delete_wake_topology(prefix: str) -> None:
    """Delete the bench task queue's wake queues and the exchange of a bench-owned prefix.

    Best effort: a broker problem is reported on stderr, never raised.
    """
    if not prefix.startswith("bench-"):
        raise ValueError(f"refusing to delete the wake topology of prefix {prefix!r}")
    try:
        async with asyncio.timeout(BROKER_CLEANUP_SECONDS):
            connection = await aio_pika.connect(env_settings().amqp_urls[0])
            async with connection:
                channel = await connection.channel()
                for name in wake_queue_names(prefix).values():
                    await channel.queue_delete(name)
                await channel.exchange_delete(Topology(prefix=prefix).exchange_name)
    except Exception as exc:
        print(f"# could not delete wake topology {prefix}.*: {exc!r}", file=sys.stderr)


def admin_engine(url: URL) -> AsyncEngine:
    """An engine on the `postgres` database: its queries do not count in the bench db's stats."""
    return create_async_engine(
        url.set(database="postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool
    )


async def recreate_database(url: URL) -> None:
    quoted = '"' + str(url.database).replace('"', '""') + '"'
    admin = admin_engine(url)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
            await conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
    finally:
        await admin.dispose()
    await migrate.upgrade(url.render_as_string(hide_password=False))


async def drop_database(url: URL) -> None:
    """Drop the bench's database (its connections ended first)."""
    quoted = '"' + str(url.database).replace('"', '""') + '"'
    admin = admin_engine(url)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
    finally:
        await admin.dispose()


async def xact_counters(admin: AsyncEngine, name: str) -> tuple[int, int, float]:
    """(xact_commit, xact_rollback, when) of the database, after letting backends flush stats."""
    await asyncio.sleep(STATS_SETTLE_SECONDS)
    async with admin.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = :n"),
                {"n": name},
            )
        ).one()
    return int(row[0]), int(row[1]), time.monotonic()


def start_workers(
    args: argparse.Namespace,
    url: str,
    run: int,
    *,
    env: Mapping[str, str] | None = None,
    log_name: str | None = None,
    worker_args: Sequence[str] = (),
    app: str = "bench.app:app",
) -> list[tuple[str, Any, Path]]:
    """Start args.workers worker processes of `app` with os.environ plus `env`.

    `worker_args` are appended to each `burrow worker` command line. Logs go to
    bench/results/{log_name}-bench-w{i}.log (log_name defaults to run{run}).
    """
    env = {
        **os.environ,
        **(env or {}),
        "BURROW_DATABASE_URL": url,
        "BURROW_LOG_LEVEL": "WARNING",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    workers = []
    for i in range(args.workers):
        worker_id = f"bench-w{i}"
        log_path = RESULTS / f"{log_name or f'run{run}'}-{worker_id}.log"
        cmd = [sys.executable, "-m", "burrow", "worker", app, "--worker-id", worker_id]
        cmd += ["--concurrency", str(args.concurrency)]
        cmd += ["--workflow-concurrency", str(args.workflow_concurrency)]
        cmd += worker_args
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        workers.append((worker_id, proc, log_path))
    return workers


async def wait_registered(conn: AsyncConnection, workers: list[tuple[str, Any, Path]]) -> None:
    ids = [worker_id for worker_id, _, _ in workers]
    query = text(
        "SELECT count(*) FROM worker_registrations WHERE state = 'active' AND worker_id = ANY(:ids)"
    )
    deadline = time.monotonic() + 60
    while (await conn.execute(query, {"ids": ids})).scalar_one() < len(ids):
        for worker_id, proc, log_path in workers:
            if proc.poll() is not None:
                raise SystemExit(f"worker {worker_id} exited {proc.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            raise SystemExit("workers did not register within 60 s")
        await asyncio.sleep(0.1)


def cpu_seconds(workers: list[tuple[str, Any, Path]]) -> float:
    """User+system CPU the worker processes used so far (Linux /proc; NaN elsewhere)."""
    try:
        return sum(_proc_cpu(p.pid) for _, p, _ in workers)
    except OSError:
        return float("nan")


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SERVER_COMMANDS = {"postgres": ("postgres",), "broker": ("beam.smp",)}


def server_cpu_seconds() -> dict[str, float]:
    """CPU so far of the local Postgres and RabbitMQ processes, by /proc/*/comm (NaN if none).

    Machine-wide: other databases' backends count too, so run it on an otherwise idle machine.
    A backend that exits inside the window takes its CPU with it (the pools here do not churn).
    """
    totals = {name: 0.0 for name in SERVER_COMMANDS}
    seen = {name: False for name in SERVER_COMMANDS}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            for name, commands in SERVER_COMMANDS.items():
                if comm in commands:
                    totals[name] += _proc_cpu(int(proc.name))
                    seen[name] = True
        except OSError:
            continue  # exited meanwhile
    return {name: totals[name] if seen[name] else float("nan") for name in totals}


def stop_workers(workers: list[tuple[str, Any, Path]]) -> list[int | None]:
    for _, proc, _ in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for _, proc, _ in workers:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.returncode for _, proc, _ in workers]


async def start_all(client: Client, n: int) -> tuple[int, float]:
    """Start N workflows, at most MAX_IN_FLIGHT_STARTS in flight: (how many failed, seconds)."""
    t0 = time.perf_counter()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)

    async def one(i: int) -> None:
        async with gate:
            await client.start_workflow(
                OneActivity, i, id=f"bench-{i}", task_queue=TASK_QUEUE, check_workers=False
            )

    outcomes = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        print(f"# {len(failed)} starts failed, first: {failed[0]!r}", file=sys.stderr)
    return len(failed), time.perf_counter() - t0


async def wait_closed(
    conn: AsyncConnection, starts: asyncio.Task[Any], n: int, timeout: float
) -> tuple[int, int, float]:
    """Poll until every started run closed: (closed, failed starts, seconds since called).

    `starts` must return a tuple whose first item is how many starts failed (they never close).
    On timeout `starts` is cancelled (and failed starts read as 0 if it was still running).
    """
    done_query = text("SELECT count(*) FROM runs WHERE status <> 'running'")
    t0 = time.perf_counter()
    closed, failed_starts = 0, 0
    while time.perf_counter() - t0 < timeout:
        closed = (await conn.execute(done_query)).scalar_one()
        if starts.done():
            failed_starts = starts.result()[0]  # failed starts never close
            if closed >= n - failed_starts:
                break
        await asyncio.sleep(POLL_SECONDS)
    wall = time.perf_counter() - t0
    starts.cancel()  # only on timeout: it is done otherwise
    await asyncio.gather(starts, return_exceptions=True)
    return closed, failed_starts, wall


async def measure(args: argparse.Namespace, url: URL, run: int) -> dict[str, float]:
    plain_url = url.render_as_string(hide_password=False)
    name = str(url.database)
    n = args.workflows
    prefix = args.prefix or new_prefix()
    env = wake_env(prefix, wakes=not args.no_wakes)
    capacity = "default" if args.sticky_cache_capacity is None else args.sticky_cache_capacity
    print(
        f"# run {run}: wakes={'off' if args.no_wakes else 'on'} amqp_prefix={prefix}"
        f" sticky_cache_capacity={capacity}",
        flush=True,
    )
    await recreate_database(url)
    admin = admin_engine(url)
    bench = create_async_engine(url, poolclass=NullPool)
    workers = start_workers(
        args, plain_url, run, env=env, worker_args=sticky_args(args.sticky_cache_capacity)
    )
    client = await connect_client(plain_url, env)
    try:
        # One read-committed transaction for all of the bench's own reads of the bench database:
        # every statement sees fresh data, and the whole thing commits once, after the window.
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            idle_start = await xact_counters(admin, name)
            await asyncio.sleep(IDLE_SAMPLE_SECONDS - STATS_SETTLE_SECONDS)
            before = await xact_counters(admin, name)
            cpu_before, client_before = cpu_seconds(workers), time.process_time()
            servers_before = server_cpu_seconds()
            idle_rate = (before[0] - idle_start[0]) / (before[2] - idle_start[2])

            starts = asyncio.create_task(start_all(client, n))
            closed, failed_starts, wall = await wait_closed(conn, starts, n, args.timeout)
            cpu_after, client_after = cpu_seconds(workers), time.process_time()
            servers_after = server_cpu_seconds()
            after = await xact_counters(admin, name)
            stats = (
                await conn.execute(
                    text(
                        "WITH l AS (SELECT extract(epoch FROM closed_at - created_at) * 1000 AS ms"
                        " FROM runs WHERE closed_at IS NOT NULL)"
                        " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
                        " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms),"
                        " (SELECT count(*) FROM runs WHERE status = 'completed') FROM l"
                    )
                )
            ).one()
            await conn.commit()
    finally:
        await client.close()
        codes = stop_workers(workers)
        await bench.dispose()
        await admin.dispose()
        if args.prefix is None and not args.no_wakes:  # our own prefix: remove its queues
            await delete_wake_topology(prefix)
    log_lines = sum(len(p.read_text().splitlines()) for _, _, p in workers)
    print(
        f"# run {run}: wall={wall:.2f}s closed={closed} completed={stats[3]}"
        f" worker_exit_codes={codes} worker_log_lines={log_lines} (logs: {RESULTS}/run{run}-*)"
    )
    return {
        "completed": float(stats[3]),
        "wall_seconds": wall,
        "start_seconds": float("nan") if starts.cancelled() else starts.result()[1],
        "failed_starts": float(failed_starts),
        "workflows_per_second": closed / wall,
        "start_to_result_p50_ms": float(stats[0] or 0.0),
        "start_to_result_p99_ms": float(stats[1] or 0.0),
        "start_to_result_max_ms": float(stats[2] or 0.0),
        "commits_per_workflow": (after[0] - before[0]) / args.workflows,
        "rollbacks_per_workflow": (after[1] - before[1]) / args.workflows,
        "background_commits_idle_per_second": idle_rate,
        "worker_cpu_ms_per_workflow": (cpu_after - cpu_before) * 1000 / args.workflows,
        "client_cpu_ms_per_workflow": (client_after - client_before) * 1000 / args.workflows,
        **{
            f"{name}_cpu_ms_per_workflow": (servers_after[name] - servers_before[name])
            * 1000
            / args.workflows
            for name in SERVER_COMMANDS
        },
        "worker_log_lines": float(log_lines),
        "worker_bad_exits": float(sum(1 for c in codes if c != 0)),
    }


def quiet_logging() -> None:
    """Keep the bench's stdout to its figures: only warnings, on stderr, and no AMQP tracebacks.

    aiormq logs a traceback on stderr whenever the broker drops a connection; the client's own
    `broker_connection_lost` warning (and the worker logs) already say so.
    """
    configure_logging(level="WARNING")
    for name in ("aiormq", "aio_pika"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def check_bench_url(database_url: str) -> URL:
    """The async URL of a database the bench may drop; refuses the well-known ones."""
    url = async_url(database_url)
    if url.database in (None, "burrow", "postgres", "template0", "template1"):
        raise SystemExit(f"refusing to drop database {url.database!r}; use a bench database")
    return url


def sticky_args(capacity: int | None) -> list[str]:
    """The worker flags for a sticky cache capacity (None: the worker's default)."""
    return [] if capacity is None else ["--sticky-cache-capacity", str(capacity)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    parser.add_argument("--workflows", type=int, default=1000, help="N workflows per run")
    parser.add_argument("--workers", type=int, default=2, help="W worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="activity slots per worker")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="per worker")
    parser.add_argument("--runs", type=int, default=1, help="repeat R times; report medians")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    parser.add_argument(
        "--no-wakes",
        action="store_true",
        help="BURROW_WAKES=0 for workers and client: pure durable polling, no broker",
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help="BURROW_AMQP_PREFIX for workers and client (default: bench-<hex>, new per run,"
        " deleted afterwards)",
    )
    parser.add_argument(
        "--sticky-cache-capacity",
        type=int,
        default=None,
        help="--sticky-cache-capacity of the workers (default: theirs); 0 turns sticky"
        " execution off: every workflow task is a cold replay",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url = check_bench_url(args.database_url)
    quiet_logging()
    print(
        f"# bench: workflows={args.workflows} workers={args.workers}"
        f" concurrency={args.concurrency} workflow_concurrency={args.workflow_concurrency}"
        f" runs={args.runs} database={url.database}",
        flush=True,
    )
    runs = [asyncio.run(measure(args, url, r + 1)) for r in range(args.runs)]
    medians = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    worst = min(int(run["completed"]) for run in runs)
    print(f"completed: {worst}/{args.workflows}")
    for key, value in medians.items():
        if key != "completed":
            print(f"{key}: {value:.2f}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"parameters": vars(args), "runs": runs, "median": medians}, indent=2, default=str
            )
        )
    return 0 if worst == args.workflows else 1


if __name__ == "__main__":
    sys.exit(main())
