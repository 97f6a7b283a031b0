"""What the store-scale and timer-scale benches share: a private Postgres that keeps
`pg_stat_statements`, its per-database statement totals, seeding a big store, and the CPU split.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench import store_seed
from bench.server_cpu import Servers, server_ports
from bench.services import PrivatePostgres, close_postgres, new_private_postgres
from bench.statements import SETTINGS as STATEMENT_SETTINGS
from bench.throughput import (
    admin_engine,
    connect_client,
    cpu_seconds,
    delete_wake_topology,
    new_prefix,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
)
from burrow.store.engine import async_url

# Room for the seeding's bulk writes without a checkpoint storm; the rest stays default.
SERVER_SETTINGS = (*STATEMENT_SETTINGS, "max_wal_size=8GB", "checkpoint_timeout=30min")


@contextmanager
def private_postgres(settings: Sequence[str] = ()) -> Iterator[PrivatePostgres]:
    """A started private Postgres with pg_stat_statements (and `settings`), removed afterwards."""
    server, root = new_private_postgres((*SERVER_SETTINGS, *settings))
    try:
        server.start()
        yield server
    finally:
        close_postgres(server, root)


async def enable_statements(server: PrivatePostgres) -> None:
    engine = admin_engine(async_url(server.url("postgres")))
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    finally:
        await engine.dispose()


@dataclass(frozen=True)
class Statement:
    query: str
    calls: int
    total_ms: float  # execution and planning
    rows: int


async def reset_statements(admin: AsyncEngine) -> None:
    async with admin.connect() as conn:
        await conn.exec_driver_sql("SELECT pg_stat_statements_reset()")


async def statements(admin: AsyncEngine, database: str) -> dict[str, Statement]:
    """The statements one database ran since the last reset, by normalised text."""
    async with admin.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT query, calls, total_exec_time + total_plan_time, rows"
                " FROM pg_stat_statements JOIN pg_database d ON d.oid = dbid"
                " WHERE d.datname = :name"
            ),
            {"name": database},
        )
        found: dict[str, Statement] = {}
        for query, calls, total, count in rows:
            text = " ".join(str(query).split())
            old = found.get(text)
            if old is not None:  # the same text under another user or top-level flag
                calls, total, count = calls + old.calls, total + old.total_ms, count + old.rows
            found[text] = Statement(text, int(calls), float(total), int(count))
        return found


def bench_engine(url: URL) -> AsyncEngine:
    return create_async_engine(url, poolclass=NullPool)


async def seed_big_store(
    args: argparse.Namespace,
    url: URL,
    *,
    closed: int,
    open_runs: int,
    timers: store_seed.TimerSpread | None = None,
    timer_runs: int = 0,
) -> store_seed.Templates:
    """Run the templates with one real worker, then clone them into `closed` + `open_runs` runs.

    Closed copies spread over 30 days. With `timers`, `timer_runs` further copies of the
    sleeping template get their timer's fire time from it.
    """
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    seeding = argparse.Namespace(**{**vars(args), "workers": 1})
    workers = start_workers(seeding, plain, 0, env=env, log_name="seed")
    engine = bench_engine(url)
    client = await connect_client(plain, env)
    started = time.monotonic()
    try:
        async with engine.connect() as conn:
            await wait_registered(conn, workers)
        templates = await store_seed.run_templates(client, engine)
    finally:
        await client.close()
        stop_workers(workers)
        await delete_wake_topology(prefix)
    try:
        await clone_exactly(engine, templates.closed, closed, spread_days=30.0, label="closed")
        per_open = await clone_exactly(engine, templates.open, open_runs, label="open")
        if timers is not None:
            await store_seed.clone_runs(
                engine,
                templates.sleeping,
                timer_runs,
                first_copy=per_open + 1,  # after the open copies: ids stay unique
                timers=timers,
                label="timers",
            )
        await store_seed.analyze(engine)
    finally:
        await engine.dispose()
    print(f"# seeded in {time.monotonic() - started:.0f} s", flush=True)
    return templates


async def clone_exactly(
    engine: AsyncEngine, templates: list[str], runs: int, *, spread_days: float = 0.0, label: str
) -> int:
    """`runs` copies in all, spread over the templates; returns the copies per template."""
    per, extra = divmod(runs, len(templates))
    await store_seed.clone_runs(engine, templates, per, spread_days=spread_days, label=label)
    # One more copy of the first templates, moved back as far as copy `per + 1` would be.
    step_days = spread_days / max(per, 1)
    await store_seed.clone_runs(
        engine, templates[:extra], 1, first_copy=per + 1, spread_days=step_days, label=label
    )
    return per + (1 if extra else 0)


async def table_sizes(url: URL) -> dict[str, int]:
    """Row estimates of the cloned tables (after ANALYZE), to show what the store holds."""
    engine = bench_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                sa.text(
                    "SELECT relname, reltuples::bigint FROM pg_class"
                    " WHERE relname = ANY(:names) AND relkind = 'r'"
                ),
                {"names": [t.name for t, _ in store_seed.run_tables()]},
            )
            return {str(name): max(int(n), 0) for name, n in rows}
    finally:
        await engine.dispose()


class CpuSplit:
    """CPU of the worker processes, this process, and the Postgres and broker servers."""

    def __init__(self, database_url: str, workers: list[tuple[str, Any, Any]]) -> None:
        self.servers = Servers(server_ports(database_url))
        self.workers = workers
        self._start: tuple[float, float, dict[str, float]] = (0.0, 0.0, {})

    def start(self) -> None:
        self._start = (cpu_seconds(self.workers), time.process_time(), self.servers.cpu())

    def per_item_ms(self, items: int) -> dict[str, float]:
        worker0, client0, servers0 = self._start
        servers = self.servers.since(servers0)
        out = {
            "worker_cpu_ms": (cpu_seconds(self.workers) - worker0) * 1000 / items,
            "client_cpu_ms": (time.process_time() - client0) * 1000 / items,
        }
        out.update({f"{name}_cpu_ms": seconds * 1000 / items for name, seconds in servers.items()})
        return out


def add_setting_argument(parser: argparse.ArgumentParser) -> None:
    """`--setting name=value` (repeatable): extra settings of the bench's private server."""
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="an extra server setting, name=value (repeatable), e.g. shared_buffers=1GB",
    )
