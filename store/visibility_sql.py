"""A checked list query (protocol/list_query_types.py) compiled to a parameterised SQL filter.

Every literal becomes a bound parameter; attribute names only ever select a `runs` column from a
fixed map or are bound as the `name` of a `run_search_attributes` row, so no text of the query
reaches SQL. Built-in attributes compare `runs` columns; a custom one is an EXISTS over its
rows, always within the caller's namespace, in the column of its type:

- a comparison, IN, BETWEEN or STARTS_WITH holds when some value of the attribute satisfies it
  (a keyword list: some element); `!=`, NOT IN and NOT BETWEEN hold when the attribute is set
  and no value is excluded by them, so a run without the attribute matches neither `= x` nor
  `!= x`, as in SQL and Temporal;
- text `=` matches when every word of the literal is among the value's words;
- IS NULL holds when the run has no value for the attribute.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol.list_query import And, Node, Operator, Or
from burrow.protocol.list_query_types import AttributeType, ListQuery, Predicate, Value
from burrow.store import schema as s
from burrow.store.models import RunStatus

Clause = sa.ColumnElement[bool]

_r = s.runs.c
BUILTIN_COLUMNS: Final[dict[str, sa.ColumnElement[Any]]] = {
    "WorkflowId": _r.workflow_id,
    "RunId": sa.cast(_r.run_id, sa.Text),
    "WorkflowType": _r.workflow_type,
    "ExecutionStatus": _r.status,
    "TaskQueue": _r.task_queue,
    "StartTime": _r.created_at,
    "CloseTime": _r.closed_at,
    "BuildId": _r.build_id,
    "ParentWorkflowId": _r.parent_workflow_id,
    "ParentRunId": sa.cast(_r.parent_run_id, sa.Text),
}
STATUS_OF: Final[dict[str, str]] = {
    "Running": RunStatus.RUNNING,
    "Completed": RunStatus.COMPLETED,
    "Failed": RunStatus.FAILED,
    "Canceled": RunStatus.CANCELLED,
    "Terminated": RunStatus.TERMINATED,
    "ContinuedAsNew": RunStatus.CONTINUED_AS_NEW,
    "TimedOut": RunStatus.TIMED_OUT,
}
_a = s.run_search_attributes.c
_VALUE_COLUMN: Final[dict[AttributeType, sa.ColumnElement[Any]]] = {
    AttributeType.KEYWORD: _a.keyword_value,
    AttributeType.KEYWORD_LIST: _a.keyword_value,
    AttributeType.INT: _a.int_value,
    AttributeType.DOUBLE: _a.double_value,
    AttributeType.BOOL: _a.bool_value,
    AttributeType.DATETIME: _a.datetime_value,
    AttributeType.TEXT: _a.text_value,
}


# The configuration as a constant, not a parameter: only then is the expression the index's own.
_SIMPLE: sa.ColumnElement[Any] = sa.literal_column("'simple'::regconfig")
_TEXT_WORDS = sa.func.to_tsvector(_SIMPLE, _a.text_value)


def _prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix`, bytewise (None: none).

    Code points order as UTF-8 bytes do, so `prefix <= v < end` is STARTS_WITH over a
    `COLLATE "C"` column: an index range, with no LIKE pattern to escape.
    """
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        nxt = last + 1 if last + 1 != 0xD800 else 0xE000  # surrogates are not text
        if nxt <= 0x10FFFF:
            return "".join(chars) + chr(nxt)
    return None


def _comparison(column: sa.ColumnElement[Any], op: Operator, values: Sequence[Any]) -> Clause:
    clause: Clause  # the column's operators are typed Any
    match op:
        case Operator.EQ:
            clause = column == values[0]
        case Operator.NE:
            clause = column != values[0]
        case Operator.LT:
            clause = column < values[0]
        case Operator.LE:
            clause = column <= values[0]
        case Operator.GT:
            clause = column > values[0]
        case Operator.GE:
            clause = column >= values[0]
        case Operator.IN:
            clause = column.in_(list(values))
        case Operator.NOT_IN:
            clause = column.not_in(list(values))
        case Operator.BETWEEN:
            clause = column.between(values[0], values[1])
        case Operator.NOT_BETWEEN:
            clause = sa.not_(column.between(values[0], values[1]))
        case _:
            raise AssertionError(op)
    return clause


_UUID_COLUMNS: Final = {"RunId": _r.run_id, "ParentRunId": _r.parent_run_id}
_TEXT_COLUMNS: Final = frozenset(
    {"WorkflowId", "WorkflowType", "TaskQueue", "BuildId", "ParentWorkflowId"}
)
# Bytewise comparisons: the operators of the `text_pattern_ops` indexes on `runs`.
_BYTEWISE: Final = {
    Operator.LT: "~<~",
    Operator.LE: "~<=~",
    Operator.GT: "~>~",
    Operator.GE: "~>=~",
}


def _bytewise(column: sa.ColumnElement[Any], op: Operator, value: str) -> Clause:
    return column.op(_BYTEWISE[op], is_comparison=True)(sa.literal(value, sa.Text))


def _text_builtin(column: sa.ColumnElement[Any], op: Operator, values: Sequence[Value]) -> Clause:
    """A keyword built-in's filter: an index range of the column's `text_pattern_ops` index.

    Ranges and prefixes compare bytewise, as custom keywords do (`COLLATE "C"`); see
    visibility_schema.runs_list_indexes.
    """
    low = str(values[0]) if values else ""
    match op:
        case Operator.LT | Operator.LE | Operator.GT | Operator.GE:
            return _bytewise(column, op, low)
        case Operator.BETWEEN | Operator.NOT_BETWEEN:
            inside = sa.and_(
                _bytewise(column, Operator.GE, low), _bytewise(column, Operator.LE, str(values[1]))
            )
            return inside if op is Operator.BETWEEN else sa.not_(inside)
        case Operator.STARTS_WITH:
            end = _prefix_end(low)
            above = _bytewise(column, Operator.GE, low)
            return above if end is None else sa.and_(above, _bytewise(column, Operator.LT, end))
    return _comparison(column, op, values)


def _canonical_uuid(value: Value) -> str | None:
    """`value` when it is a UUID as `uuid::text` spells it (the only text such a column equals)."""
    try:
        return value if isinstance(value, str) and str(uuid.UUID(value)) == value else None
    except ValueError:
        return None


def _uuid_builtin(name: str, op: Operator, values: Sequence[Value]) -> Clause | None:
    """RunId/ParentRunId (in)equality as a uuid comparison, which their indexes read.

    None for the operators that compare the text form (ranges, STARTS_WITH).
    """
    if op not in (Operator.EQ, Operator.IN, Operator.NE, Operator.NOT_IN):
        return None
    column = _UUID_COLUMNS[name]
    ids = [v for v in map(_canonical_uuid, values) if v is not None]
    if op in (Operator.EQ, Operator.IN):
        return column.in_(ids) if ids else sa.false()
    # != and NOT IN hold for a set value no literal spells (NULL never matches, as in SQL).
    return column.not_in(ids) if ids else column.is_not(None)


def _builtin(predicate: Predicate) -> Clause:
    name = predicate.attribute
    column = BUILTIN_COLUMNS[name]
    values: Sequence[Value] = predicate.values
    if name == "ExecutionStatus":
        values = [STATUS_OF[str(v)] for v in values]
    match predicate.operator:
        case Operator.IS_NULL:
            return column.is_(None)
        case Operator.IS_NOT_NULL:
            return column.is_not(None)
    if name in _TEXT_COLUMNS:
        return _text_builtin(column, predicate.operator, values)
    if name in _UUID_COLUMNS:
        clause = _uuid_builtin(name, predicate.operator, values)
        if clause is not None:
            return clause
    if predicate.operator is Operator.STARTS_WITH:
        return sa.func.starts_with(column, sa.cast(values[0], sa.Text))
    return _comparison(column, predicate.operator, values)


def _rows(namespace: str, name: str, *where: Clause) -> Clause:
    """Some row of the run's attribute `name` satisfies `where`."""
    return sa.exists().where(
        _a.run_id == _r.run_id, _a.namespace == namespace, _a.name == name, *where
    )


_NEGATED = {
    Operator.NE: Operator.EQ,
    Operator.NOT_IN: Operator.IN,
    Operator.NOT_BETWEEN: Operator.BETWEEN,
}


def _custom(namespace: str, predicate: Predicate) -> Clause:
    name, op = predicate.attribute, predicate.operator
    # Plain text parameters: the column's own `COLLATE "C"` decides how they compare (a
    # collation on the parameter itself is not valid SQL inside BETWEEN).
    values = [sa.literal(v, sa.Text) if isinstance(v, str) else v for v in predicate.values]
    column = _VALUE_COLUMN[predicate.type]
    if op is Operator.IS_NULL:
        return sa.not_(_rows(namespace, name))
    if op is Operator.IS_NOT_NULL:
        return _rows(namespace, name)
    if predicate.type is AttributeType.TEXT:
        matches = sa.and_(
            _a.text_value.is_not(None),  # the GIN index's own condition
            _TEXT_WORDS.bool_op("@@")(sa.func.plainto_tsquery(_SIMPLE, values[0])),
        )
        if op is Operator.EQ:
            return _rows(namespace, name, matches)
        return sa.and_(_rows(namespace, name), sa.not_(_rows(namespace, name, matches)))
    if op in _NEGATED:
        excluded = _comparison(column, _NEGATED[op], values)
        return sa.and_(_rows(namespace, name), sa.not_(_rows(namespace, name, excluded)))
    if op is Operator.STARTS_WITH:
        end = _prefix_end(str(predicate.values[0]))
        above = column >= values[0]
        below = column < sa.literal(end, sa.Text)
        return _rows(namespace, name, above if end is None else sa.and_(above, below))
    return _rows(namespace, name, _comparison(column, op, values))


def _node(namespace: str, node: Node[Predicate]) -> Clause:
    match node:
        case And(parts=parts):
            return sa.and_(*(_node(namespace, part) for part in parts))
        case Or(parts=parts):
            return sa.or_(*(_node(namespace, part) for part in parts))
        case Predicate(builtin=True):
            return _builtin(node)
        case Predicate():
            return _custom(namespace, node)
    raise AssertionError(node)


def filter_clause(namespace: str, query: ListQuery) -> Clause:
    """The runs of `namespace` the query selects (every run of it for an empty query)."""
    own = _r.namespace == namespace
    return own if query.filter is None else sa.and_(own, _node(namespace, query.filter))


def order_key(namespace: str, query: ListQuery | None) -> tuple[sa.ColumnElement[Any], bool]:
    """What to order by and whether descending; newest first when the query names no order.

    A custom attribute orders by its (first) value, runs without it last either way.
    """
    if query is None or query.order_by is None:
        return _r.created_at, True
    name, kind, builtin, descending = query.order_by
    if builtin:
        return BUILTIN_COLUMNS[name], descending
    value = (
        sa.select(_VALUE_COLUMN[kind])
        .where(_a.run_id == _r.run_id, _a.namespace == namespace, _a.name == name)
        .order_by(_a.ordinal)
        .limit(1)
        .scalar_subquery()
    )
    return value, descending


PageKey = str | int | float | bool | datetime | None
"""The order key of a page's last run: a value of the ordered attribute's type, or None."""


def order_clauses(key: sa.ColumnElement[Any], descending: bool) -> list[sa.ColumnElement[Any]]:
    """The list's ORDER BY: the key (runs without a value last), then the run id the same way."""
    if isinstance(key, sa.Column) and not key.nullable:
        # No NULLS LAST on a column without nulls: Postgres would not read its index for it.
        if descending:
            return [key.desc(), _r.run_id.desc()]
        return [key.asc(), _r.run_id.asc()]
    if descending:
        return [key.desc().nulls_last(), _r.run_id.desc()]
    return [key.asc().nulls_last(), _r.run_id.asc()]


def after_clause(
    key: sa.ColumnElement[Any], descending: bool, after: tuple[PageKey, str]
) -> Clause:
    """The runs that come after (value, run_id) in `order_clauses`' order."""
    value, run_id = after
    if isinstance(key, sa.Column) and not key.nullable and value is not None:
        # A row comparison, as an index on (key, run_id) reads it.
        pair, at = (
            sa.tuple_(key, _r.run_id),
            sa.tuple_(sa.literal(value, key.type), sa.literal(run_id, _r.run_id.type)),
        )
        return pair < at if descending else pair > at
    beyond: Clause = _r.run_id < run_id if descending else _r.run_id > run_id
    if value is None:
        return sa.and_(key.is_(None), beyond)
    past: Clause = key < value if descending else key > value
    return sa.or_(past, sa.and_(key == value, beyond), key.is_(None))


@dataclass(frozen=True, slots=True)
class RunCount:
    """How many runs a query selects, and per ExecutionStatus when it groups by it."""

    count: int
    groups: dict[str, int] | None = None


_STATUS_NAMES: Final = {stored: name for name, stored in STATUS_OF.items()}


async def count_runs(conn: AsyncConnection, *, namespace: str, query: ListQuery | None) -> RunCount:
    """Count the runs of `namespace` that `query` selects (all of them for None)."""
    where = filter_clause(namespace, query) if query is not None else _r.namespace == namespace
    if query is None or query.group_by is None:
        total = await conn.scalar(sa.select(sa.func.count()).select_from(s.runs).where(where))
        return RunCount(int(total or 0))
    rows = await conn.execute(
        sa.select(_r.status, sa.func.count()).where(where).group_by(_r.status)
    )
    groups = {_STATUS_NAMES[str(status)]: int(n) for status, n in rows}
    return RunCount(sum(groups.values()), dict(sorted(groups.items())))
