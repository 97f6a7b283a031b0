"""Capacity model: what one Postgres primary carries, from what a workflow costs it.

Two measurements on a private Postgres with production durability (fsync, full page writes,
synchronous commit on; bench/services.py starts it, the shared server is never touched):

1. Per workflow. N one-activity workflows (bench/app.py) through W real worker processes:
   commits, WAL bytes and stored bytes (database growth, after VACUUM) per workflow, and the
   primary's CPU per workflow (its postmaster's process tree).
2. The primary's commit rate. `pgbench` with a transaction shaped like the store's (an event row
   of about the size of a history event, and an update of its run's row), at several client
   counts.

The model divides: a primary carries at most `commits/s / commits per workflow` workflows a
second by its commit rate, and `cores * 1000 / cpu ms per workflow` by its CPU; WAL and storage
follow from the bytes per workflow. On this 2-core machine pgbench, the workers and Postgres
share the cores, so the rates are lower bounds for a primary with cores of its own.

Run from the repo root: `python -m bench.capacity --workflows 2000 --workers 2`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.server_cpu import tree_cpu
from bench.services import PG_BIN_ROOT, PrivatePostgres, close_postgres, new_private_postgres
from bench.throughput import (
    connect_client,
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
from burrow.store.engine import async_url

DURABLE = ("fsync=on", "full_page_writes=on", "synchronous_commit=on", "max_connections=200")
PGBENCH_SETUP = """
DROP TABLE IF EXISTS cap_events, cap_runs;
CREATE TABLE cap_runs (id int PRIMARY KEY, last_seq int NOT NULL DEFAULT 0);
CREATE TABLE cap_events (run int NOT NULL, seq int NOT NULL, payload text NOT NULL,
                         PRIMARY KEY (run, seq));
INSERT INTO cap_runs SELECT g FROM generate_series(1, 100000) AS g;
"""
# One store-shaped commit: append an event of about 300 bytes, move its run's counter.
PGBENCH_SCRIPT = """
\\set run random(1, 100000)
BEGIN;
UPDATE cap_runs SET last_seq = last_seq + 1 WHERE id = :run;
INSERT INTO cap_events SELECT :run, last_seq, repeat('x', 300) FROM cap_runs WHERE id = :run;
COMMIT;
"""


@dataclass(frozen=True, slots=True)
class PerWorkflow:
    """What one completed one-activity workflow cost the primary."""

    workflows: int
    workflows_per_second: float
    commits: float
    write_transactions: float
    wal_bytes: float
    stored_bytes: float
    postgres_cpu_ms: float


@dataclass(frozen=True, slots=True)
class CommitRate:
    """pgbench's store-shaped transactions per second at one client count."""

    clients: int
    commits_per_second: float
    postgres_cpu_ms_per_commit: float


def pgbench_path(server: PrivatePostgres) -> str:
    """pgbench beside the server's binaries, else on PATH, else under /usr/lib/postgresql."""
    candidates = [server.bin_dir / "pgbench", *sorted(PG_BIN_ROOT.glob("*/bin/pgbench"))]
    found = next((str(c) for c in candidates if c.exists()), shutil.which("pgbench"))
    if found is None:
        raise SystemExit("no pgbench on this machine")
    return found


def postmaster_pid(server: PrivatePostgres) -> int:
    return int((server.data / "postmaster.pid").read_text().split()[0])


async def scalar(engine: AsyncEngine, query: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text(query))).scalar_one())


async def stored_bytes(engine: AsyncEngine) -> int:
    """The database's size after a VACUUM: dead row versions do not count as stored."""
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM"))
        return int(
            (await conn.execute(text("SELECT pg_database_size(current_database())"))).scalar_one()
        )


IDLE_FLUSH_SECONDS = 11.0  # an idle backend flushes its stats within 10 s (PG15+)
NEXT_XID = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"


async def commits(engine: AsyncEngine) -> int:
    """The database's commits so far, as far as backends have flushed their stats."""
    await asyncio.sleep(1.1)  # a busy backend flushes at most once a second
    return await scalar(
        engine, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )


async def per_workflow(args: argparse.Namespace, server: PrivatePostgres) -> PerWorkflow:
    """Run `args.workflows` workflows and divide what the primary did by them."""
    url = async_url(server.url("burrow_capacity"))
    plain = url.render_as_string(hide_password=False)
    await recreate_database(url)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    engine = create_async_engine(url, poolclass=NullPool)
    workers = start_workers(args, plain, 1, env=env, log_name="capacity")
    client = await connect_client(plain, env)
    pid = postmaster_pid(server)
    try:
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
            await conn.commit()
        await asyncio.sleep(IDLE_FLUSH_SECONDS)  # the workers' start-up commits are counted
        size0 = await stored_bytes(engine)
        wal0 = await scalar(engine, "SELECT pg_current_wal_lsn() - '0/0'")
        commits0, xid0, cpu0 = await commits(engine), await scalar(engine, NEXT_XID), tree_cpu(pid)
        starts = asyncio.create_task(start_all(client, args.workflows))
        async with engine.connect() as conn:
            closed, failed, wall = await wait_closed(conn, starts, args.workflows, args.timeout)
            await conn.commit()
        cpu1, xid1 = tree_cpu(pid), await scalar(engine, NEXT_XID)
        wal1 = await scalar(engine, "SELECT pg_current_wal_lsn() - '0/0'")
        await client.close()
        stop_workers(workers)  # a backend flushes its stats when its connection ends
        commits1 = await commits(engine)
        size1 = await stored_bytes(engine)
    finally:
        await client.close()
        stop_workers(workers)
        await engine.dispose()
        await delete_wake_topology(prefix)
    if failed or closed < args.workflows:
        raise SystemExit(f"only {closed} of {args.workflows} workflows closed ({failed} failed)")
    n = args.workflows
    return PerWorkflow(
        workflows=n,
        workflows_per_second=n / wall,
        commits=(commits1 - commits0) / n,
        write_transactions=(xid1 - xid0) / n,
        wal_bytes=(wal1 - wal0) / n,
        stored_bytes=(size1 - size0) / n,
        postgres_cpu_ms=(cpu1 - cpu0) * 1000 / n,
    )


def pgbench(server: PrivatePostgres, clients: int, seconds: float) -> CommitRate:
    """pgbench's rate of store-shaped commits with `clients` connections."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(PGBENCH_SCRIPT)
    Path(script.name).chmod(0o644)
    pid = postmaster_pid(server)
    cpu0 = tree_cpu(pid)
    done = subprocess.run(
        [pgbench_path(server), "-n", "-f", script.name, "-c", str(clients),
         "-j", str(min(clients, 2)), "-T", str(int(seconds)), "-M", "prepared",
         server.url("burrow_capacity_pgbench")],
        capture_output=True, text=True, check=True, timeout=seconds + 120,
    )  # fmt: skip
    time.sleep(0.5)  # the postmaster reaps pgbench's backends (their CPU moves to it) meanwhile
    cpu = tree_cpu(pid) - cpu0
    Path(script.name).unlink()
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if found is None:
        raise SystemExit(f"pgbench printed no rate:\n{done.stdout}\n{done.stderr}")
    rate = float(found.group(1))
    return CommitRate(clients, rate, cpu * 1000 / max(1.0, rate * seconds))


async def prepare_pgbench(server: PrivatePostgres) -> None:
    admin = create_async_engine(
        async_url(server.url("postgres")), isolation_level="AUTOCOMMIT", poolclass=NullPool
    )
    async with admin.connect() as conn:
        await conn.execute(text("DROP DATABASE IF EXISTS burrow_capacity_pgbench"))
        await conn.execute(text("CREATE DATABASE burrow_capacity_pgbench"))
    await admin.dispose()
    engine = create_async_engine(
        async_url(server.url("burrow_capacity_pgbench")), poolclass=NullPool
    )
    async with engine.begin() as conn:
        for statement in filter(str.strip, PGBENCH_SETUP.split(";")):
            await conn.execute(text(statement))
    await engine.dispose()


def model(cost: PerWorkflow, rates: list[CommitRate], cores: int) -> dict[str, float]:
    """What one primary carries, by its best measured commit rate and by its CPU."""
    best = max(rates, key=lambda r: r.commits_per_second)
    # Only writing transactions wait for a WAL flush; pgbench's are all writing.
    by_commits = best.commits_per_second / cost.write_transactions
    by_cpu = cores * 1000 / cost.postgres_cpu_ms
    carried = min(by_commits, by_cpu)
    return {
        "best_commits_per_second": best.commits_per_second,
        "workflows_per_second_by_commit_rate": by_commits,
        "workflows_per_second_by_cpu": by_cpu,
        "workflows_per_second_carried": carried,
        "wal_mb_per_second_at_that_rate": carried * cost.wal_bytes / 1e6,
        "stored_gb_per_day_at_that_rate": carried * cost.stored_bytes * 86400 / 1e9,
        "stored_gb_per_million_workflows": cost.stored_bytes * 1e6 / 1e9,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__)
    parser.add_argument("--workflows", type=int, default=2000, help="N workflows measured")
    parser.add_argument("--workers", type=int, default=2, help="W worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="activity slots per worker")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="per worker")
    parser.add_argument("--clients", default="1,8,32", help="pgbench client counts")
    parser.add_argument("--seconds", type=float, default=15.0, help="pgbench seconds per count")
    parser.add_argument("--cores", type=int, default=2, help="cores the model gives the primary")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the batch")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    server, root = new_private_postgres(DURABLE)
    try:
        server.start()
        cost = asyncio.run(per_workflow(args, server))
        print(
            f"per workflow: {cost.commits:.2f} commits ({cost.write_transactions:.2f} writing),"
            f" {cost.wal_bytes / 1024:.1f} KiB WAL,"
            f" {cost.stored_bytes / 1024:.1f} KiB stored, {cost.postgres_cpu_ms:.2f} ms"
            f" postgres CPU ({cost.workflows} workflows at {cost.workflows_per_second:.0f}/s)",
            flush=True,
        )
        asyncio.run(prepare_pgbench(server))
        rates = []
        for clients in (int(c) for c in args.clients.split(",")):
            rate = pgbench(server, clients, args.seconds)
            rates.append(rate)
            print(
                f"pgbench {clients:3d} clients: {rate.commits_per_second:8.0f} commits/s,"
                f" {rate.postgres_cpu_ms_per_commit:.3f} ms postgres CPU per commit",
                flush=True,
            )
    finally:
        close_postgres(server, root)
    figures = model(cost, rates, args.cores)
    for key, value in figures.items():
        print(f"{key}: {value:.1f}")
    if args.json is not None:
        document = {
            "parameters": vars(args),
            "per_workflow": asdict(cost),
            "commit_rates": [asdict(r) for r in rates],
            "model": figures,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        args.json.write_text(json.dumps(document, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
