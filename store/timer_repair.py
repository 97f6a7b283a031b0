"""Durable timers in the repair pass: fire the due ones, and when the loop wakes next.

A timer whose firing raised is held out (store/isolation.py) and left out of `next_timer_at`
with the deadlines and schedules it is compared with, so no loop wakes for it every pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.store import (
    condition_waits,
    cooperative,
    fragments,
    run_deadlines,
    runs,
    schedule_fires,
)
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.isolation import RepairStep, RowRef, Tally, each_row, step_columns
from burrow.store.models import RunStatus, TimerState
from burrow.store.transactions import Txn

BATCH = 500


TIMER_KEY = "timers.run_id::text || ':' || timers.step_seq"
"""SQL: a timer's key in `repair_failures` (step `timer`)."""


async def fire_due_timers(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Fire due timers once each: the event joins the run's inbox and wakes a workflow task."""
    conn = txn.conn
    t = s.timers.c
    is_marked, not_held = step_columns(RepairStep.TIMER, TIMER_KEY)
    # The earliest due first, read in ix_timers_due's order: ordered by run_id alone, the
    # planner walked the primary key through every timer, fired ones too, each pass. The batch
    # is then locked in run order, as before.
    earliest = (
        sa.select(t.run_id, t.step_seq, t.namespace, is_marked)
        .where(
            fragments.state_is(t.state, TimerState.PENDING),
            t.fire_at <= sa.func.now(),
            not_held,
        )
        .order_by(t.fire_at)
        .limit(BATCH)
        .subquery()
    )
    due = (await conn.execute(sa.select(earliest).order_by(earliest.c.run_id))).all()
    refs = [
        RowRef(
            key=f"{d.run_id}:{d.step_seq}", namespace=d.namespace, run_id=d.run_id, marked=d.marked
        )
        for d in due
    ]

    async def fire(batch: Sequence[RowRef]) -> int:
        return sum([await _fire_timer(txn, ref) for ref in batch])

    return await each_row(txn, RepairStep.TIMER, refs, fire, tally or Tally())


async def _fire_timer(txn: Txn[AsyncConnection], ref: RowRef) -> int:
    """Fire one due timer (its key is its timer id, `run_id:step_seq`); 1 if it fired."""
    conn = txn.conn
    t = s.timers.c
    run_id, step_seq = ref.key.rsplit(":", 1)
    run = await runs.lock_run(conn, run_id=run_id)
    row = (
        await conn.execute(
            sa.update(s.timers)
            .where(
                t.run_id == run_id,
                t.step_seq == int(step_seq),
                fragments.state_is(t.state, TimerState.PENDING),
            )
            .values(state=TimerState.FIRED)
            .returning(t.delay_seconds, sa.func.now().label("now"))
        )
    ).first()
    if row is None or run.status != RunStatus.RUNNING:
        return 0
    event = await condition_waits.timed_out_event(conn, run_id=run_id, step=int(step_seq))
    if event is None:
        fired_event = events.TimerFired(
            timer_id=ref.key,
            sequence=int(step_seq),
            delay_seconds=row.delay_seconds,
            fired_at=row.now,
        )
        event = NewEvent(fired_event, f"step:{step_seq}:timer-fired")
    await runs.record_external_event(txn, run=run, event=event)
    return 1


async def next_timer_at(conn: AsyncConnection) -> datetime | None:
    """When the earliest timer, run or cleanup deadline, or schedule fire is due, or None."""
    t = s.timers.c
    # A timer held out after a failure is left out: the loop would wake for it every pass.
    _, not_held = step_columns(RepairStep.TIMER, TIMER_KEY)
    # The first in ix_timers_due's order that is not held, not min(): min() with the held-out
    # anti-join read every pending timer each pass, so a pass cost grew with the timers waiting.
    stmt = (
        sa.select(t.fire_at)
        .where(fragments.state_is(t.state, TimerState.PENDING), not_held)
        .order_by(t.fire_at)
        .limit(1)
    )
    timer: datetime | None = (await conn.execute(stmt)).scalar()
    deadline = await run_deadlines.next_deadline_at(conn)
    cleanup = await cooperative.next_cleanup_deadline_at(conn)
    schedule = await schedule_fires.next_due_at(conn)
    due = [at for at in (timer, deadline, cleanup, schedule) if at is not None]
    return min(due) if due else None
