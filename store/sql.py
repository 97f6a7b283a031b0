"""Hot-path statements written once as SQL text, run straight on the asyncpg connection.

Each statement is compiled at import to the driver's `$n` form by SQLAlchemy's asyncpg dialect,
so the SQL sent is exactly what SQLAlchemy would send; executing it skips SQLAlchemy's
per-statement work, which costs more client CPU than the driver itself. The connection is the
one the store's transaction holds (store/transactions.py), so raw and Core statements share it.
JSONB parameters are sent as JSON text (the dialect's jsonb codec takes text) and come back
decoded; uuid columns come back as str (engine.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import asyncpg
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from pydantic import BaseModel
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects.postgresql import asyncpg as pg_asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection

JSONB = pg.JSONB(none_as_null=True)  # None means SQL NULL, never JSON null
_DIALECT = pg_asyncpg.dialect()  # type: ignore[no-untyped-call]

Params = Mapping[str, object]


class Row(asyncpg.Record):  # type: ignore[misc]  # asyncpg ships no type hints
    """A result row: columns by name as attributes (`row.run_id`), by key, or by position."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


AnyRow = Row | sa.Row[tuple[object, ...]]
"""A row of a text statement (sql.Row) or of a Core one (SQLAlchemy's Row): same attributes."""


@dataclass(frozen=True, slots=True)
class Statement:
    """A text statement compiled once: its `$n` SQL and the parameter names in `$n` order."""

    text: str
    """As written, with `:name` parameters."""
    sql: str
    names: tuple[str, ...]
    json_names: frozenset[str]

    def args(self, params: Params) -> list[object]:
        """The positional arguments for `params`; JSONB ones as JSON text, None as SQL NULL."""
        if not self.json_names:
            return [params[name] for name in self.names]
        return [
            _json_text(params[name]) if name in self.json_names else params[name]
            for name in self.names
        ]


def _json_text(value: object) -> str | None:
    return None if value is None else json.dumps(value)


def statement(text: str, *, json_params: Iterable[str] = ()) -> Statement:
    """A reusable text statement with JSONB-typed parameters (ids come back as str: engine.py)."""
    json_names = frozenset(json_params)
    clause = sa.text(text)
    if json_names:
        clause = clause.bindparams(*(sa.bindparam(name, type_=JSONB) for name in json_names))
    compiled = clause.compile(dialect=_DIALECT)
    names = tuple(compiled.positiontup or ())
    return Statement(text=text, sql=str(compiled), names=names, json_names=json_names)


DriverConnection: TypeAlias = asyncpg.Connection
"""The driver's own connection, under a store connection."""


@dataclass(frozen=True, slots=True)
class Driven:
    """A pooled connection used straight through its driver, with no SQLAlchemy Connection.

    For single statements on the hot path (`Transactions.statement`): building and tearing down a
    SQLAlchemy Connection around one statement cost about as much client CPU as the statement.
    """

    raw: DriverConnection


Conn = AsyncConnection | Driven
"""What text statements run on: a store transaction's connection, or a `Driven` one."""


def driver(conn: Conn) -> DriverConnection:
    """The asyncpg connection under `conn` (no I/O: attribute access only)."""
    if isinstance(conn, Driven):
        return conn.raw
    return conn.sync_connection.connection.driver_connection  # type: ignore[union-attr]


async def fetch(conn: Conn, stmt: Statement, params: Params | None = None) -> list[Row]:
    """Every row."""
    rows = await driver(conn).fetch(stmt.sql, *stmt.args(params or {}), record_class=Row)
    return cast(list[Row], rows)


async def first(conn: Conn, stmt: Statement, params: Params | None = None) -> Row | None:
    """The first row or None; every row is read, as SQLAlchemy's `.first()` does."""
    rows = await fetch(conn, stmt, params)
    return rows[0] if rows else None


async def one(conn: Conn, stmt: Statement, params: Params | None = None) -> Row:
    """Exactly one row, else SQLAlchemy's `.one()` errors (NoResultFound, MultipleResultsFound)."""
    rows = await fetch(conn, stmt, params)
    if len(rows) != 1:
        if not rows:
            raise sa_exc.NoResultFound("No row was found when one was required")
        raise sa_exc.MultipleResultsFound("Multiple rows were found when exactly one was required")
    return rows[0]


async def scalar(conn: Conn, stmt: Statement, params: Params | None = None) -> Any:
    """The first column of the first row, or None when there is no row."""
    row = await first(conn, stmt, params)
    return None if row is None else row[0]


async def scalar_one(conn: Conn, stmt: Statement, params: Params | None = None) -> Any:
    """The first column of exactly one row."""
    return (await one(conn, stmt, params))[0]


async def execute(conn: Conn, stmt: Statement, params: Params | None = None) -> None:
    """Run a statement whose rows, if any, are not needed."""
    await driver(conn).execute(stmt.sql, *stmt.args(params or {}))


async def executemany(conn: Conn, stmt: Statement, params: Sequence[Params]) -> None:
    """Run a statement once per parameter set, pipelined in one round trip."""
    await driver(conn).executemany(stmt.sql, [stmt.args(p) for p in params])


def jsonb_object(model: type[BaseModel], **columns: str) -> str:
    """`jsonb_build_object(...)` for a wire model, its keys taken from the model's fields.

    `columns` maps each field to a SQL expression; every field the model always writes must be
    given and no other key, so an event built in SQL has exactly the shape the model parses
    (checked at import, where the statement is built).
    """
    fields = model.model_fields
    always = {name for name, f in fields.items() if f.exclude_if is None and not f.exclude}
    missing, unknown = always - set(columns), set(columns) - set(fields)
    if missing or unknown:
        raise TypeError(f"{model.__name__}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    pairs = ", ".join(f"'{name}', {expr}" for name, expr in columns.items())
    return f"jsonb_build_object({pairs})"
