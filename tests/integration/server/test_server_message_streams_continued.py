"""Workflow message streams across continue-as-new, as SDK 2.12.0 reads them (PROTOCOL.md 5.3, 17).

A run continued as new reports its cursors (`message_stream_cursors`) with the completion; the
new run is handed each cursor (the SDK's cursor checkpoint signal) and every message its run had
not read, once; positions count across the workflow id's runs. The SDK's own `replay()` runs on
each history a worker is handed, so the shapes are the SDK's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import sqlalchemy as sa
from durable_workflow import workflow as sdk_workflow

from burrow import codec
from burrow.store import message_streams
from burrow.store import schema as s
from tests.integration.server.conftest import QUEUE, WORLD, Api, fence
from tests.integration.server.test_server_message_streams import ORDERS, _append

COMPLETE = "/api/worker/workflow-tasks/{}/complete"


@sdk_workflow.defn(name="stream-relay")
class StreamRelay:
    """Reads one message of its `orders` stream a run, continuing as new until it has three."""

    def run(self, ctx: Any, seen: list[Any]) -> Generator[Any, Any, Any]:
        message = yield from ctx.message_stream(ORDERS).receive_one()
        seen = [*seen, [message.position, *message.arguments]]
        if len(seen) < 3:
            yield ctx.continue_as_new(seen)
        return seen


def _run_sdk(task: dict[str, Any], seen: list[Any]) -> tuple[dict[str, Any], Any]:
    """The SDK's completion body of the task (its replay of the history), and its outcome."""
    outcome = sdk_workflow.replay(
        StreamRelay, task["history_events"], [seen], workflow_id=task["workflow_id"]
    )
    body = fence(
        task,
        commands=[c.to_server_command(QUEUE) for c in outcome.commands],
        message_stream_cursors=outcome.message_stream_cursors,
        message_stream_waits=outcome.message_stream_waits,
    )
    return body, outcome


def _stream_signals(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The message-stream signals of the task's history, decoded: cursors and messages."""
    return [
        codec.decode(e["payload"]["arguments"])[0]
        for e in task["history_events"]
        if e["event_type"] == "SignalReceived"
        and e["payload"]["signal_name"] == message_streams.SIGNAL_NAME
    ]


def _read(signals: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [
        (signal.get("message_id", "cursor"), signal.get("position", signal.get("through_position")))
        for signal in signals
    ]


async def _held(api: Api) -> dict[str, list[tuple[str, int]]]:
    """Each run's messages: (message id, position), by run id."""
    m = s.message_stream_messages.c
    held: dict[str, list[tuple[str, int]]] = {}
    async with api.state.store.engine.begin() as conn:
        rows = await conn.execute(
            sa.select(m.run_id, m.message_id, m.position).order_by(m.position)
        )
        for row in rows:
            held.setdefault(row.run_id, []).append((row.message_id, row.position))
    return held


async def _complete(api: Api, task: dict[str, Any], body: dict[str, Any]) -> Any:
    return await api.worker("POST", COMPLETE.format(task["task_id"]), json=body)


async def test_what_a_run_had_not_read_is_read_by_the_run_it_continues_as(api: Api) -> None:
    """PROTOCOL.md 17, SPEC D3: run 1 reads m-1 and continues as new while m-2, appended after
    its task was leased, is unread; run 2 is handed the cursor (through 1) and m-2, reads it and
    continues on while m-3 waits; run 3 reads m-3. Positions count 1, 2, 3 across the runs, a
    resent id is deduplicated in whichever run holds it, each message is read once, and the
    SDK's reader of run 3 waits past the global position (`message-stream:orders:2`)."""
    await api.register(supported_workflow_types=["stream-relay"])
    first = (await api.start("wf-relay", "stream-relay"))["run_id"]
    assert (await _append(api, "wf-relay", "m-1", "a")).json()["position"] == 1
    task = await api.poll_workflow()
    assert (await _append(api, "wf-relay", "m-2", "b")).json()["position"] == 2
    body, outcome = _run_sdk(task, [])
    assert body["message_stream_cursors"] == [{"stream_name": ORDERS, "through_position": 1}]
    assert [c["type"] for c in body["commands"]] == ["continue_as_new"]
    assert (await _complete(api, task, body)).status_code == 200

    task = await api.poll_workflow()
    second = task["run_id"]
    assert second != first
    assert _read(_stream_signals(task)) == [("cursor", 1), ("m-2", 2)]
    appended = (await _append(api, "wf-relay", "m-3", "c")).json()
    assert (appended["run_id"], appended["position"]) == (second, 3)
    for message_id, argument, run_id, position in (("m-1", "a", first, 1), ("m-2", "b", second, 2)):
        again = (await _append(api, "wf-relay", message_id, argument)).json()
        assert again["outcome"] == "deduplicated", again
        assert (again["run_id"], again["position"]) == (run_id, position)
    body, outcome = _run_sdk(task, [[1, "a"]])
    assert body["message_stream_cursors"] == [{"stream_name": ORDERS, "through_position": 2}]
    assert (await _complete(api, task, body)).status_code == 200

    task = await api.poll_workflow()
    third = task["run_id"]
    assert _read(_stream_signals(task)) == [("cursor", 2), ("m-3", 3)]
    assert await _held(api) == {first: [("m-1", 1)], second: [("m-2", 2)], third: [("m-3", 3)]}
    started = [e for e in task["history_events"] if e["event_type"] != "SignalReceived"]
    waiting = sdk_workflow.replay(StreamRelay, started, [[]], workflow_id="wf-relay")
    assert waiting.message_stream_waits == [{"stream_name": ORDERS, "after_position": 0}]
    cursor_only = [*started, *[e for e in task["history_events"] if e not in started][:1]]
    waiting = sdk_workflow.replay(StreamRelay, cursor_only, [[]], workflow_id="wf-relay")
    assert waiting.message_stream_waits == [{"stream_name": ORDERS, "after_position": 2}]
    body, outcome = _run_sdk(task, [[1, "a"], [2, "b"]])
    assert [c["type"] for c in body["commands"]] == ["complete_workflow"]
    assert (await _complete(api, task, body)).status_code == 200
    done = (await api.control("GET", "/api/workflows/wf-relay")).json()
    assert done["status"] == "completed"
    assert outcome.commands[0].result == [[1, "a"], [2, "b"], [3, "c"]]


async def _waiting_on_locks(api: Api, count: int) -> None:
    """Until `count` sessions of the test database wait on a lock."""
    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(250):
        async with api.state.store.engine.connect() as conn:
            if (await conn.execute(waiting)).scalar_one() >= count:
                return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {count} sessions waited on a lock")


async def test_a_message_appended_during_the_continue_as_new_goes_to_the_new_run(
    api: Api,
) -> None:
    """PROTOCOL.md 17, SPEC D3: an append that waits on the run while its continue-as-new
    commits goes to the new run (position 2, after the cursor), not to the closed one: the new
    run is handed it once, and the old run holds only what it read."""
    await api.register(supported_workflow_types=["stream-relay"])
    first = (await api.start("wf-race", "stream-relay"))["run_id"]
    await _append(api, "wf-race", "m-1", "a")
    task = await api.poll_workflow()
    body, _ = _run_sdk(task, [])
    async with api.state.store.engine.connect() as holder:
        await holder.execute(
            sa.select(s.runs.c.run_id).where(s.runs.c.run_id == first).with_for_update()
        )
        continuing = asyncio.create_task(_complete(api, task, body))
        await _waiting_on_locks(api, 1)
        appending = asyncio.create_task(_append(api, "wf-race", "m-2", "b"))
        await _waiting_on_locks(api, 2)
        await holder.rollback()
    assert (await continuing).status_code == 200
    receipt = (await appending).json()
    task = await api.poll_workflow()
    assert (receipt["run_id"], receipt["position"]) == (task["run_id"], 2)
    assert _read(_stream_signals(task)) == [("cursor", 1), ("m-2", 2)]
    assert await _held(api) == {first: [("m-1", 1)], task["run_id"]: [("m-2", 2)]}


async def _written(api: Api) -> list[int]:
    """How many runs, history events, messages, signals and inbox events the database holds."""
    tables = (s.runs, s.history_events, s.message_stream_messages, s.signals, s.inbox_events)
    async with api.state.store.engine.begin() as conn:
        return [
            (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()
            for table in tables
        ]


async def test_a_malformed_cursor_is_refused_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL.md 2.4, 5.3: a cursor that is negative, not an integer, of a bad stream name,
    repeated, not an object, or past its stream's last position refuses the whole completion
    (422 `validation_failed` naming `message_stream_cursors`): nothing is written and the task
    stays leased, so the right completion then goes through."""
    await api.register(supported_workflow_types=["stream-relay"])
    await api.start("wf-bad", "stream-relay")
    await _append(api, "wf-bad", "m-1", "a")
    task = await api.poll_workflow()
    body, _ = _run_sdk(task, [])
    before = await _written(api)
    bad: list[Any] = [
        [{"stream_name": ORDERS, "through_position": -1}],
        [{"stream_name": ORDERS, "through_position": True}],
        [{"stream_name": ORDERS, "through_position": "1"}],
        [{"stream_name": ORDERS}],
        [{"stream_name": "bad stream!", "through_position": 1}],
        [{"stream_name": ORDERS, "through_position": 1}] * 2,
        ["orders:1"],
        {"stream_name": ORDERS, "through_position": 1},
        [{"stream_name": ORDERS, "through_position": 2}],
        [{"stream_name": "other", "through_position": 1}],
    ]
    for cursors in bad:
        response = await _complete(api, task, {**body, "message_stream_cursors": cursors})
        assert response.status_code == 422, (cursors, response.text)
        refusal = response.json()
        assert refusal["reason"] == "validation_failed", refusal
        assert any(key.startswith("message_stream_cursors") for key in refusal["errors"]), refusal
    assert await _written(api) == before
    assert (await _complete(api, task, body)).status_code == 200


async def test_a_continue_as_new_without_cursors_carries_every_message(api: Api) -> None:
    """PROTOCOL.md 17: a worker that reports no cursor (it read none of its streams, or does not
    read streams at all, as Burrow's own workers) leaves every message of its run unread: the new
    run gets them all, at their positions, with no cursor checkpoint."""
    await api.register()
    first = (await api.start("wf-unread"))["run_id"]
    await _append(api, "wf-unread", "m-1", "a")
    await _append(api, "wf-unread", "m-2", "b")
    task = await api.poll_workflow()
    continued = {"type": "continue_as_new", "arguments": WORLD, "queue": QUEUE}
    assert (await _complete(api, task, fence(task, commands=[continued]))).status_code == 200
    task = await api.poll_workflow()
    assert _read(_stream_signals(task)) == [("m-1", 1), ("m-2", 2)]
    assert first not in await _held(api)
