"""The list query language: a subset of Temporal's visibility syntax, parsed into a typed tree.

    WorkflowType = 'Checkout' AND CustomerId = 'c-17' AND StartTime >= '2026-12-06T00:00:00Z'
    ExecutionStatus IN ('Running', 'Failed') OR (Priority BETWEEN 1 AND 3) ORDER BY StartTime DESC

`parse_list_query` reads the text with lark's LALR parser (never regular expressions over the
whole query) into `RawPredicate` leaves; `bind_list_query` checks each attribute against the
namespace's types (list_query_types.py) and converts each literal to its attribute's type. The store
compiles the bound tree to parameterised SQL. Any fault is an `InvalidListQuery` naming the position
of the problem, so the CLI and HTTP can point at it; nothing is ever executed for a bad query.

Hostile input is bounded before the tree is built: the text's length, the nesting depth, the
number of predicates and the size of an IN list.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Generic, TypeAlias, TypeVar

import lark

from burrow.errors import InvalidListQuery

MAX_QUERY_CHARS = 8192
MAX_DEPTH = 32
MAX_PREDICATES = 256
MAX_IN_VALUES = 1000

_GRAMMAR = r"""
query: or_expr? order_clause? group_clause?

?or_expr: and_expr
        | or_expr _OR and_expr -> or_
?and_expr: atom
         | and_expr _AND atom -> and_
?atom: "(" or_expr ")"
     | predicate

predicate: attribute COMPARATOR literal -> compare
         | attribute NOT? _IN "(" literal ("," literal)* ")" -> in_
         | attribute NOT? _BETWEEN literal _AND literal -> between
         | attribute _STARTS_WITH literal -> starts_with
         | attribute _IS NOT? _NULL -> is_null

order_clause: _ORDER _BY attribute DIRECTION?
group_clause: _GROUP _BY attribute

attribute: NAME | QUOTED_NAME
literal: STRING | NUMBER | TRUE | FALSE

COMPARATOR: "<=" | ">=" | "!=" | "<>" | "=" | "<" | ">"
DIRECTION.2: /asc\b/i | /desc\b/i
NOT.2: /not\b/i
_OR.2: /or\b/i
_AND.2: /and\b/i
_IN.2: /in\b/i
_BETWEEN.2: /between\b/i
_STARTS_WITH.2: /starts_with\b/i
_IS.2: /is\b/i
_NULL.2: /null\b/i
_ORDER.2: /order\b/i
_GROUP.2: /group\b/i
_BY.2: /by\b/i
TRUE.2: /true\b/i
FALSE.2: /false\b/i
NAME: /[A-Za-z_][A-Za-z0-9_]*/
QUOTED_NAME: /`[^`\n]{1,64}`/
STRING: /'(?:[^'\\]|\\.)*'/ | /"(?:[^"\\]|\\.)*"/
NUMBER: /[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?/

%ignore /\s+/
"""


class Operator(StrEnum):
    """What a predicate asks of its attribute."""

    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    IN = "IN"
    NOT_IN = "NOT IN"
    BETWEEN = "BETWEEN"
    NOT_BETWEEN = "NOT BETWEEN"
    STARTS_WITH = "STARTS_WITH"
    IS_NULL = "IS NULL"
    IS_NOT_NULL = "IS NOT NULL"


RawValue: TypeAlias = str | int | float | bool


@dataclass(frozen=True)
class Literal:
    """A literal as written, with its offset for errors."""

    value: RawValue
    offset: int


@dataclass(frozen=True)
class RawPredicate:
    """A predicate before its attribute and literals are checked against their types."""

    attribute: str
    operator: Operator
    literals: tuple[Literal, ...]
    offset: int


Leaf = TypeVar("Leaf")


@dataclass(frozen=True)
class And(Generic[Leaf]):
    """Every part holds."""

    parts: tuple[Node[Leaf], ...]


@dataclass(frozen=True)
class Or(Generic[Leaf]):
    """At least one part holds."""

    parts: tuple[Node[Leaf], ...]


Node: TypeAlias = Leaf | And[Leaf] | Or[Leaf]


@dataclass(frozen=True)
class OrderBy:
    """`ORDER BY <attribute> [ASC|DESC]`."""

    attribute: str
    descending: bool
    offset: int


@dataclass(frozen=True)
class GroupBy:
    """`GROUP BY <attribute>`, for counts only."""

    attribute: str
    offset: int


@dataclass(frozen=True)
class ParsedListQuery:
    """The query as written: `filter` is None for an empty query (every run)."""

    filter: Node[RawPredicate] | None
    order_by: OrderBy | None
    group_by: GroupBy | None


_COMPARATORS = {
    "=": Operator.EQ,
    "!=": Operator.NE,
    "<>": Operator.NE,
    "<": Operator.LT,
    "<=": Operator.LE,
    ">": Operator.GT,
    ">=": Operator.GE,
}


@cache
def _parser() -> lark.Lark:
    return lark.Lark(
        _GRAMMAR, start="query", parser="lalr", lexer="basic", maybe_placeholders=False
    )


def _unquote(token: lark.Token) -> str:
    body = str(token)[1:-1]
    out: list[str] = []
    chars = iter(body)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "\\")
            out.append({"n": "\n", "t": "\t"}.get(escaped, escaped))
        else:
            out.append(char)
    return "".join(out)


def _literal(token: lark.Token) -> Literal:
    offset = token.start_pos or 0
    match token.type:
        case "STRING":
            return Literal(_unquote(token), offset)
        case "TRUE" | "FALSE":
            return Literal(token.type == "TRUE", offset)
        case _:
            text = str(token)
            is_int = all(c not in text for c in ".eE")
            return Literal(int(text) if is_int else float(text), offset)


@dataclass(frozen=True)
class _Name:
    name: str
    offset: int


def _parts(items: list[object]) -> tuple[_Name, tuple[Literal, ...], bool]:
    """A predicate's attribute, its literals, and whether a NOT token was written."""
    name = items[0]
    assert isinstance(name, _Name)
    literals = tuple(item for item in items if isinstance(item, Literal))
    negated = any(isinstance(item, lark.Token) and item.type == "NOT" for item in items)
    return name, literals, negated


class _Tree(lark.Transformer[lark.Token, object]):
    """Builds the typed tree; lark calls one method per rule alias."""

    def attribute(self, items: list[lark.Token]) -> _Name:
        token = items[0]
        name = str(token)[1:-1] if token.type == "QUOTED_NAME" else str(token)
        return _Name(name, token.start_pos or 0)

    def literal(self, items: list[lark.Token]) -> Literal:
        return _literal(items[0])

    def compare(self, items: list[object]) -> RawPredicate:
        name, literals, _ = _parts(items)
        comparator = next(i for i in items if isinstance(i, lark.Token) and i.type == "COMPARATOR")
        return RawPredicate(name.name, _COMPARATORS[str(comparator)], literals, name.offset)

    def in_(self, items: list[object]) -> RawPredicate:
        name, literals, negated = _parts(items)
        if len(literals) > MAX_IN_VALUES:
            raise InvalidListQuery(f"an IN list holds at most {MAX_IN_VALUES} values", name.offset)
        operator = Operator.NOT_IN if negated else Operator.IN
        return RawPredicate(name.name, operator, literals, name.offset)

    def between(self, items: list[object]) -> RawPredicate:
        name, literals, negated = _parts(items)
        operator = Operator.NOT_BETWEEN if negated else Operator.BETWEEN
        return RawPredicate(name.name, operator, literals, name.offset)

    def starts_with(self, items: list[object]) -> RawPredicate:
        name, literals, _ = _parts(items)
        return RawPredicate(name.name, Operator.STARTS_WITH, literals, name.offset)

    def is_null(self, items: list[object]) -> RawPredicate:
        name, _, negated = _parts(items)
        operator = Operator.IS_NOT_NULL if negated else Operator.IS_NULL
        return RawPredicate(name.name, operator, (), name.offset)

    def and_(self, items: list[Node[RawPredicate]]) -> And[RawPredicate]:
        return And(_flatten(items, And))

    def or_(self, items: list[Node[RawPredicate]]) -> Or[RawPredicate]:
        return Or(_flatten(items, Or))

    def order_clause(self, items: list[object]) -> OrderBy:
        name, _, _ = _parts(items)
        descending = any(isinstance(i, lark.Token) and str(i).lower() == "desc" for i in items)
        return OrderBy(name.name, descending, name.offset)

    def group_clause(self, items: list[object]) -> GroupBy:
        name, _, _ = _parts(items)
        return GroupBy(name.name, name.offset)

    def query(self, items: list[object]) -> ParsedListQuery:
        found: Node[RawPredicate] | None = None
        order: OrderBy | None = None
        group: GroupBy | None = None
        for item in items:
            if isinstance(item, OrderBy):
                order = item
            elif isinstance(item, GroupBy):
                group = item
            elif isinstance(item, RawPredicate | And | Or):
                found = item
        return ParsedListQuery(found, order, group)


def _flatten(
    items: list[Node[RawPredicate]], kind: type[And[RawPredicate]] | type[Or[RawPredicate]]
) -> tuple[Node[RawPredicate], ...]:
    """`a AND b AND c` is one And of three, not a chain the compiler would recurse through."""
    parts: list[Node[RawPredicate]] = []
    for item in items:
        parts.extend(item.parts if isinstance(item, kind) else (item,))
    return tuple(parts)


def _unexpected_character(text: str, exc: lark.exceptions.UnexpectedCharacters) -> InvalidListQuery:
    offset = exc.pos_in_stream or 0
    return InvalidListQuery(f"unexpected character {text[offset : offset + 1]!r}", offset)


def _check_size(text: str) -> None:
    """Refuse what would cost much before the tree exists: length, nesting, predicate count."""
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidListQuery(f"a list query is at most {MAX_QUERY_CHARS} characters", 0)
    depth = predicates = 0
    try:
        for token in _parser().lex(text):
            if token.type == "LPAR":
                depth += 1
                if depth > MAX_DEPTH:
                    raise InvalidListQuery(
                        f"parentheses nest at most {MAX_DEPTH} deep", token.start_pos or 0
                    )
            elif token.type == "RPAR":
                depth -= 1
            elif token.type in ("NAME", "QUOTED_NAME"):
                predicates += 1
                if predicates > MAX_PREDICATES:
                    raise InvalidListQuery(
                        f"a list query names attributes at most {MAX_PREDICATES} times",
                        token.start_pos or 0,
                    )
    except lark.exceptions.UnexpectedCharacters as exc:
        raise _unexpected_character(text, exc) from None


_READABLE = {
    "$END": "the end",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "NAME": "an attribute",
}


def _expected(exc: lark.exceptions.UnexpectedToken) -> str:
    names = {_READABLE.get(n, n.lstrip("_").replace("_", " ")) for n in map(str, exc.expected)}
    names.discard("QUOTED NAME")
    return ", ".join(sorted(names))


def parse_list_query(text: str) -> ParsedListQuery:
    """Parse `text`; an empty or blank query matches every run.

    Raises:
        InvalidListQuery: the text is not a query; `offset` is where it stops making sense.
    """
    _check_size(text)
    if not text.strip():
        return ParsedListQuery(None, None, None)
    try:
        tree = _parser().parse(text)
        result = _Tree().transform(tree)
    except lark.exceptions.UnexpectedToken as exc:
        token = exc.token
        if token.type == "$END":
            raise InvalidListQuery(
                f"the query ends early; expected {_expected(exc)}", len(text)
            ) from None
        raise InvalidListQuery(
            f"unexpected {str(token)!r}; expected {_expected(exc)}", token.start_pos or 0
        ) from None
    except lark.exceptions.UnexpectedCharacters as exc:
        raise _unexpected_character(text, exc) from None
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, InvalidListQuery):
            raise exc.orig_exc from None
        raise
    assert isinstance(result, ParsedListQuery)
    return result
