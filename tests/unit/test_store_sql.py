"""Text statements compile once to the driver's `$n` form, exactly as SQLAlchemy would send them."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import burrow.store
import burrow.store.completion
from burrow.store import sql


def test_named_parameters_become_numbered_in_order_of_first_use() -> None:
    stmt = sql.statement("SELECT :b, :a, :b")
    assert stmt.sql == "SELECT $1, $2, $1"
    assert stmt.names == ("b", "a")
    assert stmt.args({"a": 1, "b": 2, "unused": 3}) == [2, 1]


def test_casts_stay_casts() -> None:
    stmt = sql.statement(
        "SELECT x::text, CAST(:a AS uuid), CAST(CAST(:ids AS text[]) AS uuid[]), y::jsonb"
        " FROM t WHERE z = CAST(:a AS text)::int"
    )
    assert stmt.sql == (
        "SELECT x::text, CAST($1 AS uuid), CAST(CAST($2 AS text[]) AS uuid[]), y::jsonb"
        " FROM t WHERE z = CAST($1 AS text)::int"
    )
    assert stmt.names == ("a", "ids")


def test_json_parameters_are_sent_as_json_text_and_none_as_null() -> None:
    stmt = sql.statement("UPDATE t SET a = :a, b = :b WHERE id = :id", json_params=["a", "b"])
    assert stmt.sql == "UPDATE t SET a = $1::JSONB, b = $2::JSONB WHERE id = $3"
    assert stmt.args({"a": {"k": [1, "x"]}, "b": None, "id": "i"}) == ['{"k": [1, "x"]}', None, "i"]


def test_a_missing_parameter_is_refused() -> None:
    with pytest.raises(KeyError):
        sql.statement("SELECT :a").args({})


def _store_statements() -> list[tuple[str, sql.Statement]]:
    found = []
    for package in (burrow.store, burrow.store.completion):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            short = info.name.removeprefix("burrow.store.")
            for name, value in vars(module).items():
                if isinstance(value, sql.Statement):
                    found.append((f"{short}.{name}", value))
    return found


STATEMENTS = _store_statements()


def test_the_store_has_text_statements() -> None:
    assert len(STATEMENTS) > 50


@pytest.mark.parametrize(("name", "stmt"), STATEMENTS, ids=[name for name, _ in STATEMENTS])
def test_every_store_statement_binds_each_name_once_and_leaves_no_named_parameter(
    name: str, stmt: sql.Statement
) -> None:
    numbers = {int(n) for n in re.findall(r"\$(\d+)", stmt.sql)}
    assert numbers == set(range(1, len(stmt.names) + 1)), name
    assert len(set(stmt.names)) == len(stmt.names)
    assert stmt.json_names <= set(stmt.names)
    outside_literals = re.sub(r"'[^']*'", "''", stmt.sql)
    assert not re.search(r"(?<![:\w]):[A-Za-z_]\w*", outside_literals), name
