"""Namespaces through the native client and `burrow namespace ...` (issue 30): the default
namespace needs no setup, a start in an unknown namespace is a typed error with nothing written,
and every refusal writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from burrow import Client
from burrow.cli import app
from burrow.config import Settings
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.namespace_errors import (
    InvalidNamespace,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFoundError,
)

ENV = {"COLUMNS": "250", "NO_COLOR": "1", "BURROW_WAKES": "0"}


async def table(store: Store, t: sa.Table) -> list[dict[str, Any]]:
    async with store.engine.connect() as conn:
        found = await conn.execute(sa.select(t).order_by(*t.primary_key.columns))
        return [dict(row._mapping) for row in found]


async def test_the_client_manages_namespaces_and_starts_only_in_known_ones(
    database_url: str, store: Store
) -> None:
    """Issue 30: default works untouched; create/list/describe/update/delete; a start in a
    namespace the store lacks raises NamespaceNotFoundError and writes no run."""
    settings = Settings(database_url=database_url)
    async with Client(store, settings=settings) as client:
        await client.start_workflow("Checkout", id="d-1", task_queue="q")
        assert (await client.describe_namespace()).name == "default"
        made = await client.create_namespace("Team-B", description="b", retention_days=3)
        assert (made.name, made.retention_days) == ("team-b", 3)
        assert [n.name for n in await client.list_namespaces()] == ["default", "team-b"]
        changed = await client.update_namespace("team-b", retention_days=5)
        assert (changed.description, changed.retention_days) == ("b", 5)

    elsewhere = Client(store, settings=settings.model_copy(update={"namespace": "nowhere"}))
    with pytest.raises(NamespaceNotFoundError, match="'nowhere'"):
        await elsewhere.start_workflow("Checkout", id="n-1", task_queue="q")
    assert [r["workflow_id"] for r in await table(store, s.runs)] == ["d-1"]

    team = Client(store, settings=settings.model_copy(update={"namespace": "team-b"}))
    await team.start_workflow("Checkout", id="t-1", task_queue="q")
    with pytest.raises(NamespaceNotEmpty) as held:
        await team.delete_namespace("team-b")
    assert held.value.holds == {"runs": 1}
    assert len(await table(store, s.runs)) == 2
    deleted = await team.delete_namespace("team-b", force=True)
    assert deleted["runs"] == 1 and deleted["history_events"] >= 1
    assert [r["workflow_id"] for r in await table(store, s.runs)] == ["d-1"]
    with pytest.raises(NamespaceNotFoundError):
        await team.describe_namespace("team-b")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "default"}, NamespaceAlreadyExists),
        ({"name": "a b"}, InvalidNamespace),
        ({"name": ""}, InvalidNamespace),
        ({"name": "ok", "retention_days": 0}, InvalidNamespace),
        ({"name": "ok", "retention_days": 366}, InvalidNamespace),
        ({"name": "ok", "description": "x" * 1001}, InvalidNamespace),
    ],
)
async def test_store_refusals_write_nothing(
    store: Store, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """Issue 30: a refused create leaves the namespaces as they were."""
    before = await table(store, s.namespaces)
    with pytest.raises(error):
        await store.create_namespace(**kwargs)
    assert await table(store, s.namespaces) == before


def test_cli_round_trip_and_refusals(database_url: str) -> None:
    """Issue 30: `burrow namespace create|list|describe|update|delete --json`; bad usage exits 2
    before connecting, a refusal exits 1, neither writes."""
    runner = CliRunner()
    db = ["--database-url", database_url]

    def invoke(*args: str) -> Any:
        return runner.invoke(app, ["namespace", *args, *db], env=ENV)

    def json_of(*args: str) -> dict[str, Any]:
        done = invoke(*args, "--json")
        assert done.exit_code == 0, done.output
        document: dict[str, Any] = json.loads(done.stdout)
        return document

    made = json_of("create", "ops", "--description", "night jobs", "--retention-days", "10")
    assert (made["name"], made["retention_days"], made["outcome"]) == ("ops", 10, "created")
    listed = json_of("list")["namespaces"]
    assert [(n["name"], n["retention_days"]) for n in listed] == [("default", 30), ("ops", 10)]
    assert json_of("describe", "OPS")["description"] == "night jobs"
    assert json_of("update", "ops", "--retention-days", "20")["retention_days"] == 20

    for args, code, said in [
        (("create", "bad name"), 2, "only letters"),
        (("create", "x", "--retention-days", "0"), 2, "1 to 365"),
        (("create", "ops"), 1, "already exists"),
        (("describe", "nope"), 1, "not found"),
        (("update", "nope", "--retention-days", "3"), 1, "not found"),
        (("delete", "nope"), 1, "not found"),
    ]:
        refused = invoke(*args)
        assert refused.exit_code == code, (args, refused.output)
        assert said in refused.output, (args, refused.output)
    assert [n["name"] for n in json_of("list")["namespaces"]] == ["default", "ops"]

    assert json_of("delete", "ops") == {"name": "ops", "outcome": "deleted", "deleted": {}}
    assert [n["name"] for n in json_of("list")["namespaces"]] == ["default"]
