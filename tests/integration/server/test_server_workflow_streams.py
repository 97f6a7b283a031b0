"""Run output streams through the SDK 2.12.0 `Client` on the in-process app (PROTOCOL.md 17:
`/workflows/{id}/runs/{runId}/streams[/{name}[/items|/close]]`; stream errors of PROTOCOL.md
5.3: `stream_full` 429, `stream_closed|stream_errored` 409, `stream_not_found` 404).

Shapes are what `WorkflowStreamDescription`, `WorkflowStreamPage` and
`WorkflowStreamAppendResult` parse; offsets count from 0 and `next_offset` resumes a page.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any

import pytest
import sqlalchemy as sa
from durable_workflow import Client
from durable_workflow import workflow as sdk_workflow
from durable_workflow.client import WorkflowStreamAppendItem as Item
from durable_workflow.errors import ServerError

from burrow.store import schema as s
from tests.integration.server.conftest import OPERATOR_TOKEN, QUEUE, Api, fence

FEED = "tokens"


@sdk_workflow.defn(name="stream-writer")
class StreamWriter:
    """Publishes two tokens to its `tokens` stream, closes it and returns."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        yield ctx.append_workflow_stream(
            FEED, [Item(payload="hello", item_type="token"), Item(payload=name)]
        )
        yield ctx.close_workflow_stream(FEED, retention_seconds=30)
        return "done"


@pytest.fixture
async def client(api: Api) -> AsyncIterator[Client]:
    """The SDK's Client, its HTTP calls served by the in-process app."""
    sdk = Client("http://test", token=OPERATOR_TOKEN)
    await sdk._http.aclose()
    sdk._http = api.http  # the app's ASGI transport; the SDK adds its own headers
    yield sdk


async def _written(api: Api) -> tuple[Any, ...]:
    """Every stream row and item row the database holds."""
    async with api.state.store.engine.begin() as conn:
        streams = (await conn.execute(sa.select(s.workflow_streams))).all()
        items = (await conn.execute(sa.select(s.workflow_stream_items))).all()
    return tuple(map(tuple, streams)), tuple(map(tuple, items))


async def test_append_subscribe_page_and_close(api: Api, client: Client) -> None:
    """PROTOCOL.md 17 streams: items get offsets 0.. in order; a resent idempotency key is
    `deduped` at its first offset; pages resume from `next_offset`, and resuming marks the items
    before it delivered (`pending_items`); close makes the caught-up page `terminal`."""
    run_id = (await api.start("wf-out"))["run_id"]
    first = await client.append_workflow_stream(
        "wf-out",
        run_id,
        FEED,
        [
            Item(payload="a", idempotency_key="k-a", item_type="token"),
            Item(payload={"n": 2}, content_type="application/json"),
            Item(payload_reference="s3://bucket/blob-3"),
        ],
    )
    assert (first.accepted_offsets, first.accepted_count, first.deduplicated_count) == (
        [0, 1, 2],
        3,
        0,
    )
    assert (first.stream.status, first.stream.last_offset, first.stream.total_items) == (
        "open",
        2,
        3,
    )
    again = await client.append_workflow_stream(
        "wf-out", run_id, FEED, [Item(payload="a", idempotency_key="k-a", item_type="token")]
    )
    assert (again.accepted_offsets, again.accepted_count, again.deduplicated_count) == ([0], 0, 1)

    page = await client.subscribe_workflow_stream("wf-out", run_id, FEED, max_items=2)
    assert [item.offset for item in page.items] == [0, 1]
    assert [item.payload for item in page.items] == ["a", {"n": 2}]
    assert (page.items[0].item_type, page.items[0].idempotency_key) == ("token", "k-a")
    assert (page.items[0].origin, page.items[1].content_type) == ("client", "application/json")
    assert (page.next_offset, page.terminal, page.stream.pending_items) == (2, False, 3)

    rest = await client.subscribe_workflow_stream(
        "wf-out", run_id, FEED, from_offset=page.next_offset
    )
    assert [(i.offset, i.payload_reference) for i in rest.items] == [(2, "s3://bucket/blob-3")]
    assert (rest.next_offset, rest.terminal, rest.stream.pending_items) == (3, False, 1)

    closed = await client.close_workflow_stream("wf-out", run_id, FEED, retention_seconds=60)
    assert (closed.status, closed.terminal, closed.retention_seconds) == ("closed", True, 60)
    assert closed.closed_at is not None
    assert (await client.close_workflow_stream("wf-out", run_id, FEED)).status == "closed"
    end = await client.subscribe_workflow_stream("wf-out", run_id, FEED, from_offset=3)
    assert (end.items, end.next_offset, end.terminal) == ([], 3, True)
    assert (end.stream.pending_items, end.stream.total_items) == (0, 3)
    replayed = [i.payload async for i in client.iter_workflow_stream("wf-out", run_id, FEED)]
    assert replayed == ["a", {"n": 2}, None]


async def test_list_describe_and_error_close(api: Api, client: Client) -> None:
    """PROTOCOL.md 17 streams: the run's streams by name with their lifecycle; an errored
    stream carries its reason; a stream of another run of the id is not listed."""
    run_id = (await api.start("wf-list"))["run_id"]
    assert await client.list_workflow_streams("wf-list", run_id) == []
    await client.append_workflow_stream("wf-list", run_id, "b-log", [Item(payload=1)])
    errored = await client.close_workflow_stream(
        "wf-list", run_id, "a-progress", error_reason="model crashed"
    )
    assert (errored.status, errored.error_reason, errored.total_items) == (
        "errored",
        "model crashed",
        0,
    )
    streams = await client.list_workflow_streams("wf-list", run_id)
    assert [(x.stream_name, x.status, x.total_items) for x in streams] == [
        ("a-progress", "errored", 0),
        ("b-log", "open", 1),
    ]
    assert {(x.workflow_id, x.run_id) for x in streams} == {("wf-list", run_id)}
    described = await client.describe_workflow_stream("wf-list", run_id, "b-log")
    assert (described.stream_name, described.last_offset, described.pending_items) == (
        "b-log",
        0,
        1,
    )
    assert described.opened_at is not None and described.last_appended_at is not None
    page = await client.subscribe_workflow_stream("wf-list", run_id, "a-progress")
    assert (page.items, page.terminal, page.stream.status) == ([], True, "errored")


async def test_subscribe_waits_for_the_next_append(api: Api, client: Client) -> None:
    """PROTOCOL.md 17 streams, `wait_seconds`: a held subscription answers with the item an
    append makes while it waits; a stream the open run has not opened reads as empty and open."""
    run_id = (await api.start("wf-wait"))["run_id"]
    empty = await client.subscribe_workflow_stream("wf-wait", run_id, FEED)
    assert (empty.items, empty.terminal, empty.stream.status) == ([], False, "open")
    held = asyncio.create_task(
        client.subscribe_workflow_stream("wf-wait", run_id, FEED, wait_seconds=10)
    )
    await asyncio.sleep(0.05)
    assert not held.done()
    await client.append_workflow_stream("wf-wait", run_id, FEED, [Item(payload="late")])
    page = await asyncio.wait_for(held, 5)
    assert [(i.offset, i.payload) for i in page.items] == [(0, "late")]


async def test_a_closed_run_ends_its_open_streams_for_subscribers(api: Api, client: Client) -> None:
    """PROTOCOL.md 17 streams: a closed run takes no new item (409 `run_not_active`), so a
    subscriber that has every item of its stream gets a terminal page; a stream it never opened
    is 404 `stream_not_found`."""
    run_id = (await api.start("wf-ended"))["run_id"]
    await client.append_workflow_stream("wf-ended", run_id, FEED, [Item(payload="x")])
    await api.control("POST", "/api/workflows/wf-ended/terminate", json={})
    items = [i.payload async for i in client.iter_workflow_stream("wf-ended", run_id, FEED)]
    assert items == ["x"]
    with pytest.raises(ServerError) as missing:
        await client.subscribe_workflow_stream("wf-ended", run_id, "never")
    assert (missing.value.status, missing.value.reason()) == (404, "stream_not_found")


async def test_refusals_write_nothing(api: Api, client: Client) -> None:
    """PROTOCOL.md 5.3 stream errors and 2.4: appending to a closed stream (409
    `stream_closed`) or an errored one (409 `stream_errored`), closing one the other way, past
    `max_pending_items` (429 `stream_full`), reusing an idempotency key for another item (409
    `idempotency_key_conflict`), to a closed run (409 `run_not_active`), an unknown stream (404
    `stream_not_found`) or run (404 `run_not_found`), a bad name or body (422
    `validation_failed`): status, code, and nothing written."""
    run_id = (await api.start("wf-refuse"))["run_id"]
    ended_run = (await api.start("wf-ended-run"))["run_id"]
    await api.control("POST", "/api/workflows/wf-ended-run/terminate", json={})
    await client.append_workflow_stream(
        "wf-refuse", run_id, "open", [Item(payload=1, idempotency_key="k")]
    )
    await client.close_workflow_stream("wf-refuse", run_id, "done")
    await client.close_workflow_stream("wf-refuse", run_id, "broken", error_reason="boom")
    before = await _written(api)

    async def refused(call: Any, status: int, reason: str) -> None:
        with pytest.raises(ServerError) as caught:
            await call
        assert (caught.value.status, caught.value.reason()) == (status, reason)

    one = [Item(payload=2)]
    await refused(
        client.append_workflow_stream("wf-refuse", run_id, "done", one), 409, "stream_closed"
    )
    await refused(
        client.append_workflow_stream("wf-refuse", run_id, "broken", one), 409, "stream_errored"
    )
    await refused(
        client.close_workflow_stream("wf-refuse", run_id, "done", error_reason="late"),
        409,
        "stream_closed",
    )
    await refused(
        client.close_workflow_stream("wf-refuse", run_id, "broken"), 409, "stream_errored"
    )
    await refused(
        client.append_workflow_stream("wf-refuse", run_id, "open", one * 2, max_pending_items=2),
        429,
        "stream_full",
    )
    await refused(
        client.append_workflow_stream(
            "wf-refuse", run_id, "open", [Item(payload=1), Item(payload=3, idempotency_key="k")]
        ),
        409,
        "idempotency_key_conflict",
    )
    await refused(
        client.append_workflow_stream("wf-ended-run", ended_run, FEED, one), 409, "run_not_active"
    )
    await refused(
        client.describe_workflow_stream("wf-refuse", run_id, "nope"), 404, "stream_not_found"
    )
    await refused(client.list_workflow_streams("wf-refuse", ended_run), 404, "run_not_found")
    await refused(client.list_workflow_streams("wf-refuse", "not-a-uuid"), 404, "run_not_found")
    raw = f"/api/workflows/wf-refuse/runs/{run_id}/streams"
    for method, path, body in [
        (
            "POST",
            f"{raw}/bad%20name/items",
            {"items": [{"payload": None, "payload_reference": "r"}]},
        ),
        ("POST", f"{raw}/open/items", {"items": []}),
        ("POST", f"{raw}/open/items", {"items": [{"item_type": "t"}]}),
        ("POST", f"{raw}/open/items", {"items": [{"payload": {"blob": "x"}}]}),
        (
            "POST",
            f"{raw}/open/items",
            {"items": [{"payload_reference": "r"}], "max_pending_items": 0},
        ),
        ("POST", f"{raw}/open/close", {"error_reason": ""}),
        ("GET", f"{raw}/open/items?max_items=501", None),
        ("GET", f"{raw}/open/items?wait_seconds=61", None),
    ]:
        response = await api.control(method, path, json=body)
        assert (response.status_code, response.json()["reason"]) == (422, "validation_failed"), path
    assert await _written(api) == before


async def _complete_by_replay(api: Api, workflow_id: str, run_id: str) -> Any:
    """Poll the run's workflow task, replay it with the SDK and send its commands back."""
    task = await api.poll_workflow()
    outcome = sdk_workflow.replay(
        StreamWriter, task["history_events"], ["world"], workflow_id=workflow_id, run_id=run_id
    )
    commands = [c.to_server_command(QUEUE) for c in outcome.commands]
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    return await api.worker("POST", url, json=fence(task, commands=commands))


async def test_a_workflow_publishes_through_record_side_effect(api: Api, client: Client) -> None:
    """PROTOCOL.md 7 `record_side_effect.workflow_stream` (SDK `ctx.append_workflow_stream`,
    `ctx.close_workflow_stream`): the task's commands append the items (origin `workflow`, keys
    from the command identity) and close the stream, beside their `SideEffectRecorded` events;
    a subscriber reads them to a terminal page."""
    await api.register(supported_workflow_types=["stream-writer"])
    run_id = (await api.start("wf-writer", "stream-writer"))["run_id"]
    done = await _complete_by_replay(api, "wf-writer", run_id)
    assert done.status_code == 200, done.text
    items = [i async for i in client.iter_workflow_stream("wf-writer", run_id, FEED)]
    assert [(i.offset, i.payload, i.item_type, i.origin) for i in items] == [
        (0, "hello", "token", "workflow"),
        (1, "world", None, "workflow"),
    ]
    assert [i.idempotency_key for i in items] == [
        f"dw-stream:{run_id}:0:0",
        f"dw-stream:{run_id}:0:1",
    ]
    assert items[0].origin_reference == f"{run_id}:0"
    stream = await client.describe_workflow_stream("wf-writer", run_id, FEED)
    assert (stream.status, stream.retention_seconds) == ("closed", 30)
    history = await api.control("GET", f"/api/workflows/wf-writer/runs/{run_id}/history")
    kinds = [e["event_type"] for e in history.json()["events"]]
    assert kinds.count("SideEffectRecorded") == 2


async def test_a_workflow_append_to_a_closed_stream_is_refused(api: Api, client: Client) -> None:
    """PROTOCOL.md 5.3 stream errors: a task appending to a stream a client closed is refused
    409 `stream_closed` and records nothing (no event, no item)."""
    await api.register(supported_workflow_types=["stream-writer"])
    run_id = (await api.start("wf-late", "stream-writer"))["run_id"]
    await client.close_workflow_stream("wf-late", run_id, FEED, error_reason="cancelled")
    before = await _written(api)
    history = f"/api/workflows/wf-late/runs/{run_id}/history"
    events = (await api.control("GET", history)).json()["events"]
    refused = await _complete_by_replay(api, "wf-late", run_id)
    assert (refused.status_code, refused.json()["reason"]) == (409, "stream_errored")
    assert await _written(api) == before
    assert (await api.control("GET", history)).json()["events"] == events
