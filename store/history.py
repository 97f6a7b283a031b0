"""History append (per-run sequence, once-only keys), the inbox, and reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol.events import Event, HistoryEvent
from burrow.protocol.shapes import JsonDict
from burrow.store import schema as s
from burrow.store import sql
from burrow.store.models import TaskState
from burrow.store.sql import statement


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the key makes a duplicate record nothing (D3)."""

    event: Event
    idempotency_key: str


_APPEND = """
    INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                workflow_task_id)
    SELECT :run_id, :after_seq + e.ord, e.event_type, e.payload, e.idempotency_key,
           CAST(:workflow_task_id AS uuid)
    FROM unnest(CAST(:event_types AS text[]), CAST(CAST(:payloads AS text[]) AS jsonb[]),
                CAST(:keys AS text[]))
         WITH ORDINALITY AS e(event_type, payload, idempotency_key, ord)
    ON CONFLICT (run_id, idempotency_key) DO NOTHING
    RETURNING sequence
"""
APPENDED_CTE = f"appended AS ({_APPEND})"
"""The append as a CTE of a caller's statement (saves a round trip): it takes `append_params`,
and the caller returns `(SELECT count(*) FROM appended)` for `check_appended`."""
_APPEND_EVENTS = statement(_APPEND)


def append_params(
    *, run_id: str, after_seq: int, events: Sequence[NewEvent], workflow_task_id: str | None
) -> dict[str, object]:
    """The parameters of an append of `events` after `after_seq`."""
    return {
        "run_id": run_id,
        "after_seq": after_seq,
        "workflow_task_id": workflow_task_id,
        "event_types": [e.event.event_type for e in events],
        "payloads": [e.event.model_dump_json() for e in events],  # as to_json(), in one pass
        "keys": [e.idempotency_key for e in events],
    }


def check_appended(run_id: str, after_seq: int, events: Sequence[NewEvent], inserted: int) -> int:
    """The new last sequence, once every event was inserted.

    Raises:
        ValueError: an idempotency key was already recorded, so the caller's transaction must
            roll back rather than leave a gap in the sequence.
    """
    if inserted != len(events):
        raise ValueError(f"run {run_id}: {len(events) - inserted} event(s) already recorded")
    return after_seq + len(events)


async def append_events(
    conn: AsyncConnection,
    *,
    run_id: str,
    after_seq: int,
    events: Sequence[NewEvent],
    workflow_task_id: str | None,
) -> int:
    """Append events after `after_seq` (the caller holds the run lock); returns the new last seq.

    Raises:
        ValueError: see `check_appended`.
    """
    if not events:
        return after_seq
    params = append_params(
        run_id=run_id, after_seq=after_seq, events=events, workflow_task_id=workflow_task_id
    )
    inserted = await sql.fetch(conn, _APPEND_EVENTS, params)
    return check_appended(run_id, after_seq, events, len(inserted))


async def append_recorded(
    conn: AsyncConnection,
    *,
    run_id: str,
    after_seq: int,
    recorded: Sequence[tuple[str, object, str]],
) -> int:
    """Append events already recorded as JSON (event type, payload, key), as `append_events`."""
    if not recorded:
        return after_seq
    params = {
        "run_id": run_id,
        "after_seq": after_seq,
        "workflow_task_id": None,
        "event_types": [event_type for event_type, _, _ in recorded],
        "payloads": [json.dumps(payload) for _, payload, _ in recorded],
        "keys": [key for _, _, key in recorded],
    }
    inserted = await sql.fetch(conn, _APPEND_EVENTS, params)
    if len(inserted) != len(recorded):
        raise ValueError(f"run {run_id}: {len(recorded) - len(inserted)} event(s) already recorded")
    return after_seq + len(recorded)


async def add_inbox_event(
    conn: AsyncConnection, *, run_id: str, event: NewEvent, wakes_workflow: bool = True
) -> bool:
    """Queue an event for the run's next workflow task; False when its key was already seen."""
    stmt = (
        pg.insert(s.inbox_events)
        .values(
            run_id=run_id,
            event_type=event.event.event_type,
            payload=event.event.to_json(),
            idempotency_key=event.idempotency_key,
            wakes_workflow=wakes_workflow,
        )
        .on_conflict_do_nothing(index_elements=["run_id", "idempotency_key"])
        .returning(s.inbox_events.c.id)
    )
    return (await conn.execute(stmt)).first() is not None


# Events a workflow task claim returns, and a history read fetches, per round trip: a long
# history is read page by page, so the raw rows of only one page are held at a time.
HISTORY_PAGE_EVENTS = 1000


async def read_history(
    conn: AsyncConnection, *, run_id: str, after_seq: int = 0, limit: int | None = None
) -> list[HistoryEvent]:
    """The run's events after `after_seq`, in sequence order; the first `limit` if given."""
    h = s.history_events.c
    rows = await conn.execute(
        sa.select(h.run_id, h.sequence, h.event_type, h.payload, h.recorded_at, h.workflow_task_id)
        .where(h.run_id == run_id, h.sequence > after_seq)
        .order_by(h.sequence)
        .limit(limit)
    )
    return [
        HistoryEvent.from_record(
            run_id=row.run_id,
            sequence=row.sequence,
            event_type=row.event_type,
            payload=row.payload,
            recorded_at=row.recorded_at,
            workflow_task_id=row.workflow_task_id,
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A history event as stored, unparsed: for views that read a long history fast (the UI).

    `payload` is the stored JSON; parse it with `burrow.protocol.events.parse` to check it.
    """

    sequence: int
    event_type: str
    payload: JsonDict
    recorded_at: datetime


_STORED_HISTORY = statement(
    "SELECT sequence, event_type, payload, recorded_at FROM history_events"
    " WHERE run_id = :run_id ORDER BY sequence"
)


async def read_stored_history(conn: AsyncConnection, *, run_id: str) -> list[StoredEvent]:
    """The run's events in sequence order, as stored (no model validation: much cheaper).

    Read on the driver (one fetch of every row, not a row at a time through SQLAlchemy's
    adapter): a 5,000-event history is the web UI's heaviest read.
    """
    rows = await sql.fetch(conn, _STORED_HISTORY, {"run_id": run_id})
    return [StoredEvent(r[0], r[1], r[2], r[3]) for r in rows]


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    """An open activity attempt of a run as the UI shows it: heartbeat and session holder."""

    step_seq: int
    attempt_number: int
    started_at: datetime | None
    heartbeat_at: datetime | None
    session_id: str | None
    session_holder: str | None


async def open_attempts(conn: AsyncConnection, *, run_id: str) -> list[OpenAttempt]:
    """The run's open activity attempts, by step, with their session's holder if any."""
    a, ws = s.activity_tasks.c, s.worker_sessions.c
    r = s.runs.c
    joined = s.activity_tasks.join(s.runs, r.run_id == a.run_id).outerjoin(
        s.worker_sessions, sa.and_(ws.session_id == a.session_id, ws.namespace == r.namespace)
    )
    rows = await conn.execute(
        sa.select(
            a.step_seq, a.attempt, a.started_at, a.heartbeat_at, a.session_id, ws.owner_worker_id
        )
        .select_from(joined)
        .where(a.run_id == run_id, a.state.in_((TaskState.READY.value, TaskState.LEASED.value)))
        .order_by(a.step_seq)
    )
    return [OpenAttempt(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


_TASK_RUN_EVENTS = statement(
    """
    SELECT h.run_id, h.sequence, h.event_type, h.payload, h.recorded_at, h.workflow_task_id
    FROM history_events h
    WHERE h.run_id = (SELECT run_id FROM workflow_tasks WHERE task_id = CAST(:task_id AS uuid))
      AND h.event_type = ANY(CAST(:event_types AS text[]))
    ORDER BY h.sequence
    """
)


async def read_task_run_events(
    conn: sql.Conn, *, task_id: str, event_types: Sequence[str]
) -> list[HistoryEvent]:
    """The events of the given types of a workflow task's run, in sequence order (unfenced)."""
    params = {"task_id": task_id, "event_types": list(event_types)}
    rows = await sql.fetch(conn, _TASK_RUN_EVENTS, params)
    return [
        HistoryEvent.from_record(
            run_id=row.run_id,
            sequence=row.sequence,
            event_type=row.event_type,
            payload=row.payload,
            recorded_at=row.recorded_at,
            workflow_task_id=row.workflow_task_id,
        )
        for row in rows
    ]


async def append_to_leased_run(
    conn: AsyncConnection, *, run_id: str, task_id: str, events: Sequence[NewEvent]
) -> list[HistoryEvent]:
    """Append events for the run's leased workflow task (it locks the run): those recorded.

    An event whose key was recorded before is skipped; the others follow the run's last event.
    """
    run = s.runs.c
    last = (
        await conn.execute(
            sa.select(run.last_event_seq).where(run.run_id == run_id).with_for_update()
        )
    ).scalar_one()
    h = s.history_events.c
    keys = [e.idempotency_key for e in events]
    seen = set(
        (
            await conn.execute(
                sa.select(h.idempotency_key).where(h.run_id == run_id, h.idempotency_key.in_(keys))
            )
        ).scalars()
    )
    new = [e for e in events if e.idempotency_key not in seen]
    if not new:
        return []
    after = await append_events(
        conn, run_id=run_id, after_seq=last, events=new, workflow_task_id=task_id
    )
    await conn.execute(sa.update(s.runs).where(run.run_id == run_id).values(last_event_seq=after))
    return await read_history(conn, run_id=run_id, after_seq=last)
