"""Where Postgres spends its time per workflow: the throughput bench on a private server that
keeps `pg_stat_statements`, then the statements by total time (planning and execution).

Run from the repo root: `python -m bench.statements --workflows 1000 --workers 2`.
The private server runs with fsync off (bench/services.py), so commits cost no disk flush here:
this prices the statements' CPU, not the WAL's I/O. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass

import asyncpg

from bench import throughput
from bench.services import close_postgres, new_private_postgres

SETTINGS = (
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=all",
    "pg_stat_statements.track_planning=on",
    "pg_stat_statements.max=2000",
)
DATABASE = "burrow_bench"
WIDTH = 110


@dataclass(frozen=True)
class Statement:
    """One normalised statement's totals."""

    query: str
    calls: int
    plans: int
    exec_ms: float
    plan_ms: float

    @property
    def total_ms(self) -> float:
        return self.exec_ms + self.plan_ms


async def statements(url: str) -> list[Statement]:
    """Every statement the server saw in the bench database, busiest first."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            """
            SELECT query, calls, plans, total_exec_time, total_plan_time
            FROM pg_stat_statements JOIN pg_database d ON d.oid = dbid
            WHERE d.datname = $1
            ORDER BY total_exec_time + total_plan_time DESC
            """,
            DATABASE,
        )
    finally:
        await conn.close()
    return [
        Statement(
            " ".join(r["query"].split()),
            r["calls"],
            r["plans"],
            r["total_exec_time"],
            r["total_plan_time"],
        )
        for r in rows
    ]


async def enable(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    finally:
        await conn.close()


def report(found: list[Statement], workflows: int, top: int) -> None:
    """Per workflow: calls, execution and planning time of each busy statement, then totals."""
    total = sum(s.total_ms for s in found)
    calls = sum(s.calls for s in found)
    print(
        f"postgres statement time per workflow: {total / workflows:.3f} ms"
        f" in {calls / workflows:.1f} calls"
        f" (planning {sum(s.plan_ms for s in found) / workflows:.3f} ms)"
    )
    print(
        f"{'calls/wf':>8} {'exec ms/wf':>10} {'plan ms/wf':>10} {'plans/call':>10}"
        f" {'us/call':>8}  statement"
    )
    for s in found[:top]:
        per_call = 1000 * s.total_ms / max(s.calls, 1)
        print(
            f"{s.calls / workflows:8.2f} {s.exec_ms / workflows:10.3f}"
            f" {s.plan_ms / workflows:10.3f} {s.plans / max(s.calls, 1):10.2f}"
            f" {per_call:8.0f}  {s.query[:WIDTH]}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--top", type=int, default=25, help="statements to list")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        help="an extra server setting, name=value (repeatable), e.g. synchronous_commit=off",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    server, root = new_private_postgres([*SETTINGS, *args.setting])
    try:
        server.start()
        admin = server.url("postgres")
        asyncio.run(enable(admin))
        code = throughput.main(
            [
                "--workflows",
                str(args.workflows),
                "--workers",
                str(args.workers),
                "--database-url",
                server.url(DATABASE),
            ]
        )
        report(asyncio.run(statements(admin)), args.workflows, args.top)
        return code
    finally:
        close_postgres(server, root)


if __name__ == "__main__":
    sys.exit(main())
