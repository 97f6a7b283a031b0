"""What the store's database layer costs per statement and per transaction, in client CPU.

The same trivial statement (`SELECT CAST($1 AS text), CAST($2 AS int), now()`) six ways, on one
connection of the shared Postgres: through SQLAlchemy's async engine (as the store runs its Core
statements), straight through asyncpg, and as the store runs its text statements (store/sql.py
inside `Transactions.begin`), each inside one open transaction and as its own transaction (checkout,
BEGIN, statement, COMMIT, checkin). CPU is this process's
`time.process_time()`: the machine's load lengthens wall time, not CPU (wall is printed too).

Run from the repo root: `python -m bench.store_overhead --statements 2000`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import sqlalchemy as sa
import uvloop

from burrow.store import Store, sql
from burrow.store.engine import create_engine

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
NAMED = "SELECT CAST(:a AS text) AS a, CAST(:b AS int) AS b, now() AS c"
POSITIONAL = "SELECT CAST($1 AS text) AS a, CAST($2 AS int) AS b, now() AS c"


async def _timed(label: str, n: int, body: Callable[[int], Awaitable[None]]) -> None:
    await body(-1)  # warm: prepared statement, codecs
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(n):
        await body(i)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    print(f"{label:42s} cpu {1e6 * cpu / n:6.0f} us  wall {1e6 * wall / n:6.0f} us", flush=True)


async def measure(url: str, n: int) -> None:
    engine = create_engine(url, pool_size=2)
    stmt = sa.text(NAMED)
    try:
        async with engine.connect() as conn:

            async def sqlalchemy_statement(i: int) -> None:
                (await conn.execute(stmt, {"a": "x", "b": i})).one()

            await _timed("sqlalchemy: statement in a transaction", n, sqlalchemy_statement)
            await conn.commit()

        async def sqlalchemy_transaction(i: int) -> None:
            async with engine.begin() as conn:
                (await conn.execute(stmt, {"a": "x", "b": i})).one()

        await _timed("sqlalchemy: transaction of one statement", n, sqlalchemy_transaction)
        async with engine.connect() as conn:
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None

            async def asyncpg_statement(i: int) -> None:
                await raw.fetchrow(POSITIONAL, "x", i)

            async def asyncpg_transaction(i: int) -> None:
                async with raw.transaction():
                    await raw.fetchrow(POSITIONAL, "x", i)

            await _timed("asyncpg: statement in a transaction", n, asyncpg_statement)
            await _timed("asyncpg: transaction of one statement", n, asyncpg_transaction)
        store = Store(engine)
        stored = sql.statement(NAMED)
        async with store.transactions.begin() as conn:

            async def store_statement(i: int) -> None:
                await sql.one(conn, stored, {"a": "x", "b": i})

            await _timed("store (sql.py): statement in a transaction", n, store_statement)

        async def store_transaction(i: int) -> None:
            async with store.transactions.begin() as conn:
                await sql.one(conn, stored, {"a": "x", "b": i})

        await _timed("store (sql.py): transaction of one statement", n, store_transaction)

        async def store_one_statement(i: int) -> None:
            async with store.transactions.one_statement() as conn:
                await sql.one(conn, stored, {"a": "x", "b": i})

        await _timed("store (sql.py): one statement, no block", n, store_one_statement)

        async def store_driven_statement(i: int) -> None:
            params = {"a": "x", "b": i}
            await store.transactions.statement(lambda txn: sql.one(txn.conn, stored, params))

        await _timed("store (sql.py): driven statement", n, store_driven_statement)
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        assert pool is not None
        try:

            async def asyncpg_pool_statement(i: int) -> None:
                async with pool.acquire() as raw:
                    await raw.fetchrow(POSITIONAL, "x", i)

            await _timed("asyncpg pool: one statement, no block", n, asyncpg_pool_statement)
        finally:
            await pool.close()
    finally:
        await engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_overhead", description=__doc__)
    parser.add_argument("--statements", type=int, default=2000, help="per way")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="read only; nothing written")
    args = parser.parse_args(argv)
    uvloop.run(measure(args.database_url, args.statements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
