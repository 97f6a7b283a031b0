"""Workflow message streams over HTTP: `append_message_stream` as SDK 2.12.0 sends it.

PROTOCOL.md 17 (message streams): a message is numbered in its run's stream and kept once per
message id; the SDK's workflow receives it as its message-stream signal. The SDK's own replay
is run on the history a worker is handed, so the shapes are the SDK's, not ours.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import sqlalchemy as sa
from durable_workflow import serializer
from durable_workflow import workflow as sdk_workflow

from burrow import codec
from burrow.server.message_stream_routes import MESSAGE_STREAM_SCHEMA, MESSAGE_STREAM_SIGNAL
from burrow.store import schema as s
from tests.integration.server.conftest import QUEUE, Api, fence

ORDERS = "orders"


@sdk_workflow.defn(name="stream-reader")
class StreamReader:
    """Takes two messages from its `orders` stream and returns their arguments."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        batch = yield from ctx.message_stream(ORDERS).receive(2)
        return [message.arguments for message in batch]


def _path(workflow_id: str, stream: str = ORDERS) -> str:
    return f"/api/workflows/{workflow_id}/message-streams/{stream}/messages"


async def _append(api: Api, workflow_id: str, message_id: str, *args: Any) -> Any:
    body = {"message_id": message_id, "input": dict(codec.encode(list(args)))}
    return await api.control("POST", _path(workflow_id), json=body)


async def _written(api: Api) -> tuple[int, int, int]:
    """How many messages, signals and pending inbox events the database holds."""
    async with api.state.store.engine.begin() as conn:
        counts = [
            (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()
            for table in (s.message_stream_messages, s.signals, s.inbox_events)
        ]
    return counts[0], counts[1], counts[2]


async def test_messages_reach_the_sdk_workflow_in_order_once_each(api: Api) -> None:
    """PROTOCOL.md 17 `append_message_stream`: positions 1, 2 in append order; a resent id is
    `deduplicated` at its first position; the SDK's replay of the worker's history receives both
    messages, and its completion (with `message_stream_cursors`) closes the run."""
    await api.register(supported_workflow_types=["stream-reader"])
    started = await api.start("wf-stream", "stream-reader")
    first = await _append(api, "wf-stream", "m-1", "apple", 2)
    assert first.status_code == 202, first.text
    assert first.json() == {
        "workflow_id": "wf-stream",
        "run_id": started["run_id"],
        "stream_name": ORDERS,
        "message_id": "m-1",
        "position": 1,
        "outcome": "message_appended",
    }
    assert (await _append(api, "wf-stream", "m-2", "pear", 1)).json()["position"] == 2
    again = (await _append(api, "wf-stream", "m-1", "apple", 2)).json()
    assert (again["position"], again["outcome"]) == (1, "deduplicated")

    task = await api.poll_workflow()
    signals = [e for e in task["history_events"] if e["event_type"] == "SignalReceived"]
    assert [e["payload"]["signal_name"] for e in signals] == [MESSAGE_STREAM_SIGNAL] * 2
    [message] = codec.decode(signals[0]["payload"]["arguments"])
    assert message == {
        "schema": MESSAGE_STREAM_SCHEMA,
        "stream_name": ORDERS,
        "message_id": "m-1",
        "position": 1,
        "payload_envelope": dict(codec.encode(["apple", 2])),
    }

    outcome = sdk_workflow.replay(
        StreamReader, task["history_events"], ["world"], workflow_id="wf-stream"
    )
    assert outcome.message_stream_cursors == [{"stream_name": ORDERS, "through_position": 2}]
    [command] = [c.to_server_command(QUEUE) for c in outcome.commands]
    assert command["type"] == "complete_workflow"
    assert serializer.decode_envelope(command["result"]) == [["apple", 2], ["pear", 1]]
    body = fence(
        task,
        commands=[command],
        message_stream_cursors=outcome.message_stream_cursors,
        message_stream_waits=outcome.message_stream_waits,
    )
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text
    assert (await api.control("GET", "/api/workflows/wf-stream")).json()["status"] == "completed"


async def test_refused_appends_write_nothing(api: Api) -> None:
    """PROTOCOL.md 2.4, 17: a resent id with another payload (409 `message_id_conflict`), a bad
    stream name or body (422 `validation_failed`), an unknown workflow (404
    `workflow_not_found`), a closed run (409 `run_not_active`): nothing written."""
    await api.start("wf-open")
    await api.start("wf-closed")
    await api.control("POST", "/api/workflows/wf-closed/terminate", json={})
    assert (await _append(api, "wf-open", "m-1", "apple")).status_code == 202
    before = await _written(api)
    refusals: list[tuple[str, dict[str, Any], int, str]] = [
        (
            _path("wf-open"),
            {"message_id": "m-1", "input": dict(codec.encode(["pear"]))},
            409,
            "message_id_conflict",
        ),
        (_path("wf-open", "bad stream!"), {"message_id": "m-2"}, 422, "validation_failed"),
        (_path("wf-open", "x" * 129), {"message_id": "m-2"}, 422, "validation_failed"),
        (_path("wf-open"), {}, 422, "validation_failed"),
        (_path("wf-open"), {"message_id": "m-2", "input": {"blob": "x"}}, 422, "validation_failed"),
        (_path("wf-missing"), {"message_id": "m-2"}, 404, "workflow_not_found"),
        (_path("wf-closed"), {"message_id": "m-2"}, 409, "run_not_active"),
    ]
    for path, body, status, reason in refusals:
        response = await api.control("POST", path, json=body)
        assert (response.status_code, response.json()["reason"]) == (status, reason), path
    assert await _written(api) == before
