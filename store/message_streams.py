"""Workflow message streams: ordered, once-per-id input to a run (PROTOCOL.md 17).

A message appended to a run's named stream is numbered after the stream's last one (under the
run's lock, so positions never repeat or skip) and kept once per message id. The workflow
receives it as a signal, recorded like any other (runs.signal_run): its arguments are what the
caller builds from the position (the SDK's message envelope), so the store never decodes a
payload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import runs
from burrow.store import schema as s
from burrow.store.models import JsonDict, RunRow
from burrow.store.transactions import Txn


@dataclass(frozen=True, slots=True)
class AppendedMessage:
    """Where a message stands in its stream, and whether this call appended it."""

    run_id: str
    stream_name: str
    message_id: str
    position: int
    payload: JsonDict
    appended: bool
    """False: the message id was already in the stream (its first payload and position)."""


def signal_id(stream_name: str, message_id: str) -> str:
    """The id of the signal that carries a message: one per stream and message id."""
    return f"message-stream:{stream_name}:{message_id}"


async def append_message(
    txn: Txn[AsyncConnection],
    *,
    run: RunRow,
    stream_name: str,
    message_id: str,
    payload: JsonDict,
    signal_name: str,
    signal_arguments: Callable[[int], JsonDict],
) -> AppendedMessage:
    """Append a message once per id (the caller holds the run), with the signal that carries it.

    `signal_arguments(position)` builds the signal's arguments. A message id already in the
    stream appends nothing and returns the first message.

    Raises:
        WorkflowNotRunningError: the run is closed.
    """
    conn = txn.conn
    m = s.message_stream_messages.c
    here = (m.run_id == run.run_id, m.stream_name == stream_name)
    found = (
        await conn.execute(
            sa.select(m.position, m.payload).where(*here, m.message_id == message_id)
        )
    ).first()
    if found is not None:
        return AppendedMessage(
            run.run_id, stream_name, message_id, found.position, found.payload, appended=False
        )
    runs.require_running(run)
    position = await _next_position(conn, run.run_id, stream_name)
    await conn.execute(
        sa.insert(s.message_stream_messages).values(
            run_id=run.run_id,
            stream_name=stream_name,
            position=position,
            message_id=message_id,
            payload=payload,
        )
    )
    await runs.signal_run(
        txn,
        run=run,
        signal_name=signal_name,
        arguments=signal_arguments(position),
        signal_id=signal_id(stream_name, message_id),
    )
    return AppendedMessage(run.run_id, stream_name, message_id, position, payload, appended=True)


async def _next_position(conn: AsyncConnection, run_id: str, stream_name: str) -> int:
    m = s.message_stream_messages.c
    last = (
        await conn.execute(
            sa.select(sa.func.max(m.position)).where(
                m.run_id == run_id, m.stream_name == stream_name
            )
        )
    ).scalar()
    return 1 if last is None else int(last) + 1
