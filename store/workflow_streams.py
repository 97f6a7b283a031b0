"""Run output streams: ordered, durable items a run publishes and subscribers page through.

A stream belongs to one run and opens with its first append (or its close). Items are numbered
from offset 0 in append order, under the run's lock (the caller holds it), so offsets never
repeat or skip; an item with an idempotency key is kept once per key (a resend gets the first
item's offset back). A closed or errored stream takes no new item. A subscriber resuming from
offset N has the items below N delivered: those are no longer pending, which is what an
append's `max_pending_items` bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import Conflict, NotFound
from burrow.store import runs
from burrow.store import schema as s
from burrow.store.models import JsonDict, RunRow
from burrow.store.transactions import Txn


class StreamStatus(StrEnum):
    """A stream's lifecycle: open, then closed or errored (terminal)."""

    OPEN = "open"
    CLOSED = "closed"
    ERRORED = "errored"


class ItemOrigin(StrEnum):
    """Who appended an item: a client call or a workflow command."""

    CLIENT = "client"
    WORKFLOW = "workflow"


@dataclass(frozen=True, slots=True)
class StreamState:
    """One stream's lifecycle and backlog."""

    run_id: str
    stream_name: str
    status: StreamStatus
    total_items: int
    delivered_offset: int
    error_reason: str | None
    retention_seconds: int | None
    opened_at: datetime | None
    last_appended_at: datetime | None
    closed_at: datetime | None

    @property
    def last_offset(self) -> int | None:
        """The last item's offset; None when the stream is empty."""
        return self.total_items - 1 if self.total_items else None

    @property
    def pending_items(self) -> int:
        """Items no subscriber has resumed past."""
        return self.total_items - min(self.delivered_offset, self.total_items)

    @property
    def terminal(self) -> bool:
        """Whether the stream takes no more items."""
        return self.status != StreamStatus.OPEN

    @classmethod
    def unopened(cls, run_id: str, stream_name: str) -> StreamState:
        """A stream of an open run that nothing has appended to yet."""
        return cls(run_id, stream_name, StreamStatus.OPEN, 0, 0, None, None, None, None, None)


@dataclass(frozen=True, slots=True)
class NewItem:
    """One item to append: a payload envelope and/or an external payload reference."""

    payload: JsonDict | None
    payload_reference: str | None
    payload_codec: str | None
    idempotency_key: str | None
    item_type: str | None
    content_type: str | None


@dataclass(frozen=True, slots=True)
class StreamItem:
    """A stored item at its offset."""

    offset: int
    payload: JsonDict | None
    payload_reference: str | None
    payload_codec: str | None
    idempotency_key: str | None
    item_type: str | None
    content_type: str | None
    origin: str
    origin_reference: str | None
    emitted_at: datetime


@dataclass(frozen=True, slots=True)
class Appended:
    """The stream after an append, and each requested item's offset (new or first)."""

    stream: StreamState
    offsets: list[int]
    accepted: int
    deduplicated: int


class StreamNotFound(NotFound):
    """The run has no stream of this name."""

    def __init__(self, *, run_id: str, stream_name: str) -> None:
        super().__init__(f"run {run_id} has no stream {stream_name!r}", run_id=run_id)
        self.stream_name = stream_name


class StreamTerminal(Conflict):
    """The stream is closed or errored: it takes no new item, nor the other ending."""

    def __init__(self, stream: StreamState) -> None:
        super().__init__(
            f"stream {stream.stream_name!r} is {stream.status.value}", run_id=stream.run_id
        )
        self.stream = stream


class StreamFull(Conflict):
    """The append would leave more undelivered items than the caller's bound."""

    def __init__(self, stream: StreamState, *, adding: int, limit: int) -> None:
        super().__init__(
            f"stream {stream.stream_name!r} has {stream.pending_items} pending items; "
            f"{adding} more exceed max_pending_items {limit}",
            run_id=stream.run_id,
        )
        self.stream = stream
        self.limit = limit


class ItemKeyConflict(Conflict):
    """An idempotency key already in the stream names another item."""

    def __init__(self, *, run_id: str, stream_name: str, key: str, offset: int) -> None:
        super().__init__(
            f"idempotency key {key!r} is at offset {offset} of stream {stream_name!r} "
            "with another item",
            run_id=run_id,
        )
        self.key = key
        self.offset = offset


_ITEM_COLUMNS = (
    "offset",
    "payload",
    "payload_reference",
    "payload_codec",
    "idempotency_key",
    "item_type",
    "content_type",
    "origin",
    "origin_reference",
    "emitted_at",
)


def _state(row: sa.Row[tuple[object, ...]]) -> StreamState:
    w = row._mapping
    return StreamState(
        run_id=str(w["run_id"]),
        stream_name=w["stream_name"],
        status=StreamStatus(w["status"]),
        total_items=w["next_offset"],
        delivered_offset=w["delivered_offset"],
        error_reason=w["error_reason"],
        retention_seconds=w["retention_seconds"],
        opened_at=w["opened_at"],
        last_appended_at=w["last_appended_at"],
        closed_at=w["closed_at"],
    )


async def list_streams(conn: AsyncConnection, *, run_id: str) -> list[StreamState]:
    """The run's streams, by name."""
    w = s.workflow_streams.c
    rows = await conn.execute(
        sa.select(s.workflow_streams).where(w.run_id == run_id).order_by(w.stream_name)
    )
    return [_state(row) for row in rows]


async def get_stream(
    conn: AsyncConnection, *, run_id: str, stream_name: str, for_update: bool = False
) -> StreamState | None:
    """The stream, or None when the run has none of this name."""
    w = s.workflow_streams.c
    stmt = sa.select(s.workflow_streams).where(w.run_id == run_id, w.stream_name == stream_name)
    if for_update:
        stmt = stmt.with_for_update()
    row = (await conn.execute(stmt)).first()
    return None if row is None else _state(row)


async def read_items(
    conn: AsyncConnection, *, run_id: str, stream_name: str, from_offset: int, limit: int
) -> tuple[StreamState | None, list[StreamItem]]:
    """The stream and up to `limit` items from `from_offset` on, in offset order.

    Resuming from `from_offset` marks the items below it delivered (never moves back).
    """
    w = s.workflow_streams.c
    here = (w.run_id == run_id, w.stream_name == stream_name)
    row = (
        await conn.execute(
            sa.update(s.workflow_streams)
            .where(*here, w.delivered_offset < sa.func.least(from_offset, w.next_offset))
            .values(delivered_offset=sa.func.least(from_offset, w.next_offset))
            .returning(*s.workflow_streams.c)
        )
    ).first()
    stream = (
        _state(row)
        if row is not None
        else await get_stream(conn, run_id=run_id, stream_name=stream_name)
    )
    if stream is None:
        return None, []
    i = s.workflow_stream_items.c
    rows = await conn.execute(
        sa.select(*(i[name] for name in _ITEM_COLUMNS))
        .where(i.run_id == run_id, i.stream_name == stream_name, i.offset >= from_offset)
        .order_by(i.offset)
        .limit(limit)
    )
    return stream, [StreamItem(**row._mapping) for row in rows]


def _same(item: NewItem, found: sa.Row[Any]) -> bool:
    m = found._mapping
    return (item.payload, item.payload_reference, item.item_type) == (
        m["payload"],
        m["payload_reference"],
        m["item_type"],
    )


async def append(
    txn: Txn[AsyncConnection],
    *,
    run: RunRow,
    stream_name: str,
    items: Sequence[NewItem],
    origin: ItemOrigin,
    origin_reference: str | None = None,
    max_pending_items: int | None = None,
) -> Appended:
    """Append items in order (the caller holds the run); a known idempotency key appends nothing.

    Raises:
        ItemKeyConflict: a key already in the stream (or earlier in `items`) names another item.
        StreamTerminal: the stream is closed or errored and an item is new.
        StreamFull: the new items would exceed `max_pending_items` undelivered ones.
        WorkflowNotRunningError: the run is closed and an item is new.
    """
    conn = txn.conn
    stream = await get_stream(conn, run_id=run.run_id, stream_name=stream_name, for_update=True)
    i = s.workflow_stream_items.c
    keys = [item.idempotency_key for item in items if item.idempotency_key is not None]
    known: dict[str, Any] = {}
    if keys and stream is not None:
        rows = await conn.execute(
            sa.select(i.idempotency_key, i.offset, i.payload, i.payload_reference, i.item_type)
            .where(i.run_id == run.run_id, i.stream_name == stream_name)
            .where(i.idempotency_key.in_(keys))
        )
        known = {row.idempotency_key: row for row in rows}
    state = stream or StreamState.unopened(run.run_id, stream_name)
    next_offset = state.total_items
    offsets: list[int] = []
    new_rows: list[dict[str, object]] = []
    batch: dict[str, tuple[NewItem, int]] = {}
    for item in items:
        key = item.idempotency_key
        if key is not None and key in known:
            found = known[key]
            if not _same(item, found):
                raise ItemKeyConflict(
                    run_id=run.run_id, stream_name=stream_name, key=key, offset=found.offset
                )
            offsets.append(found.offset)
            continue
        if key is not None and key in batch:
            first, offset = batch[key]
            if first != item:
                raise ItemKeyConflict(
                    run_id=run.run_id, stream_name=stream_name, key=key, offset=offset
                )
            offsets.append(offset)
            continue
        if key is not None:
            batch[key] = (item, next_offset)
        offsets.append(next_offset)
        new_rows.append(
            {
                "run_id": run.run_id,
                "stream_name": stream_name,
                "offset": next_offset,
                "idempotency_key": key,
                "payload": item.payload,
                "payload_reference": item.payload_reference,
                "payload_codec": item.payload_codec,
                "item_type": item.item_type,
                "content_type": item.content_type,
                "origin": origin.value,
                "origin_reference": origin_reference,
            }
        )
        next_offset += 1
    if not new_rows:
        return Appended(state, offsets, accepted=0, deduplicated=len(items))
    if state.terminal:
        raise StreamTerminal(state)
    if origin == ItemOrigin.CLIENT:
        runs.require_running(run)
    if max_pending_items is not None and state.pending_items + len(new_rows) > max_pending_items:
        raise StreamFull(state, adding=len(new_rows), limit=max_pending_items)
    await conn.execute(sa.insert(s.workflow_stream_items), new_rows)
    w = s.workflow_streams.c
    row = (
        await conn.execute(
            pg.insert(s.workflow_streams)
            .values(
                run_id=run.run_id,
                stream_name=stream_name,
                next_offset=next_offset,
                last_appended_at=sa.func.now(),
            )
            .on_conflict_do_update(
                index_elements=[w.run_id, w.stream_name],
                set_={"next_offset": next_offset, "last_appended_at": sa.func.now()},
            )
            .returning(*s.workflow_streams.c)
        )
    ).one()
    return Appended(
        _state(row), offsets, accepted=len(new_rows), deduplicated=len(items) - len(new_rows)
    )


async def close(
    txn: Txn[AsyncConnection],
    *,
    run: RunRow,
    stream_name: str,
    error_reason: str | None = None,
    retention_seconds: int | None = None,
) -> StreamState:
    """Close the stream (errored when `error_reason` is set), opening it first if need be.

    Closing again the same way changes nothing and returns the stream as it is.

    Raises:
        StreamTerminal: the stream already ended the other way (or with another reason).
    """
    status = StreamStatus.ERRORED if error_reason is not None else StreamStatus.CLOSED
    stream = await get_stream(txn.conn, run_id=run.run_id, stream_name=stream_name, for_update=True)
    if stream is not None and stream.terminal:
        if (stream.status, stream.error_reason) == (status, error_reason):
            return stream
        raise StreamTerminal(stream)
    w = s.workflow_streams.c
    values = {
        "status": status.value,
        "error_reason": error_reason,
        "retention_seconds": retention_seconds,
        "closed_at": sa.func.now(),
    }
    row = (
        await txn.conn.execute(
            pg.insert(s.workflow_streams)
            .values(run_id=run.run_id, stream_name=stream_name, **values)
            .on_conflict_do_update(index_elements=[w.run_id, w.stream_name], set_=values)
            .returning(*s.workflow_streams.c)
        )
    ).one()
    return _state(row)
