"""Schedules: create, describe, list, update, pause, resume, trigger, backfill, delete (issue 30).

Each function runs in the caller's transaction. A refusal (no such schedule, one that exists,
a spec that cannot work: those are refused before, when the models are built) raises before
anything is written. Fires go through store/schedule_fires.py, the same path as the repair
pass, so a trigger or a backfill never starts a second workflow for a fire time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import InvalidScheduleSpec, ScheduleAlreadyExists, ScheduleNotFound
from burrow.protocol.schedules import OverlapPolicy, fire_times_after
from burrow.store import schedule_fires, schedule_history
from burrow.store import schema as s
from burrow.store.schedule_fires import Claimed
from burrow.store.schedule_models import (
    FireKind,
    FireOutcome,
    NewSchedule,
    ScheduleDescription,
    ScheduleEventType,
    ScheduleFire,
    ScheduleStatus,
    ScheduleSummary,
    ScheduleUpdate,
)
from burrow.store.transactions import Txn

MAX_BACKFILL_FIRES = 1000
UPCOMING = 5
RECENT = 10

_c = s.schedules.c


def _status(m: sa.RowMapping) -> ScheduleStatus:
    if m["paused"]:
        return ScheduleStatus.PAUSED
    if m["next_fire_at"] is None and m["buffered_count"] == 0:
        return ScheduleStatus.COMPLETED
    return ScheduleStatus.ACTIVE


def summary_of(row: sa.Row[tuple[object, ...]]) -> ScheduleSummary:
    """The typed summary of a `schedules` row."""
    m = row._mapping
    return ScheduleSummary.model_validate(
        {**{k: m[k] for k in ScheduleSummary.model_fields if k in m}, "status": _status(m)}
    )


async def _lock(
    conn: AsyncConnection, namespace: str, schedule_id: str
) -> sa.Row[tuple[object, ...]]:
    row = (
        await conn.execute(
            sa.select(s.schedules)
            .where(_c.namespace == namespace, _c.schedule_id == schedule_id)
            .with_for_update()
        )
    ).first()
    if row is None:
        raise ScheduleNotFound(namespace=namespace, schedule_id=schedule_id)
    return row


async def create_schedule(txn: Txn[AsyncConnection], new: NewSchedule) -> ScheduleSummary:
    """Insert the schedule with its first fire time after now.

    Raises:
        ScheduleAlreadyExists: the id is taken in the namespace; nothing was written.
    """
    conn = txn.conn
    now = await schedule_fires.db_now(conn)
    first = schedule_fires.next_fire(new.schedule_id, new.spec, new.policies, now)
    stmt = (
        pg.insert(s.schedules)
        .values(
            namespace=new.namespace,
            schedule_id=new.schedule_id,
            spec=new.spec.model_dump(mode="json"),
            action=new.action.model_dump(mode="json"),
            policies=new.policies.model_dump(mode="json"),
            workflow_type=new.action.workflow_type,
            memo=new.memo,
            search_attributes=new.search_attributes,
            paused=new.paused,
            note=new.note,
            paused_at=now if new.paused else None,
            **first,
        )
        .on_conflict_do_nothing()
        .returning(*s.schedules.c)
    )
    row = (await conn.execute(stmt)).first()
    if row is None:
        raise ScheduleAlreadyExists(namespace=new.namespace, schedule_id=new.schedule_id)
    ids = {"namespace": new.namespace, "schedule_id": new.schedule_id}
    created = {
        "spec": new.spec.model_dump(mode="json"),
        "workflow_type": new.action.workflow_type,
        "task_queue": new.action.task_queue,
        "overlap_policy": new.policies.overlap_policy.value,
    }
    await schedule_history.append(
        conn, **ids, event_type=ScheduleEventType.CREATED, payload=created
    )
    if new.paused:
        paused = {"note": new.note}
        await schedule_history.append(
            conn, **ids, event_type=ScheduleEventType.PAUSED, payload=paused
        )
    return summary_of(row)


async def describe_schedule(
    conn: AsyncConnection,
    *,
    namespace: str,
    schedule_id: str,
    upcoming: int = UPCOMING,
    recent: int = RECENT,
) -> ScheduleDescription:
    """The schedule with its next `upcoming` fire times and its latest `recent` fires."""
    row = (
        await conn.execute(
            sa.select(s.schedules).where(_c.namespace == namespace, _c.schedule_id == schedule_id)
        )
    ).first()
    if row is None:
        raise ScheduleNotFound(namespace=namespace, schedule_id=schedule_id)
    summary = summary_of(row)
    times: list[datetime] = []
    if summary.next_fire_at is not None and not summary.paused_at:
        limit = summary.remaining_actions
        wanted = upcoming if limit is None else min(upcoming, limit)
        if wanted > 0:
            after = summary.next_fire_at - timedelta(seconds=1)
            times = fire_times_after(summary.spec, after, limit=wanted)
    f = s.schedule_fires.c
    fires = (
        await conn.execute(
            sa.select(s.schedule_fires)
            .where(f.namespace == namespace, f.schedule_id == schedule_id)
            .order_by(f.recorded_at.desc(), f.fire_at.desc())
            .limit(recent)
        )
    ).all()
    return ScheduleDescription(
        **summary.model_dump(),
        next_fire_times=times,
        recent_fires=[_fire_of(r) for r in fires],
    )


def _fire_of(row: sa.Row[tuple[object, ...]]) -> ScheduleFire:
    m = row._mapping
    return ScheduleFire(
        schedule_id=m["schedule_id"],
        fire_at=m["fire_at"],
        kind=FireKind(m["kind"]),
        outcome=FireOutcome(m["outcome"]),
        workflow_id=m["workflow_id"],
        run_id=m["run_id"],
        reason=m["reason"],
    )


async def list_schedules(
    conn: AsyncConnection,
    *,
    namespace: str,
    status: ScheduleStatus | None = None,
    workflow_type: str | None = None,
    after_schedule_id: str | None = None,
    limit: int = 100,
) -> list[ScheduleSummary]:
    """The namespace's schedules by id, after `after_schedule_id` (keyset paging)."""
    stmt = sa.select(s.schedules).where(_c.namespace == namespace)
    if status is not None:
        done = sa.and_(_c.next_fire_at.is_(None), _c.buffered_count == 0)
        stmt = stmt.where(
            _c.paused
            if status is ScheduleStatus.PAUSED
            else sa.and_(~_c.paused, done if status is ScheduleStatus.COMPLETED else ~done)
        )
    if workflow_type is not None:
        stmt = stmt.where(_c.workflow_type == workflow_type)
    if after_schedule_id is not None:
        stmt = stmt.where(_c.schedule_id > after_schedule_id)
    rows = (await conn.execute(stmt.order_by(_c.schedule_id).limit(limit))).all()
    return [summary_of(row) for row in rows]


async def update_schedule(
    txn: Txn[AsyncConnection], *, namespace: str, schedule_id: str, update: ScheduleUpdate
) -> ScheduleSummary:
    """Change the fields given; a new spec or policies recompute the next fire from now."""
    conn = txn.conn
    row = await _lock(conn, namespace, schedule_id)
    current = schedule_fires.claimed_of(row)
    values: dict[str, object] = {}
    if update.action is not None:
        values["action"] = update.action.model_dump(mode="json")
        values["workflow_type"] = update.action.workflow_type
    if update.memo is not None:
        values["memo"] = update.memo
    if update.search_attributes is not None:
        values["search_attributes"] = update.search_attributes
    if update.note is not None:
        values["note"] = update.note
    changed = update.policies(current.policies)
    if update.spec is not None or changed is not None:
        spec = update.spec or current.spec
        policies = changed or current.policies
        values["spec"] = spec.model_dump(mode="json")
        values["policies"] = policies.model_dump(mode="json")
        now = await schedule_fires.db_now(conn)
        values.update(schedule_fires.next_fire(schedule_id, spec, policies, now))
    updated = (
        await conn.execute(
            sa.update(s.schedules)
            .where(_c.namespace == namespace, _c.schedule_id == schedule_id)
            .values(updated_at=sa.func.now(), **values)
            .returning(*s.schedules.c)
        )
    ).one()
    fields = sorted(update.model_dump(exclude_none=True))
    await schedule_history.append(
        conn,
        namespace=namespace,
        schedule_id=schedule_id,
        event_type=ScheduleEventType.UPDATED,
        payload={"fields": fields},
    )
    return summary_of(updated)


async def pause_schedule(
    txn: Txn[AsyncConnection], *, namespace: str, schedule_id: str, note: str | None = None
) -> ScheduleSummary:
    """Stop firing (buffered fires wait too) until resumed; the note says why."""
    await _lock(txn.conn, namespace, schedule_id)
    values: dict[str, object] = {
        "paused": True,
        "paused_at": sa.func.coalesce(_c.paused_at, sa.func.now()),
    }
    if note is not None:
        values["note"] = note
    await schedule_history.append(
        txn.conn,
        namespace=namespace,
        schedule_id=schedule_id,
        event_type=ScheduleEventType.PAUSED,
        payload={"note": note},
    )
    return await _set(txn.conn, namespace, schedule_id, values)


async def resume_schedule(
    txn: Txn[AsyncConnection], *, namespace: str, schedule_id: str, note: str | None = None
) -> ScheduleSummary:
    """Fire again from the next fire time after now: times passed while paused are not fired."""
    conn = txn.conn
    row = await _lock(conn, namespace, schedule_id)
    current = schedule_fires.claimed_of(row)
    values: dict[str, object] = {"paused": False, "paused_at": None}
    if row._mapping["paused"]:
        now = await schedule_fires.db_now(conn)
        values.update(schedule_fires.next_fire(schedule_id, current.spec, current.policies, now))
    if note is not None:
        values["note"] = note
    await schedule_history.append(
        conn,
        namespace=namespace,
        schedule_id=schedule_id,
        event_type=ScheduleEventType.RESUMED,
        payload={"note": note},
    )
    return await _set(conn, namespace, schedule_id, values)


async def _set(
    conn: AsyncConnection, namespace: str, schedule_id: str, values: dict[str, object]
) -> ScheduleSummary:
    row = (
        await conn.execute(
            sa.update(s.schedules)
            .where(_c.namespace == namespace, _c.schedule_id == schedule_id)
            .values(updated_at=sa.func.now(), **values)
            .returning(*s.schedules.c)
        )
    ).one()
    return summary_of(row)


async def trigger_schedule(
    txn: Txn[AsyncConnection],
    *,
    namespace: str,
    schedule_id: str,
    overlap: OverlapPolicy | None = None,
) -> ScheduleFire:
    """Fire now (the current second) under the overlap policy, or `overlap` for this fire."""
    conn = txn.conn
    sched = schedule_fires.claimed_of(await _lock(conn, namespace, schedule_id))
    now = (await schedule_fires.db_now(conn)).replace(microsecond=0)
    fired = await schedule_fires.fire(txn, sched, now, FireKind.TRIGGER, overlap=overlap)
    await schedule_fires.save(conn, sched)
    return fired


async def backfill_schedule(
    txn: Txn[AsyncConnection],
    *,
    namespace: str,
    schedule_id: str,
    start: datetime,
    end: datetime,
    overlap: OverlapPolicy | None = None,
) -> list[ScheduleFire]:
    """Fire every fire time in `[start, end)` (fire times fired before do nothing again).

    Raises:
        InvalidScheduleSpec: `end` is not after `start`, or the range holds more than
            MAX_BACKFILL_FIRES fire times; nothing was written.
        ScheduleNotFound: no such schedule; nothing was written.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidScheduleSpec(field="backfill", reason="start and end need a UTC offset")
    if end <= start:
        raise InvalidScheduleSpec(field="backfill", reason="end must be after start")
    conn = txn.conn
    sched: Claimed = schedule_fires.claimed_of(await _lock(conn, namespace, schedule_id))
    times = fire_times_after(
        sched.spec,
        start - timedelta(seconds=1),
        limit=MAX_BACKFILL_FIRES + 1,
        until=end - timedelta(microseconds=1),
    )
    times = [at for at in times if at >= start]
    if len(times) > MAX_BACKFILL_FIRES:
        raise InvalidScheduleSpec(
            field="backfill", reason=f"the range holds more than {MAX_BACKFILL_FIRES} fire times"
        )
    fired = [
        await schedule_fires.fire(txn, sched, at, FireKind.BACKFILL, overlap=overlap)
        for at in times
    ]
    await schedule_fires.save(conn, sched)
    return fired


async def delete_schedule(txn: Txn[AsyncConnection], *, namespace: str, schedule_id: str) -> None:
    """Delete the schedule and its fires; runs it started go on."""
    deleted = (
        await txn.conn.execute(
            sa.delete(s.schedules)
            .where(_c.namespace == namespace, _c.schedule_id == schedule_id)
            .returning(_c.schedule_id)
        )
    ).first()
    if deleted is None:
        raise ScheduleNotFound(namespace=namespace, schedule_id=schedule_id)
    await schedule_history.append(
        txn.conn, namespace=namespace, schedule_id=schedule_id, event_type=ScheduleEventType.DELETED
    )
