"""The list query language (issue 30): parsing, typing, and refusals that point at the problem."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import (
    MAX_DEPTH,
    MAX_IN_VALUES,
    MAX_QUERY_CHARS,
    And,
    Operator,
    Or,
    RawPredicate,
    parse_list_query,
)
from burrow.protocol.list_query_types import AttributeType, ListQuery, Predicate, bind_list_query

CUSTOM = {
    "CustomerId": AttributeType.KEYWORD,
    "Notes": AttributeType.TEXT,
    "Priority": AttributeType.INT,
    "Amount": AttributeType.DOUBLE,
    "Vip": AttributeType.BOOL,
    "DueAt": AttributeType.DATETIME,
    "Tags": AttributeType.KEYWORD_LIST,
    "Order Ref": AttributeType.KEYWORD,
}


def bound(text: str) -> ListQuery:
    return bind_list_query(parse_list_query(text), CUSTOM)


def refused(text: str) -> InvalidListQuery:
    with pytest.raises(InvalidListQuery) as caught:
        bound(text)
    return caught.value


def test_the_issue_example_parses_and_binds_to_typed_values() -> None:
    query = bound(
        "WorkflowType = 'Checkout' AND CustomerId = \"c-17\""
        " AND StartTime >= '2026-12-06T00:00:00Z' ORDER BY StartTime DESC"
    )
    assert query.filter == And(
        (
            Predicate("WorkflowType", AttributeType.KEYWORD, True, Operator.EQ, ("Checkout",)),
            Predicate("CustomerId", AttributeType.KEYWORD, False, Operator.EQ, ("c-17",)),
            Predicate(
                "StartTime",
                AttributeType.DATETIME,
                True,
                Operator.GE,
                (datetime(2026, 12, 6, tzinfo=UTC),),
            ),
        )
    )
    assert query.order_by == ("StartTime", AttributeType.DATETIME, True, True)
    assert query.group_by is None


def test_and_binds_tighter_than_or_and_parentheses_regroup() -> None:
    loose = parse_list_query("Priority = 1 OR Priority = 2 AND Vip = true").filter
    assert isinstance(loose, Or) and isinstance(loose.parts[1], And)
    tight = parse_list_query("(Priority = 1 OR Priority = 2) AND Vip = true").filter
    assert isinstance(tight, And) and isinstance(tight.parts[0], Or)


def test_chains_flatten_so_a_long_conjunction_is_one_node() -> None:
    chain = parse_list_query(" AND ".join(f"Priority = {i}" for i in range(50))).filter
    assert isinstance(chain, And) and len(chain.parts) == 50


@pytest.mark.parametrize(
    ("text", "operator", "values"),
    [
        ("Priority != 3", Operator.NE, (3,)),
        ("Priority <> 3", Operator.NE, (3,)),
        ("Amount < 2", Operator.LT, (2.0,)),
        ("Amount <= -1.5e2", Operator.LE, (-150.0,)),
        ("Priority > 0", Operator.GT, (0,)),
        ("DueAt > '2026-01-01T10:00:00+01:00'", Operator.GT, None),
        ("CustomerId in ('a', 'b', 'c')", Operator.IN, ("a", "b", "c")),
        ("CustomerId NOT IN ('a')", Operator.NOT_IN, ("a",)),
        ("Priority BETWEEN 1 AND 3", Operator.BETWEEN, (1, 3)),
        ("Priority not between 1 and 3", Operator.NOT_BETWEEN, (1, 3)),
        ("CustomerId STARTS_WITH 'c-'", Operator.STARTS_WITH, ("c-",)),
        ("Vip IS NULL", Operator.IS_NULL, ()),
        ("Vip is not null", Operator.IS_NOT_NULL, ()),
        ("Tags = 'gold'", Operator.EQ, ("gold",)),
        ("Notes = 'late delivery'", Operator.EQ, ("late delivery",)),
        ("`Order Ref` = 'x\\'y'", Operator.EQ, ("x'y",)),
        ("ExecutionStatus = 'Running'", Operator.EQ, ("Running",)),
    ],
)
def test_each_operator_binds(
    text: str, operator: Operator, values: tuple[object, ...] | None
) -> None:
    predicate = bound(text).filter
    assert isinstance(predicate, Predicate)
    assert predicate.operator is operator
    if values is not None:
        assert predicate.values == values


def test_keywords_never_swallow_attribute_names_that_begin_with_them() -> None:
    names = ("Andy", "Ordered", "IsOpen", "Notable", "Inx", "Order")
    custom = {name: AttributeType.INT for name in names}
    parsed = parse_list_query(
        "Andy = 1 AND Ordered = 2 AND IsOpen = 3 AND Notable = 4 AND Inx = 5 AND `Order` = 6"
    )
    query = bind_list_query(parsed, custom)
    assert isinstance(query.filter, And)
    assert [p.attribute for p in query.filter.parts if isinstance(p, Predicate)] == list(names)
    # A keyword as a name needs backquotes, as in Temporal's syntax.
    with pytest.raises(InvalidListQuery, match="expected BY"):
        parse_list_query("Order = 6")


def test_an_empty_query_matches_everything_and_count_may_group() -> None:
    assert bound("   ") == ListQuery(None, None, None)
    assert bound("order by Priority").order_by == ("Priority", AttributeType.INT, False, False)
    assert bound("CustomerId = 'x' GROUP BY ExecutionStatus").group_by == "ExecutionStatus"


@pytest.mark.parametrize(
    ("text", "offset", "says"),
    [
        ("Priority = ", 11, "ends early"),
        ("Priority = 1 AND", 16, "ends early"),
        ("Priority = 1 ANDX Vip = true", 13, "unexpected 'ANDX'"),
        ("Priority ! 1", 9, "unexpected character '!'"),
        ("Priority = 1; DROP TABLE runs", 12, "unexpected character ';'"),
        ("(Priority = 1", 13, "ends early"),
        ("Priority = 'unterminated", 11, "unexpected character"),
        ("Nope = 1", 0, "unknown search attribute 'Nope'"),
        ("Vip = true AND Ghost IS NULL", 15, "unknown search attribute 'Ghost'"),
        ("Priority = 'one'", 11, "not a int value"),
        ("Priority = 1.5", 11, "not a int value"),
        ("Vip = 1", 6, "not a bool value"),
        ("Amount = true", 9, "not a double value"),
        ("DueAt > '2026-01-01'", 8, "not a datetime value"),
        ("DueAt > '2026-01-01T10:00:00'", 8, "not a datetime value"),
        ("DueAt > 'yesterday'", 8, "not a datetime value"),
        ("Priority = 99999999999999999999", 11, "not a int value"),
        ("Priority STARTS_WITH 'a'", 0, "STARTS_WITH does not apply to Priority"),
        ("Vip > false", 0, "> does not apply to Vip"),
        ("Notes IN ('a')", 0, "IN does not apply to Notes"),
        ("Tags BETWEEN 'a' AND 'b'", 0, "BETWEEN does not apply to Tags"),
        ("ExecutionStatus = 'running'", 18, "ExecutionStatus is one of"),
        ("ExecutionStatus STARTS_WITH 'Run'", 0, "STARTS_WITH does not apply to ExecutionStatus"),
        ("ExecutionStatus > 'Failed'", 0, "> does not apply to ExecutionStatus"),
        ("ORDER BY Notes", 9, "cannot ORDER BY Notes"),
        ("ORDER BY Tags DESC", 9, "cannot ORDER BY Tags"),
        ("Vip = true GROUP BY WorkflowType", 20, "only GROUP BY ExecutionStatus"),
    ],
)
def test_a_bad_query_is_refused_at_the_position_of_its_problem(
    text: str, offset: int, says: str
) -> None:
    error = refused(text)
    assert error.offset == offset, error
    assert says in str(error)
    assert f"at character {offset + 1}" in str(error)


def test_hostile_sizes_are_refused_before_a_tree_is_built() -> None:
    assert "characters" in str(refused("Priority = 1 AND " * 1000))
    deep = "(" * (MAX_DEPTH + 1) + "Priority = 1" + ")" * (MAX_DEPTH + 1)
    assert refused(deep).offset == MAX_DEPTH
    ok = "(" * MAX_DEPTH + "Priority = 1" + ")" * MAX_DEPTH
    assert isinstance(bound(ok).filter, Predicate)
    huge_in = "Priority IN (" + ",".join("1" for _ in range(MAX_IN_VALUES + 1)) + ")"
    assert len(huge_in) < MAX_QUERY_CHARS
    assert "IN list holds at most" in str(refused(huge_in))
    assert "attributes at most" in str(refused(" OR ".join(["Vip IS NULL"] * 300)))


VOCABULARY = [
    *CUSTOM,
    "`Order Ref`",
    "WorkflowId",
    "ExecutionStatus",
    "StartTime",
    "=", "!=", "<", "<=", ">", ">=", "<>",
    "AND", "or", "NOT", "IN", "BETWEEN", "STARTS_WITH", "IS", "NULL", "ORDER", "BY", "GROUP",
    "DESC", "asc", "(", ")", ",", "'x'", "'Running'", "\"2026-12-06T00:00:00Z\"", "1", "-2.5",
    "true", "FALSE", "'; DROP TABLE runs; --'", "\\", "`", "'", ";", "--", "/*",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(VOCABULARY), max_size=25))
def test_fuzzed_token_soup_binds_or_is_refused_never_anything_else(tokens: list[str]) -> None:
    try:
        query = bound(" ".join(tokens))
    except InvalidListQuery as error:
        assert 0 <= error.offset <= len(" ".join(tokens))
    else:
        assert isinstance(query, ListQuery)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_text_binds_or_is_refused_never_anything_else(text: str) -> None:
    try:
        bound(text)
    except InvalidListQuery as error:
        assert 0 <= error.offset <= len(text)


def test_raw_predicates_keep_the_offset_of_their_attribute() -> None:
    parsed = parse_list_query("Vip = true OR  Priority IN (1, 2)")
    assert isinstance(parsed.filter, Or)
    second = parsed.filter.parts[1]
    assert isinstance(second, RawPredicate)
    assert (second.offset, [lit.offset for lit in second.literals]) == (15, [28, 31])
