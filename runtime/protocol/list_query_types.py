"""Typing a parsed list query: each attribute checked, each literal converted to its type.

`bind_list_query(parsed, custom)` resolves every attribute against the built-ins and the
namespace's registered custom attributes, refuses an operator the type does not support (a range
over a bool, STARTS_WITH over an int, ORDER BY over text), and turns each literal into the Python
value the store binds as an SQL parameter: `datetime` (RFC 3339 with an offset), `int`, `float`,
`bool` or `str`. The result is what the store compiles; nothing here knows SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final, TypeAlias

from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import (
    And,
    Literal,
    Node,
    Operator,
    Or,
    ParsedListQuery,
    RawPredicate,
)


class AttributeType(StrEnum):
    """A search attribute's type; the wire names of PROTOCOL.md's typed search attributes."""

    KEYWORD = "keyword"
    TEXT = "text"
    INT = "int"
    DOUBLE = "double"
    BOOL = "bool"
    DATETIME = "datetime"
    KEYWORD_LIST = "keyword_list"


K = AttributeType
BUILTIN_ATTRIBUTES: Final[Mapping[str, AttributeType]] = {
    "WorkflowId": K.KEYWORD,
    "RunId": K.KEYWORD,
    "WorkflowType": K.KEYWORD,
    "ExecutionStatus": K.KEYWORD,
    "TaskQueue": K.KEYWORD,
    "StartTime": K.DATETIME,
    "CloseTime": K.DATETIME,
    "BuildId": K.KEYWORD,
    "ParentWorkflowId": K.KEYWORD,
    "ParentRunId": K.KEYWORD,
}
EXECUTION_STATUSES: Final = frozenset(
    {"Running", "Completed", "Failed", "Canceled", "Terminated", "ContinuedAsNew", "TimedOut"}
)
GROUPABLE: Final = frozenset({"ExecutionStatus"})

_RANGE = {Operator.LT, Operator.LE, Operator.GT, Operator.GE, Operator.BETWEEN}
_RANGE |= {Operator.NOT_BETWEEN}
_EQUALITY = {Operator.EQ, Operator.NE, Operator.IS_NULL, Operator.IS_NOT_NULL}
_SET = {Operator.IN, Operator.NOT_IN}
_ALLOWED: Final[Mapping[AttributeType, frozenset[Operator]]] = {
    K.KEYWORD: frozenset(_EQUALITY | _SET | _RANGE | {Operator.STARTS_WITH}),
    K.TEXT: frozenset(_EQUALITY),
    K.INT: frozenset(_EQUALITY | _SET | _RANGE),
    K.DOUBLE: frozenset(_EQUALITY | _SET | _RANGE),
    K.BOOL: frozenset(_EQUALITY),
    K.DATETIME: frozenset(_EQUALITY | _SET | _RANGE),
    K.KEYWORD_LIST: frozenset(_EQUALITY | _SET),
}
# A status is one of a set: ranges and prefixes over its names mean nothing.
_STATUS_OPERATORS: Final = frozenset({Operator.EQ, Operator.NE, Operator.IN, Operator.NOT_IN})
_ORDERABLE: Final = frozenset({K.KEYWORD, K.INT, K.DOUBLE, K.BOOL, K.DATETIME})

Value: TypeAlias = str | int | float | bool | datetime


@dataclass(frozen=True)
class Predicate:
    """A checked predicate: `values` hold the attribute's own type (one, two for BETWEEN, n for IN).

    Over a keyword_list `=` means "holds", `!=` "does not hold", `IN` "holds any of"; over text
    `=` is a full-text match of every word.
    """

    attribute: str
    type: AttributeType
    builtin: bool
    operator: Operator
    values: tuple[Value, ...]


@dataclass(frozen=True)
class ListQuery:
    """A checked query, ready to compile. `order_by` defaults to newest first in the store."""

    filter: Node[Predicate] | None
    order_by: tuple[str, AttributeType, bool, bool] | None  # (name, type, builtin, descending)
    group_by: str | None


def _resolve(
    name: str, offset: int, custom: Mapping[str, AttributeType]
) -> tuple[AttributeType, bool]:
    if name in BUILTIN_ATTRIBUTES:
        return BUILTIN_ATTRIBUTES[name], True
    if name in custom:
        return custom[name], False
    raise InvalidListQuery(
        f"unknown search attribute {name!r}; register it for this namespace first", offset
    )


def _convert(literal: Literal, kind: AttributeType, attribute: str) -> Value:
    value = literal.value
    fits: Value | None = None
    match kind:
        case K.KEYWORD | K.TEXT | K.KEYWORD_LIST if isinstance(value, str):
            fits = value
        case K.INT if isinstance(value, int) and not isinstance(value, bool):
            fits = value if -(2**63) <= value < 2**63 else None
        case K.DOUBLE if isinstance(value, int | float) and not isinstance(value, bool):
            fits = float(value) if abs(float(value)) != float("inf") else None
        case K.BOOL if isinstance(value, bool):
            fits = value
        case K.DATETIME if isinstance(value, str):
            fits = _datetime(value)
    if fits is None:
        raise InvalidListQuery(
            f"{attribute} is a {kind} attribute; {value!r} is not a {kind} value", literal.offset
        )
    if attribute == "ExecutionStatus" and fits not in EXECUTION_STATUSES:
        raise InvalidListQuery(
            f"ExecutionStatus is one of {', '.join(sorted(EXECUTION_STATUSES))}", literal.offset
        )
    return fits


def _datetime(text: str) -> datetime | None:
    """RFC 3339 with an explicit offset: a time without one would mean the server's zone."""
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None and "T" in text.upper() else None


def _bind_predicate(raw: RawPredicate, custom: Mapping[str, AttributeType]) -> Predicate:
    kind, builtin = _resolve(raw.attribute, raw.offset, custom)
    allowed = _STATUS_OPERATORS if raw.attribute == "ExecutionStatus" else _ALLOWED[kind]
    if raw.operator not in allowed:
        raise InvalidListQuery(
            f"{raw.operator} does not apply to {raw.attribute}, a {kind} attribute", raw.offset
        )
    values = tuple(_convert(literal, kind, raw.attribute) for literal in raw.literals)
    return Predicate(raw.attribute, kind, builtin, raw.operator, values)


def _bind_node(node: Node[RawPredicate], custom: Mapping[str, AttributeType]) -> Node[Predicate]:
    match node:
        case And(parts=parts):
            return And(tuple(_bind_node(part, custom) for part in parts))
        case Or(parts=parts):
            return Or(tuple(_bind_node(part, custom) for part in parts))
        case RawPredicate():
            return _bind_predicate(node, custom)
    raise AssertionError(node)


def bind_list_query(parsed: ParsedListQuery, custom: Mapping[str, AttributeType]) -> ListQuery:
    """Check `parsed` against the built-ins and the namespace's `custom` attributes.

    Raises:
        InvalidListQuery: an unknown attribute, an operator its type lacks, a literal of
            another type, an unknown ExecutionStatus, an unorderable ORDER BY or a GROUP BY
            other than ExecutionStatus; `offset` points at it.
    """
    order = None
    if parsed.order_by is not None:
        name, offset = parsed.order_by.attribute, parsed.order_by.offset
        kind, builtin = _resolve(name, offset, custom)
        if kind not in _ORDERABLE:
            raise InvalidListQuery(f"cannot ORDER BY {name}, a {kind} attribute", offset)
        order = (name, kind, builtin, parsed.order_by.descending)
    group = None
    if parsed.group_by is not None:
        if parsed.group_by.attribute not in GROUPABLE:
            raise InvalidListQuery(
                "only GROUP BY ExecutionStatus is supported", parsed.group_by.offset
            )
        group = parsed.group_by.attribute
    found = None if parsed.filter is None else _bind_node(parsed.filter, custom)
    return ListQuery(found, order, group)
