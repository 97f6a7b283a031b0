"""A schedule's audit stream (issue 30): lifecycle changes and fires, numbered per schedule.

Each event is written in the transaction of the change it records, which holds the schedule's
row lock (or, for a create, its new key), so sequence numbers are gapless and never taken twice.
The stream is kept after a delete, ending with `ScheduleDeleted`, so what happened stays
readable; a schedule created again under the same id continues the numbering. The latest
KEEP_EVENTS events of each schedule are kept.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import schema as s
from burrow.store.schedule_models import (
    FireOutcome,
    ScheduleEvent,
    ScheduleEventType,
    ScheduleFire,
    ScheduleHistoryPage,
)

MAX_PAGE = 500
DEFAULT_PAGE = 100
KEEP_EVENTS = 10_000
"""Events kept per schedule: a schedule firing every second would otherwise grow for ever.
Every PRUNE_EVERY-th event deletes those older than the latest KEEP_EVENTS (amortised)."""
PRUNE_EVERY = 100

_h = s.schedule_history.c


async def append(
    conn: AsyncConnection,
    *,
    namespace: str,
    schedule_id: str,
    event_type: ScheduleEventType,
    payload: dict[str, Any] | None = None,
    workflow_id: str | None = None,
    run_id: str | None = None,
) -> None:
    """Add one event after the schedule's latest (the caller holds the schedule's lock)."""
    following = (
        sa.select(sa.func.coalesce(sa.func.max(_h.sequence), 0) + 1)
        .where(_h.namespace == namespace, _h.schedule_id == schedule_id)
        .scalar_subquery()
    )
    sequence: int = (
        await conn.execute(
            sa.insert(s.schedule_history)
            .values(
                namespace=namespace,
                schedule_id=schedule_id,
                sequence=following,
                event_type=event_type.value,
                payload=payload or {},
                workflow_id=workflow_id,
                run_id=run_id,
            )
            .returning(_h.sequence)
        )
    ).scalar_one()
    if sequence % PRUNE_EVERY == 0 and sequence > KEEP_EVENTS:
        await conn.execute(
            sa.delete(s.schedule_history).where(
                _h.namespace == namespace,
                _h.schedule_id == schedule_id,
                _h.sequence <= sequence - KEEP_EVENTS,
            )
        )


async def record_fire(conn: AsyncConnection, namespace: str, fired: ScheduleFire) -> None:
    """A fire's event: `ScheduleTriggered` when it started a run, else `ScheduleTriggerSkipped`."""
    started = fired.outcome is FireOutcome.STARTED
    payload: dict[str, Any] = {
        "fire_at": fired.fire_at.isoformat(),
        "kind": fired.kind.value,
        "outcome": fired.outcome.value,
    }
    if fired.reason is not None:
        payload["reason"] = fired.reason
    await append(
        conn,
        namespace=namespace,
        schedule_id=fired.schedule_id,
        event_type=ScheduleEventType.TRIGGERED if started else ScheduleEventType.TRIGGER_SKIPPED,
        payload=payload,
        workflow_id=fired.workflow_id,
        run_id=fired.run_id,
    )


async def history_page(
    conn: AsyncConnection,
    *,
    namespace: str,
    schedule_id: str,
    after_sequence: int | None = None,
    limit: int = DEFAULT_PAGE,
) -> ScheduleHistoryPage | None:
    """Up to `limit` events after `after_sequence`, oldest first; None: the id never existed."""
    stmt = sa.select(s.schedule_history).where(
        _h.namespace == namespace, _h.schedule_id == schedule_id
    )
    if after_sequence is not None:
        stmt = stmt.where(_h.sequence > after_sequence)
    rows = (await conn.execute(stmt.order_by(_h.sequence).limit(limit + 1))).all()
    if not rows and not await _known(conn, namespace, schedule_id):
        return None
    events = [
        ScheduleEvent(
            id=str(r.id),
            sequence=r.sequence,
            event_type=ScheduleEventType(r.event_type),
            payload=r.payload,
            workflow_id=r.workflow_id,
            run_id=r.run_id,
            recorded_at=r.recorded_at,
        )
        for r in rows[:limit]
    ]
    return ScheduleHistoryPage(
        namespace=namespace, schedule_id=schedule_id, events=events, has_more=len(rows) > limit
    )


async def _known(conn: AsyncConnection, namespace: str, schedule_id: str) -> bool:
    mine = (_h.namespace == namespace, _h.schedule_id == schedule_id)
    c = s.schedules.c
    exists = sa.select(
        sa.or_(
            sa.exists().where(*mine),
            sa.exists().where(c.namespace == namespace, c.schedule_id == schedule_id),
        )
    )
    found: bool = (await conn.execute(exists)).scalar_one()
    return found
