"""List-query latency on a store of N runs (issue 30): the README's five queries, and their plans.

Seeds a private database (dropped and recreated) with N runs in one namespace plus N/10 in
another, with INSERT ... SELECT over generate_series: eight workflow types of uneven weight, five
task queues, statuses that depend on age (recent runs are more often running; about 4 % failed),
start times over 30 days, close times for closed runs, some build ids and child runs, and two
custom search attributes (`CustomerId` keyword on 60 % of runs, `Priority` int on 30 %). Then
VACUUM ANALYZE, and for each query, through the store's own list and count code: the first page
of 50, the next page (keyset), and the count, each over several repetitions (median, p95), and
`EXPLAIN (ANALYZE, BUFFERS)` of the first page and the count as the store sent them.

Run from the repo root: `python -m bench.list_queries --runs 1000000`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bench.throughput import admin_engine, check_bench_url, quiet_logging, recreate_database
from bench.wake_latency import percentile
from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import AttributeType, ListQuery, bind_list_query
from burrow.store import server_queries, visibility_sql
from burrow.store.workflow_views import RunFilter

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_list_queries"
NAMESPACE = "bench"
OTHER_NAMESPACE = "other"
PAGE = 50
CHUNK = 100_000
CUSTOM = {"CustomerId": AttributeType.KEYWORD, "Priority": AttributeType.INT}

# (workflow type, workflow id prefix, cumulative weight)
_TYPES = [
    ("Checkout", "order-", 0.30),
    ("Payment", "pay-", 0.50),
    ("Shipping", "ship-", 0.65),
    ("Refund", "refund-", 0.75),
    ("Email", "email-", 0.85),
    ("Report", "report-", 0.90),
    ("Onboarding", "onboard-", 0.95),
    ("Cleanup", "cleanup-", 1.00),
]
_QUEUES = ["orders", "orders", "payments", "shipping", "emails", "reports"]  # orders: 1 in 3
# Closed statuses by cumulative weight among closed runs.
_CLOSED = [
    ("failed", 0.04),
    ("cancelled", 0.06),
    ("terminated", 0.07),
    ("timed_out", 0.08),
    ("continued_as_new", 0.10),
    ("completed", 1.00),
]


def _case(variable: str, table: Sequence[tuple[str, float]]) -> str:
    """A CASE over a uniform `variable` picking each value with its cumulative weight.

    The values are this module's constants, never input.
    """
    arms = " ".join(f"WHEN {variable} < {weight} THEN '{value}'" for value, weight in table[:-1])
    return f"CASE {arms} ELSE '{table[-1][0]}' END"


_TYPE_CASE = _case("g.rt", [(name, weight) for name, _, weight in _TYPES])
_PREFIX_CASE = _case("g.rt", [(prefix, weight) for _, prefix, weight in _TYPES])
_QUEUE_ARRAY = "(ARRAY[" + ", ".join(f"'{q}'" for q in _QUEUES) + "])"

# Each run i of [lo, hi] starts at now() - (n - i) * span / n (plus up to a minute of jitter):
# the highest i is the newest. Runs of the last day are running 30 % of the time, older 1 %.
_SEED_RUNS = f"""
INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue, status, input,
                  created_at, closed_at, build_id, parent_workflow_id, parent_run_id)
SELECT gen_random_uuid(), :namespace, v.prefix || g.i, v.workflow_type,
       {_QUEUE_ARRAY}[1 + floor(g.rq * {len(_QUEUES)})::int], v.status, jsonb_build_array(g.i),
       v.created_at,
       CASE WHEN v.status = 'running' THEN NULL
            ELSE v.created_at + g.rx * interval '10 minutes' END,
       CASE WHEN g.rx < 0.2 THEN 'build-' || (g.i % 3) END,
       CASE WHEN g.i % 33 = 0 THEN 'order-' || (g.i - 1) END,
       CASE WHEN g.i % 33 = 0 THEN gen_random_uuid() END
FROM (
    SELECT i, random() AS rs, random() AS rt, random() AS rq, random() AS rx
    FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS i
) AS g
CROSS JOIN LATERAL (
    SELECT {_TYPE_CASE} AS workflow_type, {_PREFIX_CASE} AS prefix,
           c.created_at,
           CASE WHEN g.rs < CASE WHEN c.created_at > now() - interval '1 day' THEN 0.3 ELSE 0.01 END
                THEN 'running'
                ELSE {_case("((g.rs * 7919) - floor(g.rs * 7919))", _CLOSED)} END AS status
    FROM (SELECT now() - (CAST(:n AS bigint) - g.i) * (interval '30 days' / CAST(:n AS bigint))
                 - g.rx * interval '1 minute' AS created_at) AS c
) AS v
"""

_SEED_ATTRIBUTES = """
INSERT INTO run_search_attributes (run_id, namespace, name, ordinal, keyword_value, int_value)
SELECT run_id, namespace, 'CustomerId', 0, 'c-' || (abs(hashtext(workflow_id)) % 500), NULL
FROM runs WHERE namespace = :namespace AND abs(hashtext(workflow_id || '#')) % 10 < 6
UNION ALL
SELECT run_id, namespace, 'Priority', 0, NULL, abs(hashtext(workflow_id)) % 5
FROM runs WHERE namespace = :namespace AND abs(hashtext(workflow_id || '!')) % 10 < 3
"""


def queries(today: datetime) -> list[tuple[str, str]]:
    """(label, list query): the README's five, then the issue's example with a custom filter."""
    since = today.strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        (
            "type+start",
            f"WorkflowType = 'Checkout' AND StartTime >= '{since}' ORDER BY StartTime DESC",
        ),
        ("failed", "ExecutionStatus = 'Failed'"),
        ("id prefix", "WorkflowId STARTS_WITH 'order-'"),
        ("all, by status", "GROUP BY ExecutionStatus"),
        ("running+queue", "ExecutionStatus = 'Running' AND TaskQueue = 'orders'"),
        (
            "issue example",
            "ExecutionStatus = 'Running' AND WorkflowType = 'Checkout'"
            f" AND CustomerId = 'c-17' AND StartTime >= '{since}'",
        ),
    ]


async def seed(engine: AsyncEngine, runs: int) -> None:
    """N runs in NAMESPACE, N/10 in OTHER_NAMESPACE, their custom attributes, VACUUM ANALYZE."""
    started = time.monotonic()
    for namespace, n in ((NAMESPACE, runs), (OTHER_NAMESPACE, max(runs // 10, 1))):
        for lo in range(1, n + 1, CHUNK):
            hi = min(lo + CHUNK - 1, n)
            async with engine.begin() as conn:
                params = {"namespace": namespace, "lo": lo, "hi": hi, "n": n}
                await conn.execute(sa.text(_SEED_RUNS), params)
            print(f"# seeded {namespace} {hi:,}/{n:,} ({time.monotonic() - started:.0f} s)")
    async with engine.begin() as conn:
        for name, kind in CUSTOM.items():
            await conn.execute(
                sa.text(
                    "INSERT INTO search_attribute_definitions (namespace, name, type)"
                    " VALUES (:namespace, :name, :type)"
                ),
                {"namespace": NAMESPACE, "name": name, "type": kind.value},
            )
        await conn.execute(sa.text(_SEED_ATTRIBUTES), {"namespace": NAMESPACE})
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.exec_driver_sql("VACUUM ANALYZE runs")
        await conn.exec_driver_sql("VACUUM ANALYZE run_search_attributes")
    print(f"# seeded and vacuumed in {time.monotonic() - started:.0f} s")


@dataclass
class Captured:
    """The statements the store sent while capturing, with their parameters."""

    on: bool = False
    statements: list[tuple[str, Any]] | None = None

    @contextmanager
    def capturing(self) -> Iterator[list[tuple[str, Any]]]:
        self.on, self.statements = True, []
        try:
            yield self.statements
        finally:
            self.on = False


def capture(engine: AsyncEngine) -> Captured:
    captured = Captured()

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if captured.on and captured.statements is not None:
            captured.statements.append((statement, parameters))

    return captured


async def first_page(conn: AsyncConnection, query: ListQuery) -> server_queries.RunPage:
    return await server_queries.list_runs_page(
        conn, namespace=NAMESPACE, wanted=RunFilter(), workflow_type=None, after=None,
        limit=PAGE, query=query,
    )  # fmt: skip


async def timed(
    engine: AsyncEngine, repeats: int, call: Callable[[AsyncConnection], Awaitable[Any]]
) -> list[float]:
    """Milliseconds per call, each on a fresh transaction of one pooled connection."""
    times: list[float] = []
    async with engine.connect() as conn:
        for i in range(repeats + 1):
            started = time.perf_counter()
            await call(conn)
            elapsed = (time.perf_counter() - started) * 1000
            await conn.rollback()
            if i:  # the first one warms the statement cache
                times.append(elapsed)
    return times


async def explain(engine: AsyncEngine, statement: str, parameters: Any) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters or ()
        )
        return [row[0] for row in rows]


@dataclass
class Figures:
    label: str
    text: str
    shown: int
    count: int
    page_ms: list[float]
    next_ms: list[float]
    count_ms: list[float]
    plans: list[tuple[str, list[str]]]


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} {percentile(values, 0.95):8.2f}"


async def measure(
    engine: AsyncEngine, captured: Captured, label: str, text: str, repeats: int
) -> Figures:
    query = bind_list_query(parse_list_query(text), CUSTOM)
    async with engine.connect() as conn:
        page = await first_page(conn, query)
        counted = await visibility_sql.count_runs(conn, namespace=NAMESPACE, query=query)
    after = page.next_after

    async def next_page(conn: AsyncConnection) -> object:
        return await server_queries.list_runs_page(
            conn, namespace=NAMESPACE, wanted=RunFilter(), workflow_type=None, after=after,
            limit=PAGE, query=query,
        )  # fmt: skip

    async def count(conn: AsyncConnection) -> object:
        return await visibility_sql.count_runs(conn, namespace=NAMESPACE, query=query)

    page_ms = await timed(engine, repeats, lambda conn: first_page(conn, query))
    next_ms = await timed(engine, repeats, next_page) if after is not None else []
    count_ms = await timed(engine, repeats, count)
    plans: list[tuple[str, list[str]]] = []
    for what, call in (("first page", lambda c: first_page(c, query)), ("count", count)):
        with captured.capturing() as sent:
            async with engine.connect() as conn:
                await call(conn)
        statement, parameters = sent[-1]
        plans.append((what, await explain(engine, statement, parameters)))
    return Figures(label, text, len(page.runs), counted.count, page_ms, next_ms, count_ms, plans)


async def index_sizes(engine: AsyncEngine) -> list[tuple[str, str]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            sa.text(
                "SELECT indexrelid::regclass::text, pg_size_pretty(pg_relation_size(indexrelid))"
                " FROM pg_index WHERE indrelid = 'runs'::regclass ORDER BY 1"
            )
        )
        return [(str(name), str(size)) for name, size in rows]


def report(figures: list[Figures], runs: int, repeats: int) -> None:
    print(f"\n# list-query latency, {runs:,} runs in {NAMESPACE!r} (+{runs // 10:,} in another)")
    print(f"# ms, median and p95 over {repeats} repetitions; page = {PAGE} runs")
    print(
        f"{'query':<16} {'matches':>9} {'page p50':>8} {'p95':>8} {'next p50':>8} {'p95':>8}"
        f" {'count p50':>9} {'p95':>8}  seq scan"
    )
    for f in figures:
        nxt = summary(f.next_ms) if f.next_ms else f"{'-':>8} {'-':>8}"
        seq = any("Seq Scan on runs" in line for _, plan in f.plans for line in plan)
        print(
            f"{f.label:<16} {f.count:>9,} {summary(f.page_ms)} {nxt} {summary(f.count_ms):>17}"
            f"  {'YES' if seq else 'no'}"
        )
    for f in figures:
        print(f"\n## {f.label}: {f.text}")
        for what, plan in f.plans:
            print(f"-- {what}")
            print("\n".join(plan))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.list_queries", description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000, help="N runs in the namespace")
    parser.add_argument("--repeats", type=int, default=20, help="timed repetitions per figure")
    parser.add_argument(
        "--database-url", default=DEFAULT_URL, help="dropped and recreated (unless --reuse)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database a previous run seeded"
    )
    parser.add_argument("--keep", action="store_true", help="do not drop the database at the end")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    url = check_bench_url(args.database_url)
    if not args.reuse:
        await recreate_database(url)
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    try:
        if not args.reuse:
            await seed(engine, args.runs)
        captured = capture(engine)
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        figures = [
            await measure(engine, captured, label, text, args.repeats)
            for label, text in queries(today)
        ]
        report(figures, args.runs, args.repeats)
        print("\n# runs indexes")
        for name, size in await index_sizes(engine):
            print(f"{name:<44} {size}")
    finally:
        await engine.dispose()
    if not args.keep:
        admin = admin_engine(url)
        try:
            async with admin.connect() as conn:
                await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
        finally:
            await admin.dispose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
