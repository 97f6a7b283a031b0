"""Repair steps that isolate a row that fails (issue 25 item 1).

The repair pass runs in one transaction for the whole database. A row it cannot repair (a value
written before today's bounds, a bug in one path) must never stop the rest of the pass: each
step runs in a savepoint, first for its whole batch and, only when that fails, once per row. A
row that raises is rolled back to its savepoint, logged with its ids, counted, and marked in
`repair_failures`, so later passes leave it alone until the mark's retry time (capped
exponential backoff) instead of failing on it every pass. A mark is cleared once its row is
repaired; operators see the marks in the operator metrics.

Errors that say the database itself is in trouble (connection lost, deadlock, not migrated)
are not a row's fault: they end the pass as before, and the next pass retries everything.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import sqlalchemy as sa
import structlog

from burrow.store import errors, sql
from burrow.store.sql import statement
from burrow.store.transactions import Txn

log = structlog.get_logger("burrow.store")
T = TypeVar("T")
FIRST_RETRY_SECONDS = 60.0
MAX_RETRY_SECONDS = 3600.0
MAX_ERROR_CHARS = 2000  # a mark keeps the error's gist, not a whole traceback
# Nothing here is the row's fault: the pass ends and is retried whole.
_PASS_ERRORS = (errors.StoreUnavailable, errors.DatabaseNotReady, errors.CredentialsRejected)


class RepairStep(StrEnum):
    """The repair steps that work row by row, as stored in `repair_failures.step`."""

    WORKFLOW_LEASE = "workflow_lease"
    ACTIVITY_TIMEOUT = "activity_timeout"
    TIMER = "timer"
    STRANDED_SESSION_ACTIVITY = "stranded_session_activity"
    RUN_DEADLINE = "run_deadline"
    STANDALONE_SETTLE = "standalone_settle"
    CLEANUP_DEADLINE = "cleanup_deadline"
    SCHEDULE = "schedule"


@dataclass(frozen=True, slots=True)
class RowRef:
    """The row a repair step works on, as its mark and its log line name it."""

    key: str
    """Its id: a task id, `run_id:step_seq` for a timer (the timer id), a run id for a run."""
    namespace: str
    run_id: str
    """The run the row belongs to; "" for a row of no run (a schedule, keyed `namespace/id`)."""
    marked: bool = False
    """A mark from an earlier failure exists (its retry time has come): cleared on success."""


@dataclass(slots=True)
class Tally:
    """What one pass isolated, across its steps."""

    isolated: int = 0


def held_out(step: RepairStep, key: str) -> str:
    """SQL: the row keyed by `key` (SQL text) is marked and its retry time has not come."""
    return (
        "EXISTS (SELECT 1 FROM repair_failures f"
        f" WHERE f.step = '{step.value}' AND f.row_key = {key} AND f.retry_after > now())"
    )


def marked(step: RepairStep, key: str) -> str:
    """SQL: the row keyed by `key` (SQL text) has a mark (select it AS marked)."""
    return (
        "EXISTS (SELECT 1 FROM repair_failures f"
        f" WHERE f.step = '{step.value}' AND f.row_key = {key})"
    )


async def each_row(
    txn: Txn[sql.Conn],
    step: RepairStep,
    rows: Sequence[RowRef],
    repair: Callable[[Sequence[RowRef]], Awaitable[int]],
    tally: Tally,
) -> int:
    """Run `repair` on `rows`; a row that raises is isolated. Returns what `repair` counted.

    `repair` is given the whole batch first (one savepoint: the usual case costs two round
    trips), then, if that raised, each row alone in a savepoint of its own.
    """
    conn = txn.conn
    if not rows:
        return 0
    try:
        changed = await _savepoint(txn, lambda: repair(rows))
    except _RowFailed:
        return sum([await _one_row(txn, step, row, repair, tally) for row in rows])
    await _clear(conn, step, rows)
    return changed


async def _one_row(
    txn: Txn[sql.Conn],
    step: RepairStep,
    row: RowRef,
    repair: Callable[[Sequence[RowRef]], Awaitable[int]],
    tally: Tally,
) -> int:
    conn = txn.conn
    try:
        changed = await _savepoint(txn, lambda: repair([row]))
    except _RowFailed as failed:
        await _mark(conn, step, row, failed.cause)
        tally.isolated += 1
        return 0
    await _clear(conn, step, [row])
    return changed


class _RowFailed(Exception):
    """A repair step raised something that is not the database's trouble; rolled back."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


async def _savepoint(txn: Txn[sql.Conn], work: Callable[[], Awaitable[T]]) -> T:
    """`work` in a savepoint; on a row's failure, roll it and its ready notices back."""
    checkpoint = txn.checkpoint()
    try:
        with errors.translate_db_errors():
            async with sql.driver(txn.conn).transaction():  # nested: a SAVEPOINT of the pass
                return await work()
    except _PASS_ERRORS:
        raise
    except Exception as exc:
        txn.discard_after(checkpoint)  # what the rolled-back work made ready never was
        raise _RowFailed(exc) from exc


_MARK = statement(
    """
    INSERT INTO repair_failures AS f (step, row_key, namespace, run_id, error, retry_after)
    VALUES (:step, :row_key, :namespace, CAST(NULLIF(:run_id, '') AS uuid), :error,
            now() + make_interval(secs => :first_retry))
    ON CONFLICT (step, row_key) DO UPDATE
    SET failures = f.failures + 1, error = EXCLUDED.error, last_failed_at = now(),
        retry_after = now() + make_interval(
            secs => LEAST(:first_retry * power(2, LEAST(f.failures, 30)), :max_retry))
    RETURNING failures, retry_after
    """
)
_CLEAR = statement(
    "DELETE FROM repair_failures WHERE step = :step AND row_key = ANY(CAST(:keys AS text[]))"
)


def _error_text(exc: Exception) -> str:
    text = "".join(traceback.format_exception_only(exc)).strip()
    return text[:MAX_ERROR_CHARS]


async def _mark(conn: sql.Conn, step: RepairStep, row: RowRef, exc: Exception) -> None:
    params: dict[str, object] = {
        "step": step.value,
        "row_key": row.key,
        "namespace": row.namespace,
        "run_id": row.run_id,
        "error": _error_text(exc),
        "first_retry": FIRST_RETRY_SECONDS,
        "max_retry": MAX_RETRY_SECONDS,
    }
    mark = await sql.one(conn, _MARK, params)
    log.error(
        "repair_row_isolated",
        step=step.value,
        row_key=row.key,
        run_id=row.run_id,
        namespace=row.namespace,
        failures=mark.failures,
        retry_after=mark.retry_after.isoformat(),
        error=params["error"],
        exc_info=exc,
    )


async def _clear(conn: sql.Conn, step: RepairStep, rows: Sequence[RowRef]) -> None:
    keys = [row.key for row in rows if row.marked]
    if keys:
        await sql.execute(conn, _CLEAR, {"step": step.value, "keys": keys})


_COUNT = statement("SELECT count(*) FROM repair_failures WHERE namespace = :namespace")


async def count_isolated(conn: sql.Conn, *, namespace: str) -> int:
    """How many rows of the namespace are marked as failing their repair (held out or due)."""
    return int(await sql.scalar_one(conn, _COUNT, {"namespace": namespace}))


def step_columns(step: RepairStep, key: str) -> tuple[sa.ColumnElement[bool], ...]:
    """(marked, not held out) for a Core select of `step`'s candidates keyed by `key` (SQL)."""
    return (
        sa.literal_column(marked(step, key)).label("marked"),
        sa.not_(sa.literal_column(held_out(step, key), sa.Boolean)),
    )
