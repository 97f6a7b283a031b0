"""Memo and search attributes through the real SDK against `burrow server` (issue 30).

The SDK Client starts a run with `memo` and `search_attributes`; an SDK workflow upserts both
(`ctx.upsert_memo`, `ctx.upsert_search_attributes`); describe, the list and list queries show
what the store holds, and the SDK's own `replay()` completes the recorded history (its replayer
checks the `MemoUpserted` envelopes and the memo identity at each step). Refusals are typed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest
from durable_workflow import Client, Worker, workflow
from durable_workflow.errors import WorkflowNotFound
from durable_workflow.workflow import CompleteWorkflow, replay

from burrow import codec
from tests.integration.server.conftest import Api, InProcessClient, fence, sdk_on_app

QUEUE = "sdk-visibility"


@workflow.defn(name="sdk-tagged")
class SdkTagged:
    def run(self, ctx: Any, order: str) -> Generator[Any, Any, Any]:
        yield ctx.upsert_search_attributes({"Stage": "paying", "Amount": 42})
        yield ctx.upsert_memo({"stage": "paid", "note": None})
        yield ctx.upsert_search_attributes({"Stage": "paid"})
        return order


@pytest.fixture
async def client(api: Api) -> AsyncIterator[Client]:
    """The SDK's Client on the in-process app (its worker's poller stays on this loop)."""
    sdk = await sdk_on_app(api, InProcessClient)
    for name, kind in [("CustomerId", "keyword"), ("Stage", "keyword"), ("Amount", "int")]:
        await sdk.create_search_attribute(name, kind)
    yield sdk


async def _history(client: Client, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    page = await client.get_history(workflow_id, run_id, page_size=1000)
    events: list[dict[str, Any]] = page["events"]
    return events


async def test_sdk_start_upserts_describe_list_and_replay(client: Client) -> None:
    """Issue 30: the SDK's memo/search attribute start options and upsert commands."""
    handle = await client.start_workflow(
        workflow_type="sdk-tagged",
        workflow_id="tagged-1",
        task_queue=QUEUE,
        input=["o-1"],
        memo={"customer": "c-17", "note": "gift"},
        search_attributes={"CustomerId": "c-17"},
    )
    worker = Worker(client, task_queue=QUEUE, workflows=[SdkTagged], poll_timeout=2)
    await asyncio.wait_for(worker.run_until(workflow_id="tagged-1", timeout=30), 40)
    described = await client.describe_workflow("tagged-1")
    assert described.status == "completed"
    assert described.memo == {"customer": "c-17", "stage": "paid"}
    assert described.search_attributes == {"Amount": 42, "CustomerId": "c-17", "Stage": "paid"}

    listed = await client.list_workflows(query="CustomerId = 'c-17' AND Stage = 'paid'")
    assert [(w.workflow_id, w.memo) for w in listed.executions] == [
        ("tagged-1", {"customer": "c-17", "stage": "paid"})
    ]
    assert (await client.list_workflows(query="Stage = 'paying'")).executions == []

    events = await _history(client, "tagged-1", handle.run_id or "")
    kinds = [e["event_type"] for e in events]
    assert kinds.count("SearchAttributesUpserted") == 2 and kinds.count("MemoUpserted") == 1
    upserted = next(e["payload"] for e in events if e["event_type"] == "MemoUpserted")
    assert set(upserted["entries"]) == {"codec", "blob"} == set(upserted["merged"])
    assert upserted["sequence"] == 2  # the workflow's second step
    replayed = replay(
        SdkTagged, events, ["o-1"], workflow_id="tagged-1", run_id=handle.run_id or ""
    )
    assert isinstance(replayed.commands[-1], CompleteWorkflow)
    assert replayed.commands[-1].result == "o-1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"search_attributes": {"Unregistered": "x"}}, "search_attributes"),
        ({"search_attributes": {"Amount": "lots"}}, "search_attributes"),
        ({"memo": {"big": "x" * 300_000}}, "memo"),
    ],
)
async def test_bad_start_metadata_is_422_and_writes_nothing(
    api: Api, client: Client, body: dict[str, Any], field: str
) -> None:
    """Issue 30: 422 validation_failed naming the field; no run of the id afterwards."""
    answer = await api.control(
        "POST",
        "/api/workflows",
        json={
            "workflow_id": "refused",
            "workflow_type": "sdk-tagged",
            "task_queue": QUEUE,
            "input": {"codec": "json", "blob": "[]"},
            **body,
        },
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["reason"] == "validation_failed"
    assert field in answer.json()["errors"]
    with pytest.raises(WorkflowNotFound):
        await client.describe_workflow("refused")


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (
            {"type": "upsert_search_attributes", "attributes": {"Unregistered": "x"}},
            "workflow_search_attributes_validation_failed",
        ),
        (
            {"type": "upsert_search_attributes", "attributes": {"Amount": 1.5}},
            "workflow_search_attributes_validation_failed",
        ),
        (
            {"type": "upsert_memo", "entries": dict(codec.encode(["not", "a", "map"]))},
            "workflow_memo_validation_failed",
        ),
        (
            {"type": "upsert_memo", "entries": dict(codec.encode({"big": "x" * 300_000}))},
            "workflow_memo_validation_failed",
        ),
    ],
    ids=["unregistered", "wrong-type", "not-a-map", "too-large"],
)
async def test_refused_upserts_are_422_and_write_nothing(
    api: Api, client: Client, command: dict[str, Any], reason: str
) -> None:
    """Issue 30 (PROTOCOL.md 5.4): the reference's 422 reasons; the task stays leased, the
    history, memo and attributes unchanged."""
    run_id = (await api.start("upsert-bad"))["run_id"]
    await api.register()
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    before = await _history(client, "upsert-bad", run_id)
    refused = await api.worker("POST", url, json=fence(task, commands=[command]))
    assert (refused.status_code, refused.json()["reason"]) == (422, reason), refused.text
    assert await _history(client, "upsert-bad", run_id) == before
    described = await client.describe_workflow("upsert-bad")
    assert (described.memo, described.search_attributes) == ({}, {})
    done = {"type": "complete_workflow", "result": dict(codec.encode("ok"))}
    retried = await api.worker("POST", url, json=fence(task, commands=[done]))
    assert retried.status_code == 200, retried.text


async def test_discovery_advertises_the_limits_it_enforces(api: Api) -> None:
    """PROTOCOL.md 3.3 `limits` and the SDK's memo upsert capability (issue 30)."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    assert (info["limits"]["max_memo_bytes"], info["limits"]["max_search_attributes"]) == (
        256 * 1024,
        100,
    )
    capabilities = info["worker_protocol"]["server_capabilities"]
    assert capabilities["workflow_memo_updates"]["supported"] is True
    assert {"upsert_memo", "upsert_search_attributes"} <= set(
        capabilities["supported_workflow_task_commands"]
    )
