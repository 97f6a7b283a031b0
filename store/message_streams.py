"""Workflow message streams: ordered, once-per-id input to a workflow id (PROTOCOL.md 17).

A stream belongs to the workflow id, not to one run: its positions count across the runs a
continue-as-new chains (so a reader's cursor means the same in every run), and a message id is
kept once across them. A message appended is numbered after the stream's last one (under the
current run's lock, which every append and every continue-as-new of the id takes, so positions
never repeat or skip) and kept with the run that is to read it. The workflow receives it as a
signal, recorded like any other (runs.signal_run): its arguments are what the caller builds from
the position (the SDK's message envelope), so the store never decodes a message's payload.

When a run continues as new (`carry_streams`, in the completion's transaction), what it had not
read goes with it: the new run gets a cursor signal per stream its worker reported a cursor for
(the SDK seeds its readers from it), then each message past its stream's cursor, moved to the new
run and signalled to it again, in position order. A stream with no cursor reported was not read
by the run, so all its messages there are carried. An append racing the continue-as-new waits
for the old run's lock and then goes to the new run (`lock_current_run`): every message is read
by exactly one run. A workflow id started again once its runs closed keeps counting where they
stopped, and the message ids they used stay used (the SDK's streams are per workflow instance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow import codec
from burrow.store import errors, runs, signals
from burrow.store import schema as s
from burrow.store.models import JsonDict, RunRow, RunStatus
from burrow.store.transactions import Txn

SIGNAL_NAME = "__durable_workflow_message_stream"
"""The signal the SDK's workflows take message-stream messages and cursors from."""
MESSAGE_SCHEMA = "durable-workflow.v2.message-stream.message"
CURSOR_SCHEMA = "durable-workflow.v2.message-stream.cursor"
"""The SDK's cursor checkpoint: what a run continued from had read of a stream."""


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


@dataclass(frozen=True, slots=True)
class StreamCursor:
    """A run has read its stream `stream_name` through `through_position` (SDK cursor)."""

    stream_name: str
    through_position: int


class InvalidStreamCursor(errors.InvalidCommands):
    """A completion reported a cursor the stream cannot have; nothing was written.

    `why` is one of `negative`, `repeated` (a stream named twice) or `beyond_last` (past the
    stream's last position, `last_position`).
    """

    def __init__(
        self, *, task_id: str, cursor: StreamCursor, why: str, last_position: int | None = None
    ) -> None:
        detail = {
            "negative": "is negative",
            "repeated": "names its stream twice",
            "beyond_last": f"is past the stream's last position {last_position}",
        }[why]
        super().__init__(
            task_id=task_id,
            reason=f"message stream cursor {cursor.stream_name!r} through "
            f"{cursor.through_position} {detail}",
        )
        self.cursor, self.why, self.last_position = cursor, why, last_position
        self.ids.update(
            stream_name=cursor.stream_name,
            through_position=cursor.through_position,
            why=why,
            last_position=last_position,
        )


def signal_id(stream_name: str, message_id: str) -> str:
    """The id of the signal that carries a message: one per stream and message id."""
    return f"message-stream:{stream_name}:{message_id}"


def cursor_signal_id(stream_name: str) -> str:
    """The id of the signal that carries a stream's cursor into a run continued as new."""
    return f"message-stream-cursor:{stream_name}"


async def lock_current_run(conn: AsyncConnection, *, namespace: str, workflow_id: str) -> RunRow:
    """Lock the workflow id's latest run, following continue-as-new to the run that follows.

    A continue-as-new that commits while this waits for the lock leaves the old run closed as
    continued, its successor committed: the message goes to the successor.

    Raises:
        WorkflowNotFoundError: no run has the workflow id.
    """
    found = await runs.find_run(conn, namespace=namespace, workflow_id=workflow_id)
    run = await runs.lock_run(conn, run_id=found.run_id)
    while run.status == RunStatus.CONTINUED_AS_NEW and run.continued_to_run_id is not None:
        run = await runs.lock_run(conn, run_id=run.continued_to_run_id)
    return run


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
    """Append a message once per id (the caller holds `run`, the id's current run).

    `signal_arguments(position)` builds the signal's arguments. A message id already in the
    stream (of any run of the workflow id) appends nothing and returns the first message.

    Raises:
        WorkflowNotRunningError: the run is closed.
    """
    conn = txn.conn
    m = s.message_stream_messages.c
    found = (
        await conn.execute(
            sa.select(m.run_id, m.position, m.payload).where(
                *_stream(run.namespace, run.workflow_id, stream_name), m.message_id == message_id
            )
        )
    ).first()
    if found is not None:
        return AppendedMessage(
            found.run_id, stream_name, message_id, found.position, found.payload, appended=False
        )
    runs.require_running(run)
    position = await last_position(conn, run=run, stream_name=stream_name) + 1
    await conn.execute(
        sa.insert(s.message_stream_messages).values(
            run_id=run.run_id,
            namespace=run.namespace,
            workflow_id=run.workflow_id,
            stream_name=stream_name,
            position=position,
            message_id=message_id,
            payload=payload,
        )
    )
    await signals.signal_run(
        txn,
        run=run,
        signal_name=signal_name,
        arguments=signal_arguments(position),
        signal_id=signal_id(stream_name, message_id),
    )
    return AppendedMessage(run.run_id, stream_name, message_id, position, payload, appended=True)


async def last_position(conn: AsyncConnection, *, run: RunRow, stream_name: str) -> int:
    """The stream's last position across the runs of `run`'s workflow id (0: none yet)."""
    m = s.message_stream_messages.c
    last = (
        await conn.execute(
            sa.select(sa.func.max(m.position)).where(
                *_stream(run.namespace, run.workflow_id, stream_name)
            )
        )
    ).scalar()
    return 0 if last is None else int(last)


async def check_cursors(
    conn: AsyncConnection, *, task_id: str, run: RunRow, cursors: Sequence[StreamCursor]
) -> None:
    """Refuse a cursor that is negative, repeated, or past its stream's last position.

    Raises:
        InvalidStreamCursor: nothing is to be written.
    """
    seen: set[str] = set()
    for cursor in cursors:
        if cursor.through_position < 0:
            raise InvalidStreamCursor(task_id=task_id, cursor=cursor, why="negative")
        if cursor.stream_name in seen:
            raise InvalidStreamCursor(task_id=task_id, cursor=cursor, why="repeated")
        seen.add(cursor.stream_name)
        last = await last_position(conn, run=run, stream_name=cursor.stream_name)
        if cursor.through_position > last:
            raise InvalidStreamCursor(
                task_id=task_id, cursor=cursor, why="beyond_last", last_position=last
            )


async def carry_streams(
    txn: Txn[AsyncConnection],
    *,
    task_id: str,
    old: RunRow,
    new_run_id: str,
    cursors: Sequence[StreamCursor],
) -> None:
    """Give the run `old` continues as (`new_run_id`) the cursors and what `old` had not read.

    Runs in the continue-as-new's transaction, which holds `old`: no message of it is appended
    meanwhile. Each cursor becomes a cursor signal of the new run; each message of `old` past
    its stream's cursor (every one of a stream with none) moves to the new run with its signal.

    Raises:
        InvalidStreamCursor: a cursor `check_cursors` refuses; nothing is to be written.
    """
    conn = txn.conn
    await check_cursors(conn, task_id=task_id, run=old, cursors=cursors)
    m = s.message_stream_messages.c
    read = {cursor.stream_name: cursor.through_position for cursor in cursors}
    held = (
        await conn.execute(
            sa.select(m.stream_name, m.position, m.message_id)
            .where(m.run_id == old.run_id)
            .order_by(m.appended_at, m.stream_name, m.position)
        )
    ).all()
    unread = [row for row in held if row.position > read.get(row.stream_name, 0)]
    if not cursors and not unread:
        return
    new = await runs.lock_run(conn, run_id=new_run_id)
    for cursor in cursors:
        checkpoint = {
            "schema": CURSOR_SCHEMA,
            "stream_name": cursor.stream_name,
            "through_position": cursor.through_position,
        }
        await signals.signal_run(
            txn,
            run=new,
            signal_name=SIGNAL_NAME,
            arguments=dict(codec.encode([checkpoint])),
            signal_id=cursor_signal_id(cursor.stream_name),
        )
    if not unread:
        return
    ids = [signal_id(row.stream_name, row.message_id) for row in unread]
    g = s.signals.c
    carried = {
        row.signal_id: row
        for row in await conn.execute(
            sa.select(g.signal_id, g.signal_name, g.arguments).where(
                g.run_id == old.run_id, g.signal_id.in_(ids)
            )
        )
    }
    for row in unread:
        await conn.execute(
            sa.update(s.message_stream_messages)
            .where(
                m.run_id == old.run_id,
                m.stream_name == row.stream_name,
                m.position == row.position,
            )
            .values(run_id=new.run_id)
        )
        signal = carried.get(signal_id(row.stream_name, row.message_id))
        if signal is None:
            missing = f"message {row.message_id!r} of run {old.run_id} has no signal"
            raise errors.InvariantBroken(missing)
        await signals.signal_run(
            txn,
            run=new,
            signal_name=signal.signal_name,
            arguments=signal.arguments,
            signal_id=signal.signal_id,
        )


def _stream(
    namespace: str, workflow_id: str, stream_name: str
) -> tuple[sa.ColumnElement[bool], ...]:
    m = s.message_stream_messages.c
    return (m.namespace == namespace, m.workflow_id == workflow_id, m.stream_name == stream_name)
