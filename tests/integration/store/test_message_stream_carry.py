"""Message streams across continue-as-new in the store, as Burrow's own workers complete (17).

The worker names the claim's position (the one-statement completion); a continue-as-new takes
the transactional path, which carries the run's message streams to its successor
(`message_streams.carry_streams`). PROTOCOL.md 17; SPEC D3 (each message read once).
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.store import Store, message_streams
from burrow.store import schema as s
from tests.support.store import NS, QUEUE, claim_wf, rows, start

STREAM = "inbox"
CONTINUED = cmd.ContinueAsNew(arguments=codec.encode([2]), workflow_type="Flow", queue=QUEUE)


async def _append(store: Store, message_id: str) -> message_streams.AppendedMessage:
    return await store.append_message(
        namespace=NS,
        workflow_id="wf-1",
        stream_name=STREAM,
        message_id=message_id,
        payload=dict(codec.encode([message_id])),
        signal_name=message_streams.SIGNAL_NAME,
        signal_arguments=lambda position: dict(codec.encode([{"position": position}])),
    )


def _stream_signals(history: list[Any]) -> list[Any]:
    return [
        codec.decode(e.event.arguments)[0]
        for e in history
        if isinstance(e.event, events.SignalReceived)
        and e.event.signal_name == message_streams.SIGNAL_NAME
    ]


async def test_continue_as_new_hands_on_the_cursor_and_the_unread_messages(store: Store) -> None:
    """PROTOCOL.md 17: with a cursor through 1, message 2 (and 3, appended after the claim)
    move to the new run, signalled after the cursor checkpoint; message 1 stays with the run
    that read it; the next append is numbered 4, in the new run."""
    first = await start(store)
    await _append(store, "m-1")
    await _append(store, "m-2")
    task = await claim_wf(store)
    await _append(store, "m-3")
    outcome = await store.complete_workflow_task(
        lease=task.lease,
        commands=[CONTINUED],
        position=task.position,
        stream_cursors=[message_streams.StreamCursor(STREAM, 1)],
    )
    second = outcome.continued_run_id
    assert second is not None

    claimed = await claim_wf(store)
    assert claimed.lease.run_id == second
    assert _stream_signals(claimed.history) == [
        {"schema": message_streams.CURSOR_SCHEMA, "stream_name": STREAM, "through_position": 1},
        {"position": 2},
        {"position": 3},
    ]
    fourth = await _append(store, "m-4")
    assert (fourth.run_id, fourth.position) == (second, 4)
    held = [(r["run_id"], r["position"]) for r in await rows(store, s.message_stream_messages)]
    assert sorted(held, key=lambda r: r[1]) == [(first, 1), (second, 2), (second, 3), (second, 4)]


@pytest.mark.parametrize(
    ("cursors", "why"),
    [
        ([message_streams.StreamCursor(STREAM, -1)], "negative"),
        ([message_streams.StreamCursor(STREAM, 1)] * 2, "repeated"),
        ([message_streams.StreamCursor(STREAM, 2)], "beyond_last"),
        ([message_streams.StreamCursor("other", 1)], "beyond_last"),
    ],
)
async def test_an_impossible_cursor_refuses_the_continue_as_new(
    store: Store, cursors: list[message_streams.StreamCursor], why: str
) -> None:
    """PROTOCOL.md 17: InvalidStreamCursor (an InvalidCommands) says which cursor and why;
    the whole completion is rolled back, so no run, event, signal or message changed."""
    await start(store)
    await _append(store, "m-1")
    task = await claim_wf(store)
    tables = (s.runs, s.history_events, s.message_stream_messages, s.signals, s.inbox_events)
    before = [await rows(store, table) for table in tables]

    with pytest.raises(message_streams.InvalidStreamCursor) as refused:
        await store.complete_workflow_task(
            lease=task.lease, commands=[CONTINUED], stream_cursors=cursors
        )

    assert (refused.value.why, refused.value.cursor) == (why, cursors[0])
    assert [await rows(store, table) for table in tables] == before
