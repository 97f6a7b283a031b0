"""`burrow search-attribute create|list|delete` (issue 30): bad usage exits 2 before connecting,
a refused registration exits 1; neither writes anything."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from burrow.cli import app

ENV = {"COLUMNS": "250", "NO_COLOR": "1"}


def test_create_list_delete_round_trip(database_url: str) -> None:
    runner = CliRunner()
    db = ["--database-url", database_url]

    def json_of(*args: str) -> dict[str, object]:
        done = runner.invoke(app, ["search-attribute", *args, "--json", *db], env=ENV)
        assert done.exit_code == 0, done.output
        document: dict[str, object] = json.loads(done.stdout)
        return document

    assert json_of("create", "CustomerId", "keyword")["outcome"] == "created"
    assert json_of("create", "Tags", "keyword_list")["type"] == "keyword_list"
    listed = json_of("list")
    assert listed["custom_attributes"] == {"CustomerId": "keyword", "Tags": "keyword_list"}
    assert "ExecutionStatus" in listed["system_attributes"]  # type: ignore[operator]
    assert json_of("delete", "Tags") == {"name": "Tags", "outcome": "deleted", "values_removed": 0}
    assert json_of("list")["custom_attributes"] == {"CustomerId": "keyword"}


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["create", "1bad", "int"], 2, "a name is a letter"),
        (["create", "WorkflowType", "keyword"], 2, "reserved"),
        (["create", "Fine", "floaty"], 2, "floaty"),
        (["create", "Taken", "int"], 1, "already exists"),
        (["delete", "Nope"], 1, "not found"),
        (["delete", "StartTime"], 1, "cannot be removed"),
    ],
)
def test_refusals_exit_with_the_reason_and_write_nothing(
    database_url: str, args: list[str], code: int, said: str
) -> None:
    runner = CliRunner()
    db = ["--database-url", database_url]
    made = runner.invoke(app, ["search-attribute", "create", "Taken", "keyword", *db], env=ENV)
    assert made.exit_code == 0, made.output

    refused = runner.invoke(app, ["search-attribute", *args, *db], env=ENV)

    assert refused.exit_code == code, refused.output
    assert said in refused.output
    after = runner.invoke(app, ["search-attribute", "list", "--json", *db], env=ENV)
    assert json.loads(after.stdout)["custom_attributes"] == {"Taken": "keyword"}


def test_start_with_memo_and_search_attributes(database_url: str) -> None:
    """Issue 30: `burrow workflow start --memo --search-attributes`, shown by describe; a value
    the registry refuses, or a flag that is not a JSON object, exits 2 and starts nothing."""
    runner = CliRunner()
    db = ["--database-url", database_url]
    env = {**ENV, "BURROW_WAKES": "0"}
    created = runner.invoke(app, ["search-attribute", "create", "CustomerId", "keyword", *db])
    assert created.exit_code == 0, created.output
    start = ["workflow", "start", "checkout", "--task-queue", "q", *db]
    done = runner.invoke(
        app,
        [
            *start,
            "--id",
            "w-1",
            "--memo",
            '{"note": "gift"}',
            "--search-attributes",
            '{"CustomerId": "c-17"}',
            "--json",
        ],
        env=env,
    )
    assert done.exit_code == 0, done.output
    described = runner.invoke(app, ["workflow", "describe", "w-1", "--json", *db], env=env)
    document = json.loads(described.stdout)
    assert (document["memo"], document["search_attributes"]) == (
        {"note": "gift"},
        {"CustomerId": "c-17"},
    )
    for flags, said in [
        (["--memo", "[1]"], "--memo must be a JSON object"),
        (["--search-attributes", "{nope"], "--search-attributes is not JSON"),
        (["--search-attributes", '{"Tier": 3}'], "not a registered search attribute"),
    ]:
        refused = runner.invoke(app, [*start, "--id", "w-2", *flags], env=env)
        assert refused.exit_code == 2, refused.output
        assert said in refused.output
    missing = runner.invoke(app, ["workflow", "describe", "w-2", *db], env=env)
    assert missing.exit_code == 1
