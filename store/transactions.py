"""A store transaction: its connection and the ready notices it records.

Store functions take a `Txn` and record what they made claimable on it; `Transactions` hands
the notices to its `after_commit` sink only once the transaction committed (broker invariant 1).
Nothing travels through a context variable, so a function that is given no `Txn` cannot
record a notice that nobody will deliver.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

import asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from burrow.store import errors, sql
from burrow.store.ready import Change, Notice, ReadyTask, RunChanged, RunOutcome, WorkflowTaskRow

C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Txn(Generic[C_co]):
    """One transaction (or one autocommitted statement) and what it made ready."""

    conn: C_co
    notices: list[Notice] = field(default_factory=list)

    def notify(
        self,
        namespace: str,
        connection: str,
        queue: str,
        kind: str,
        task_id: str | None = None,
        available_at: datetime | None = None,
        sticky_worker_id: str | None = None,
    ) -> None:
        """Record that this transaction made a task ready."""
        self.notices.append(
            ReadyTask(namespace, connection, queue, kind, task_id, available_at, sticky_worker_id)
        )

    def notify_run(
        self,
        namespace: str,
        key: str,
        change: Change,
        outcome: RunOutcome | None = None,
        notify_queue: str | None = None,
    ) -> None:
        """Record that this transaction changed what waiters on `key` wait for."""
        self.notices.append(RunChanged(namespace, key, change, outcome, notify_queue))

    def notify_workflow_task(
        self, row: WorkflowTaskRow, available_at: datetime | None = None
    ) -> None:
        """Record a ready workflow task, announced to its sticky owner if it has one (S4, C1)."""
        self.notify(
            row.namespace,
            row.connection,
            row.queue,
            "workflow",
            row.task_id,
            available_at,
            sticky_worker_id=row.sticky_owner,
        )

    def retract(self, task_ids: set[str]) -> None:
        """Drop notices for tasks this transaction itself leased (eager dispatch needs no wake)."""
        self.notices[:] = [
            n for n in self.notices if not isinstance(n, ReadyTask) or n.task_id not in task_ids
        ]

    def checkpoint(self) -> int:
        """How many notices were recorded so far (for `discard_after`)."""
        return len(self.notices)

    def discard_after(self, mark: int) -> None:
        """Drop what was recorded after `checkpoint()` returned `mark`: a savepoint rolled back."""
        del self.notices[mark:]


AfterCommit = Callable[[list[Notice]], Awaitable[None]]
"""Hears what a committed transaction made ready (a worker's router, a client's publisher)."""
CONFLICT_RETRIES = 5


class Transactions:
    """Opens the store's transactions on one engine; only these begin, commit or roll back.

    `run` and `statement` give their function a `Txn`, run it again on a deadlock, and hand
    the notices of the attempt that committed to `after_commit`. `begin`, `one_statement` and
    `driven` open a connection for reads that record nothing.
    """

    def __init__(self, engine: AsyncEngine, *, after_commit: AfterCommit | None = None) -> None:
        self.engine = engine
        # Shares the engine's pool; every store connection is AUTOCOMMIT to SQLAlchemy (begin).
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.after_commit = after_commit

    @contextlib.asynccontextmanager
    async def begin(self, *, commit: bool = True) -> AsyncIterator[AsyncConnection]:
        """One transaction, begun and ended by the driver itself (rolled back if not `commit`).

        SQLAlchemy sees an AUTOCOMMIT connection and begins nothing of its own, so its Core
        statements and the text statements run on the driver (store/sql.py) share the one
        transaction.
        """
        with errors.translate_db_errors():
            async with self._autocommit.connect() as conn, _dropped_when_broken(conn) as raw:
                txn = raw.transaction()
                await txn.start()
                try:
                    yield conn
                except BaseException:
                    await _roll_back(raw, txn)
                    raise
                if commit:
                    await txn.commit()
                else:
                    await txn.rollback()

    @contextlib.asynccontextmanager
    async def one_statement(self) -> AsyncIterator[AsyncConnection]:
        """For work of ONE statement: no transaction block, so no BEGIN/COMMIT round trips.

        A single statement is atomic and sees one snapshot by itself; more need `begin`.
        """
        with errors.translate_db_errors():
            async with self._autocommit.connect() as conn, _dropped_when_broken(conn):
                yield conn

    @contextlib.asynccontextmanager
    async def driven(self) -> AsyncIterator[sql.Driven]:
        """One statement straight on a pooled driver connection: no SQLAlchemy Connection.

        What `one_statement` and `_dropped_when_broken` do around a statement, done on the
        pool's connection record itself: a lost connection is invalidated pool-wide, and one
        left inside a transaction is never reused.
        """
        with errors.translate_db_errors():
            fairy = await self.engine.raw_connection()
            raw = fairy.driver_connection
            try:
                yield sql.Driven(raw)
            except BaseException as exc:
                if errors.connection_lost(exc, raw) and fairy.is_valid:
                    self.engine.sync_engine.pool._invalidate(fairy, exc, _checkin=False)
                    await greenlet_spawn(fairy.invalidate, exc)
                raise
            finally:
                if fairy.is_valid and raw is not None and raw.is_in_transaction():
                    await greenlet_spawn(fairy.invalidate)
                await greenlet_spawn(fairy.close)

    async def run(self, fn: Callable[[Txn[AsyncConnection]], Awaitable[T]]) -> T:
        """Run `fn` in one transaction (again on a deadlock), then report what became ready."""
        return await self._retried(self.begin, fn)

    async def statement(self, fn: Callable[[Txn[sql.Conn]], Awaitable[T]]) -> T:
        """`run` for a `fn` of exactly ONE text statement (sql.py), its own transaction.

        It runs outside a transaction block, on a `Driven` connection.
        """
        return await self._retried(self.driven, fn)

    async def _retried(
        self,
        opener: Callable[[], contextlib.AbstractAsyncContextManager[C]],
        fn: Callable[[Txn[C]], Awaitable[T]],
    ) -> T:
        for attempt in range(CONFLICT_RETRIES):
            notices: list[Notice] = []
            try:
                async with opener() as conn:
                    result = await fn(Txn(conn, notices))
            except errors.RetryableConflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
                continue
            if notices and self.after_commit is not None:
                await self.after_commit(notices)  # after commit, never inside (broker invariant 1)
            return result
        raise errors.RetryableConflict("transaction conflict persisted")


@contextlib.asynccontextmanager
async def _dropped_when_broken(conn: AsyncConnection) -> AsyncIterator[sql.DriverConnection]:
    """The driver connection under `conn`; invalidated if an error leaves it unusable.

    SQLAlchemy never sees the errors of statements run on the driver, so this does what it does
    for its own: invalidate the connection and mark every pooled connection opened before now
    stale, so the pool reconnects instead of handing out connections a restart killed. A
    connection still inside a transaction (its end was interrupted) is not reused either.
    """
    raw = sql.driver(conn)
    try:
        yield raw
    except BaseException as exc:
        if errors.connection_lost(exc, raw) and not conn.invalidated:
            # Pool-wide, as SQLAlchemy's own disconnect handling does (a private call there too).
            fairy = conn.sync_connection.connection  # type: ignore[union-attr]
            conn.sync_engine.pool._invalidate(fairy, exc, _checkin=False)
            await conn.invalidate(exc)
        raise
    finally:
        if raw.is_in_transaction() and not conn.invalidated:
            await conn.invalidate()


async def _roll_back(raw: sql.DriverConnection, txn: asyncpg.transaction.Transaction) -> None:
    """End a failed transaction; the error that failed it is what the caller sees, always.

    A closed connection has no transaction left to end (a cancelled statement can leave it so),
    and one that fails to roll back is dropped by `_dropped_when_broken`, never reused: a
    rollback error must not replace the original error, least of all a task's cancellation.
    """
    if raw.is_closed():
        return
    with contextlib.suppress(Exception):
        await txn.rollback()
