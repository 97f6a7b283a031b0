"""The SDK's schedule, search attribute, memo and list-query calls against a real `burrow server`
process (issue 30, Done when).

A schedule created with the SDK's `Client.create_schedule` (every second, three runs at most)
is fired by the server's own repair pass; an SDK worker runs what it starts. Describe, the
audit history and the deterministic workflow ids (`<schedule id>-<fire time>`) agree.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from durable_workflow import Client, ScheduleAction, ScheduleSpec, Worker

from tests.acceptance.test_sdk_against_server import QUEUE, TOKEN, running_server, worker
from tests.integration.server.test_server_memo_search_attributes import SdkTagged

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]


@pytest.fixture
def server_url(database_url: str, tmp_path: Path) -> Iterator[str]:
    """`burrow server` as a real process, with a bearer token, on the test database."""
    env = {**os.environ, "BURROW_DATABASE_URL": database_url, "BURROW_AUTH_TOKEN": TOKEN}
    with running_server(env, tmp_path / "server.log") as url:
        yield url


@pytest.fixture
async def client(server_url: str) -> AsyncIterator[Client]:
    async with Client(server_url, token=TOKEN, namespace="default") as instance:
        yield instance


async def test_a_schedule_made_with_the_sdk_is_fired_by_the_server(client: Client) -> None:
    """Three fires, one a second, each starting one run an SDK worker completes; then the
    schedule is `completed` with no action left, and its history lists each fire."""
    await client.create_schedule(
        schedule_id="tick",
        spec=ScheduleSpec(intervals=[{"every": "PT1S"}]),
        action=ScheduleAction(workflow_type="greeter", task_queue=QUEUE, input=["world"]),
        overlap_policy="allow_all",
        max_runs=3,
    )
    deadline = time.monotonic() + 30
    while (described := await client.describe_schedule("tick")).fires_count < 3:
        assert time.monotonic() < deadline, described
        await asyncio.sleep(0.2)
    assert (described.status, described.remaining_actions) == ("completed", 0)
    assert described.next_fire_at is None

    history = await client.get_schedule_history("tick")
    kinds = [event.event_type for event in history.events]
    assert kinds == ["ScheduleCreated"] + ["ScheduleTriggered"] * 3
    fired = [event.workflow_instance_id for event in history.events[1:]]
    assert all(wid is not None and wid.startswith("tick-") for wid in fired)
    moments = [datetime.fromisoformat(str(wid)[len("tick-") :]) for wid in fired]
    assert [b - a for a, b in pairwise(moments)] == [timedelta(seconds=1)] * 2

    for workflow_id in fired:
        assert workflow_id is not None
        await worker(client).run_until(workflow_id=workflow_id, timeout=60.0)
        result = await client.get_result(client.get_workflow_handle(workflow_id))
        assert result == "hello, world"
    assert described.latest_workflow_instance_id == fired[-1]


async def test_memo_search_attributes_and_list_queries_through_the_server(client: Client) -> None:
    """Issue 30, Done when: the SDK's search attribute, memo and list-query calls against a real
    `burrow server` process; an SDK workflow upserts both, and a query finds it by them."""
    for name, kind in [("CustomerId", "keyword"), ("Stage", "keyword"), ("Amount", "int")]:
        await client.create_search_attribute(name, kind)
    assert (await client.list_search_attributes()).custom_attributes == {
        "Amount": "int",
        "CustomerId": "keyword",
        "Stage": "keyword",
    }
    await client.start_workflow(
        workflow_type="sdk-tagged",
        workflow_id="tagged-real",
        task_queue=QUEUE,
        input=["o-9"],
        memo={"customer": "c-17", "note": "gift"},
        search_attributes={"CustomerId": "c-17"},
    )
    tagged = Worker(client, task_queue=QUEUE, workflows=[SdkTagged], poll_timeout=2)
    await tagged.run_until(workflow_id="tagged-real", timeout=60.0)
    described = await client.describe_workflow("tagged-real")
    assert (described.status, described.memo, described.search_attributes) == (
        "completed",
        {"customer": "c-17", "stage": "paid"},
        {"Amount": 42, "CustomerId": "c-17", "Stage": "paid"},
    )
    found = await client.list_workflows(query="Stage = 'paid' AND Amount > 40 ORDER BY StartTime")
    assert [w.workflow_id for w in found.executions] == ["tagged-real"]
    assert (await client.list_workflows(query="CustomerId = 'c-99'")).executions == []
