"""The store's transactions run on the driver's connection: what commits, what rolls back, and
what happens when the server ends pooled connections."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest
import sqlalchemy as sa

from burrow.store import Store, sql
from burrow.store import errors as store_errors
from burrow.store.transactions import Txn
from burrow.testing import assert_eventually

POOL = 3


@dataclass
class Named:
    """A store whose connections carry a name of their own, so a test can end just them."""

    store: Store
    application_name: str


@pytest.fixture
async def named(database_url: str) -> AsyncIterator[Named]:
    name = f"burrow-test-{uuid.uuid4().hex[:8]}"
    store = Store.connect(database_url, pool_size=POOL, application_name=name)
    yield Named(store, name)
    await store.close()


async def _fill_pool(store: Store) -> None:
    """Open every pooled connection (each call holds one while the others start)."""

    async def hold() -> None:
        async with store.transactions.begin() as conn:
            await conn.execute(sa.text("SELECT pg_sleep(0.2)"))

    await asyncio.gather(*(hold() for _ in range(POOL)))


async def _end_connections(database_url: str, application_name: str) -> int:
    """pg_terminate_backend (57P01) on every connection of that name; how many."""
    admin = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        ended = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = $1",
            application_name,
        )
        return int(ended)
    finally:
        await admin.close()


async def _backends_gone(database_url: str, application_name: str) -> bool:
    admin = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        left = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", application_name
        )
        return int(left) == 0
    finally:
        await admin.close()


async def _closed_runs(store: Store) -> object:
    """A one-statement read of text SQL."""
    return await store.closed_runs([str(uuid.uuid4())])


async def _session(store: Store) -> object:
    """A transaction of text SQL."""
    return await store.get_worker_session(namespace="default", session_id="none")


_ONE = sql.statement("SELECT 1 AS one")


async def _driven(store: Store) -> object:
    """A one-statement read on a driven connection (the hot path's `Transactions.statement`)."""
    return await store.transactions.statement(lambda txn: sql.fetch(txn.conn, _ONE))


async def _run(store: Store) -> object:
    """A one-statement read of Core SQL."""
    with pytest.raises(store_errors.NotFound):
        await store.get_run(namespace="default", workflow_id="none")
    return None


@pytest.mark.parametrize(
    "call",
    [_closed_runs, _session, _run, _driven],
    ids=["one_statement", "transaction", "core", "driven"],
)
async def test_after_the_server_ends_the_pools_connections_the_next_calls_reconnect(
    named: Named, database_url: str, call: Callable[[Store], Awaitable[object]]
) -> None:
    """Issue 25 item 10: a pooled connection the server ended (a restart) is replaced at checkout,
    so no call fails on it with "connection is closed"."""
    await _fill_pool(named.store)
    assert await _end_connections(database_url, named.application_name) == POOL
    # Once the backends are gone, the client has read their goodbyes (while awaiting this).
    await assert_eventually(lambda: _backends_gone(database_url, named.application_name))

    for _ in range(POOL + 1):
        await call(named.store)


_SCRATCH = sa.table("scratch", sa.column("n", sa.Integer))
_INSERT_TEXT = sql.statement("INSERT INTO scratch (n) VALUES (:n)")
_COUNT = sql.statement("SELECT count(*) FROM scratch")


class _Abandon(Exception):
    pass


async def _scratch_rows(store: Store) -> int:
    async with store.transactions.one_statement() as conn:
        return int(await sql.scalar_one(conn, _COUNT))


@pytest.fixture
async def scratch(store: Store) -> Store:
    async with store.transactions.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE scratch (n int)"))
    return store


async def test_core_and_text_statements_of_one_transaction_commit_together(scratch: Store) -> None:
    """Store invariant 3: one transaction, whichever layer runs each statement."""
    async with scratch.transactions.begin() as conn:
        await conn.execute(sa.insert(_SCRATCH).values(n=1))
        await sql.execute(conn, _INSERT_TEXT, {"n": 2})
        assert await sql.scalar_one(conn, _COUNT) == 2  # each sees the other's write

    assert await _scratch_rows(scratch) == 2


async def test_core_and_text_statements_of_one_transaction_roll_back_together(
    scratch: Store,
) -> None:
    """Store invariant 3: an error after both wrote leaves neither write."""
    with pytest.raises(_Abandon):
        async with scratch.transactions.begin() as conn:
            await sql.execute(conn, _INSERT_TEXT, {"n": 1})
            await conn.execute(sa.insert(_SCRATCH).values(n=2))
            await sql.execute(conn, _INSERT_TEXT, {"n": 3})
            raise _Abandon

    assert await _scratch_rows(scratch) == 0


async def test_a_failed_statement_rolls_back_the_writes_before_it(scratch: Store) -> None:
    with pytest.raises(asyncpg.UniqueViolationError):
        async with scratch.transactions.begin() as conn:
            await conn.execute(sa.insert(_SCRATCH).values(n=1))
            await conn.execute(sa.text("CREATE UNIQUE INDEX ON scratch (n)"))
            await sql.execute(conn, _INSERT_TEXT, {"n": 1})

    assert await _scratch_rows(scratch) == 0


async def test_a_rolled_back_transaction_leaves_nothing(scratch: Store) -> None:
    """What explain_session_admission relies on: its writes are never committed."""
    async with scratch.transactions.begin(commit=False) as conn:
        await conn.execute(sa.insert(_SCRATCH).values(n=1))
        await sql.execute(conn, _INSERT_TEXT, {"n": 2})

    assert await _scratch_rows(scratch) == 0


async def test_text_statement_errors_are_translated_like_core_ones(store: Store) -> None:
    """A missing table is DatabaseNotReady on either path (errors.translate_db_errors)."""
    missing = sql.statement("SELECT n FROM no_such_table WHERE n = :n")
    with pytest.raises(store_errors.DatabaseNotReady, match="burrow migrate"):
        async with store.transactions.one_statement() as conn:
            await sql.fetch(conn, missing, {"n": 1})
    with pytest.raises(store_errors.DatabaseNotReady, match="burrow migrate"):
        async with store.transactions.begin() as conn:
            await conn.execute(sa.text("SELECT n FROM no_such_table"))
    with pytest.raises(store_errors.DatabaseNotReady, match="burrow migrate"):
        await store.transactions.statement(lambda txn: sql.fetch(txn.conn, missing, {"n": 1}))


async def test_a_driven_statement_left_in_a_transaction_never_returns_to_the_pool(
    named: Named,
) -> None:
    """A single statement never opens a transaction block; if one is left open anyway, its
    connection is dropped rather than handed to the next caller mid-transaction."""
    begin = sql.statement("BEGIN")
    await named.store.transactions.statement(lambda txn: sql.execute(txn.conn, begin))
    for _ in range(POOL + 1):
        async with named.store.transactions.driven() as conn:
            assert not conn.raw.is_in_transaction()
            assert await sql.scalar_one(conn, _ONE) == 1


@pytest.mark.parametrize(
    ("opening", "core"),
    [
        ("transaction", False),
        ("transaction", True),
        ("one_statement", False),
        ("one_statement", True),
        ("driven", False),  # no Core statement runs on a driven connection
        ("savepoint", True),  # the repair pass's steps: its savepoint's exit meets a closed one
    ],
)
async def test_a_cancelled_call_is_cancelled_and_the_store_goes_on(
    named: Named, opening: str, core: bool
) -> None:
    """A cancellation is never turned into a store error (a loop catching StoreError would
    swallow it), and the connection it interrupted does not break the next calls.

    SQLAlchemy closes a connection whose Core statement was cancelled: the transaction then has
    nothing left to roll back.
    """
    started = asyncio.Event()
    sleep = sql.statement("SELECT pg_sleep(:seconds)")

    async def body() -> None:
        if opening == "driven":
            async with named.store.transactions.driven() as driven:
                started.set()
                await sql.execute(driven, sleep, {"seconds": 5.0})
            return
        if opening == "savepoint":
            async with named.store.transactions.begin() as c:
                with store_errors.translate_db_errors():
                    async with sql.driver(c).transaction():
                        started.set()
                        await c.execute(sa.text("SELECT pg_sleep(:seconds)"), {"seconds": 5.0})
            return
        async with (
            named.store.transactions.one_statement()
            if opening == "one_statement"
            else (named.store.transactions.begin()) as c
        ):
            started.set()
            if core:
                await c.execute(sa.text("SELECT pg_sleep(:seconds)"), {"seconds": 5.0})
            else:
                await sql.execute(c, sleep, {"seconds": 5.0})

    task = asyncio.create_task(body())
    await started.wait()
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(POOL + 1):
        await _session(named.store)
        await _driven(named.store)


_PID = sql.statement("SELECT pg_backend_pid() AS pid")


@pytest.mark.parametrize("opening", ["driven", "transaction"])
async def test_a_driver_stuck_mid_operation_drops_its_connection(
    database_url: str, opening: str
) -> None:
    """asyncpg's InternalClientError ("another operation is in progress") means the driver's
    protocol never finished a command (one cut off while the server went away, as a chaos soak
    saw after a Postgres restart). The call is StoreUnavailable, which callers retry, and the
    connection is dropped instead of being handed out again."""
    store = Store.connect(database_url, pool_size=1)

    async def stuck(txn: Txn[sql.Conn]) -> None:
        raise asyncpg.InternalClientError(
            "cannot switch to state 15; another operation is in progress"
        )

    async def backend_pid() -> int:
        return int(await store.transactions.statement(lambda txn: sql.scalar_one(txn.conn, _PID)))

    try:
        before = await backend_pid()
        with pytest.raises(store_errors.StoreUnavailable, match="another operation"):
            if opening == "driven":
                await store.transactions.statement(stuck)
            else:
                await store.transactions.run(stuck)
        assert await backend_pid() != before
    finally:
        await store.close()
