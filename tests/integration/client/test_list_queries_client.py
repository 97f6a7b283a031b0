"""List queries through the native client and `burrow workflow list|count --query` (issue 30)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from burrow import Client
from burrow.cli import app
from burrow.config import Settings, WakeSettings
from burrow.errors import InvalidListQuery
from burrow.store import Store

ENV = {"COLUMNS": "250", "NO_COLOR": "1", "BURROW_WAKES": "0"}


async def started(client: Client) -> None:
    for workflow_id, kind in [("a-1", "Checkout"), ("a-2", "Checkout"), ("b-1", "Refund")]:
        await client.start_workflow(kind, id=workflow_id, task_queue="q")
    await client.get_handle("a-2").terminate(reason="test")


async def test_the_client_lists_pages_iterates_and_counts(database_url: str, store: Store) -> None:
    """Issue 30: list_workflows(query=), list_workflows_page with ORDER BY pages,
    iter_workflows, count_workflows with GROUP BY ExecutionStatus."""
    async with Client(store, settings=Settings(database_url=database_url)) as client:
        await started(client)
        checkout = await client.list_workflows(query="WorkflowType = 'Checkout'")
        assert [r.workflow_id for r in checkout] == ["a-2", "a-1"]
        first = await client.list_workflows_page(query="ORDER BY WorkflowId ASC", page_size=2)
        assert [r.workflow_id for r in first.runs] == ["a-1", "a-2"]
        rest = await client.list_workflows_page(
            query="ORDER BY WorkflowId ASC", page_size=2, next_page_token=first.next_page_token
        )
        assert ([r.workflow_id for r in rest.runs], rest.next_page_token) == (["b-1"], None)
        every = [r.workflow_id async for r in client.iter_workflows(page_size=1)]
        assert every == ["b-1", "a-2", "a-1"]

        assert (await client.count_workflows()).count == 3
        grouped = await client.count_workflows(query="GROUP BY ExecutionStatus")
        assert (grouped.count, grouped.groups) == (3, {"Running": 2, "Terminated": 1})
        running = await client.count_workflows(query="ExecutionStatus = 'Running'")
        assert (running.count, running.groups) == (2, None)

        with pytest.raises(InvalidListQuery) as bad:
            await client.list_workflows(query="WorkflowType = 'Checkout' AND Tier > 1")
        assert (bad.value.offset, "unknown search attribute 'Tier'" in str(bad.value)) == (
            30,
            True,
        )


@pytest.mark.parametrize(
    ("args", "said", "caret_at"),
    [
        (["list", "--query", "WorkflowType = "], "ends early", 15),
        (["count", "-q", "Nope = 1"], "unknown search attribute", 0),
        (["list", "-q", "StartTime > 'today'"], "not a datetime value", 12),
    ],
)
def test_a_bad_query_exits_2_pointing_at_the_problem(
    database_url: str, args: list[str], said: str, caret_at: int
) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["workflow", *args, "--database-url", database_url], env=ENV)
    assert refused.exit_code == 2, refused.output
    assert said in refused.output
    lines = refused.output.rstrip("\n").splitlines()
    assert lines[-1] == "  " + " " * caret_at + "^", refused.output


def test_the_cli_lists_and_counts_with_a_query(database_url: str) -> None:
    async def seed() -> None:
        settings = Settings(database_url=database_url, wakes=WakeSettings(enabled=False))
        async with await Client.connect(settings=settings) as client:
            await started(client)

    asyncio.run(seed())
    runner = CliRunner()
    db = ["--database-url", database_url, "--json"]
    listed = runner.invoke(
        app,
        ["workflow", "list", "-q", "WorkflowId STARTS_WITH 'a-' ORDER BY WorkflowId", *db],
        env=ENV,
    )
    assert listed.exit_code == 0, listed.output
    assert [r["workflow_id"] for r in json.loads(listed.stdout)] == ["a-1", "a-2"]
    counted = runner.invoke(
        app, ["workflow", "count", "-q", "GROUP BY ExecutionStatus", *db], env=ENV
    )
    assert counted.exit_code == 0, counted.output
    assert json.loads(counted.stdout) == {"count": 3, "groups": {"Running": 2, "Terminated": 1}}
