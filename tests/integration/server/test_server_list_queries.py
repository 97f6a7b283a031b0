"""The list query language on `GET /api/workflows` (issue 30; PROTOCOL.md 17): the SDK
Client's `list_workflows(query=...)`, ORDER BY with keyset pages stable under new runs, and a
bad query refused as 422 with its position."""

from __future__ import annotations

from typing import Any

import pytest
from durable_workflow import Client
from durable_workflow.errors import InvalidArgument

from tests.integration.server.conftest import Api


async def ids(client: Client, **filters: Any) -> list[str]:
    page = await client.list_workflows(**filters)
    return [w.workflow_id for w in page.executions]


async def test_the_sdk_client_filters_with_a_list_query(api: Api, client: Client) -> None:
    """Issue 30: built-in attributes, AND/OR, IN, STARTS_WITH, a status and a time range."""
    for workflow_id, kind in [("a-1", "greeter"), ("a-2", "greeter"), ("b-1", "other")]:
        await api.start(workflow_id, kind)
    await api.control("POST", "/api/workflows/a-2/cancel", json={})

    assert await ids(client, query="WorkflowType = 'greeter'") == ["a-2", "a-1"]
    assert await ids(client, query="WorkflowType = 'other' OR WorkflowId = 'a-1'") == [
        "b-1",
        "a-1",
    ]
    assert await ids(
        client, query="ExecutionStatus = 'Running' AND WorkflowId STARTS_WITH 'a-'"
    ) == ["a-1"]
    assert await ids(client, query="ExecutionStatus IN ('Canceled', 'Failed')") == ["a-2"]
    assert await ids(client, query="StartTime > '2000-01-01T00:00:00Z' AND CloseTime IS NULL") == [
        "b-1",
        "a-1",
    ]
    assert await ids(client, query="WorkflowType = 'greeter' ORDER BY WorkflowId ASC") == [
        "a-1",
        "a-2",
    ]
    # The reference's term (a bare word) still matches inside workflow ids.
    assert await ids(client, query="a-") == ["a-2", "a-1"]


async def test_ordered_pages_are_stable_while_runs_start(api: Api, client: Client) -> None:
    """Issue 30: keyset pages in the query's order; a run started between two pages moves no
    run to another page and none shows twice."""
    for i in (5, 1, 4, 2):
        await api.start(f"wf-{i}")
    query = "WorkflowId STARTS_WITH 'wf-' ORDER BY WorkflowId DESC"
    first = await client.list_workflows(query=query, page_size=2)
    assert [w.workflow_id for w in first.executions] == ["wf-5", "wf-4"]
    await api.start("wf-3")  # sorts into the pages still to come
    await api.start("wf-9")  # sorts before the page already read
    seen = [w.workflow_id for w in first.executions]
    token = first.next_page_token
    while token is not None:
        page = await client.list_workflows(query=query, page_size=2, next_page_token=token)
        seen += [w.workflow_id for w in page.executions]
        token = page.next_page_token
    assert seen == ["wf-5", "wf-4", "wf-3", "wf-2", "wf-1"]


@pytest.mark.parametrize(
    ("query", "position", "said"),
    [
        ("WorkflowType = ", 15, "ends early"),
        ("WorkflowType = 'x' AND", 22, "ends early"),
        ("Nope = 'x'", 0, "unknown search attribute"),
        ("StartTime > 'yesterday'", 12, "datetime"),
        ("WorkflowType = 'x'; DROP TABLE runs", 18, "unexpected character"),
        ("(" * 40 + "WorkflowType = 'x'" + ")" * 40, 32, "nest"),
    ],
)
async def test_a_bad_query_is_422_with_its_position(
    api: Api, client: Client, query: str, position: int, said: str
) -> None:
    """Issue 30: 422 `validation_failed` naming the character; the SDK raises InvalidArgument."""
    await api.start("wf-1")
    answer = await api.control("GET", "/api/workflows", params={"query": query})
    body = answer.json()
    assert (answer.status_code, body["reason"]) == (422, "validation_failed"), answer.text
    assert body["position"] == position
    assert said in body["errors"]["query"][0]
    with pytest.raises(InvalidArgument):
        await client.list_workflows(query=query)


async def test_a_registered_attribute_is_queryable(api: Api, client: Client) -> None:
    """Issue 30: a custom attribute may be named once registered (no run has a value yet)."""
    await api.start("wf-1")
    assert (
        await api.control("GET", "/api/workflows", params={"query": "Tier > 1"})
    ).status_code == 422
    await client.create_search_attribute("Tier", "int")
    assert await ids(client, query="Tier > 1") == []
    assert await ids(client, query="Tier IS NULL") == ["wf-1"]
