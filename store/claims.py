"""The SQL that claims tasks (SKIP LOCKED), renews leases and fences them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import history, runs
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import (
    ClaimedActivityTask,
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    Lease,
    TaskState,
)


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """What a poller may take (M3, M7): namespace, connection, queue, build and types."""

    namespace: str
    queue: str
    types: Sequence[str]
    connection: str = "default"
    build_id: str | None = None


def _ready_where(table: sa.Table, flt: QueueFilter, type_column: str) -> list[Any]:
    c = table.c
    where = [
        c.state == TaskState.READY,
        c.namespace == flt.namespace,
        c.queue == flt.queue,
        c.connection == flt.connection,
        c.available_at <= sa.func.now(),
        c[type_column] == sa.any_(sa.literal(list(flt.types), type_=pg.ARRAY(sa.Text))),
    ]
    if flt.build_id is not None:
        where.append(sa.or_(c.build_id.is_(None), c.build_id == flt.build_id))
    else:
        where.append(c.build_id.is_(None))
    return where


def _lease_values(worker_id: str, lease: timedelta) -> dict[str, Any]:
    return {
        "state": TaskState.LEASED,
        "lease_owner": worker_id,
        "lease_token": str(uuid.uuid4()),
        "lease_expires_at": sa.func.now() + lease,
    }


def _lease(row: Any) -> Lease:
    return Lease(
        task_id=row.task_id,
        run_id=row.run_id,
        lease_token=row.lease_token,
        lease_owner=row.lease_owner,
        attempt=row.attempt,
        lease_expires_at=row.lease_expires_at,
    )


async def claim_workflow_task(
    conn: AsyncConnection, *, flt: QueueFilter, worker_id: str, lease: timedelta
) -> ClaimedWorkflowTask | None:
    """Lease one ready workflow task, move its run's inbox into history, return the history."""
    w = s.workflow_tasks.c
    pick = (
        sa.select(w.task_id)
        .where(*_ready_where(s.workflow_tasks, flt, "workflow_type"))
        .order_by(w.available_at)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    row = (
        await conn.execute(
            sa.update(s.workflow_tasks)
            .where(w.task_id == pick)
            .values(**_lease_values(worker_id, lease))
            .returning(s.workflow_tasks)
        )
    ).first()
    if row is None:
        return None
    run = await runs.lock_run(conn, run_id=row.run_id)
    last = await history.flush_inbox(
        conn, run_id=run.run_id, after_seq=run.last_event_seq, workflow_task_id=row.task_id
    )
    if last != run.last_event_seq:
        await conn.execute(
            sa.update(s.runs).where(s.runs.c.run_id == run.run_id).values(last_event_seq=last)
        )
    events = await history.read_history(conn, run_id=run.run_id)
    return ClaimedWorkflowTask(
        lease=_lease(row), run=runs.run_info(run), history=events, attempt=row.attempt
    )


async def claim_activity_tasks(
    conn: AsyncConnection, *, flt: QueueFilter, worker_id: str, lease: timedelta, limit: int
) -> list[ClaimedActivityTask]:
    """Lease up to `limit` ready activity attempts in one statement."""
    a = s.activity_tasks.c
    pick = (
        sa.select(a.task_id)
        .where(
            *_ready_where(s.activity_tasks, flt, "activity_type"),
            # A repair never re-runs an activity past its schedule-to-close deadline.
            sa.or_(
                a.schedule_to_close_deadline.is_(None), a.schedule_to_close_deadline > sa.func.now()
            ),
        )
        .order_by(a.available_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    values = _lease_values(worker_id, lease)
    values.pop("lease_token")
    rows = (
        await conn.execute(
            sa.update(s.activity_tasks)
            .where(a.task_id.in_(pick))
            .values(
                **values,
                lease_token=sa.func.gen_random_uuid(),
                started_at=sa.func.now(),
                heartbeat_at=None,
            )
            .returning(
                s.activity_tasks,
                sa.select(s.runs.c.workflow_id)
                .where(s.runs.c.run_id == a.run_id)
                .scalar_subquery()
                .label("workflow_id"),
            )
        )
    ).all()
    for row in rows:
        await history.add_inbox_event(
            conn,
            run_id=row.run_id,
            event=NewEvent(
                "ActivityStarted",
                {
                    "activity_execution_id": row.activity_execution_id,
                    "activity_attempt_id": row.activity_attempt_id,
                    "activity_type": row.activity_type,
                    "sequence": row.step_seq,
                    "attempt_number": row.attempt,
                    "lease_expires_at": row.lease_expires_at.isoformat(),
                },
                f"activity:{row.activity_execution_id}:started:{row.attempt}",
            ),
            wakes_workflow=False,
        )
    return [
        ClaimedActivityTask(
            lease=_lease(row),
            run_id=row.run_id,
            workflow_id=row.workflow_id,
            namespace=row.namespace,
            queue=row.queue,
            step_seq=row.step_seq,
            activity_type=row.activity_type,
            activity_execution_id=row.activity_execution_id,
            activity_attempt_id=row.activity_attempt_id,
            attempt_number=row.attempt,
            arguments=row.arguments,
            heartbeat_details=row.heartbeat_details,
            heartbeat_seconds=row.heartbeat_seconds,
            start_to_close_seconds=row.start_to_close_seconds,
            scheduled_at=row.scheduled_at,
        )
        for row in rows
    ]


async def claim_query_task(
    conn: AsyncConnection, *, flt: QueueFilter, worker_id: str, lease: timedelta
) -> ClaimedQueryTask | None:
    """Lease one ready query task with the history to answer it from."""
    q = s.query_tasks.c
    pick = (
        sa.select(q.task_id)
        .where(*_ready_where(s.query_tasks, flt, "workflow_type"), q.expires_at > sa.func.now())
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    row = (
        await conn.execute(
            sa.update(s.query_tasks)
            .where(q.task_id == pick)
            .values(**_lease_values(worker_id, lease))
            .returning(s.query_tasks)
        )
    ).first()
    if row is None:
        return None
    run = (await conn.execute(sa.select(s.runs).where(s.runs.c.run_id == row.run_id))).one()
    events = await history.read_history(conn, run_id=row.run_id)
    return ClaimedQueryTask(
        lease=_lease(row),
        run=runs.run_info(run),
        history=events,
        query_name=row.query_name,
        arguments=row.arguments,
    )


def fenced(table: sa.Table, lease: Lease) -> list[Any]:
    """The WHERE clause every completion, failure and heartbeat carries (store invariant 2)."""
    c = table.c
    return [
        c.task_id == lease.task_id,
        c.lease_token == lease.lease_token,
        c.lease_owner == lease.lease_owner,
        c.attempt == lease.attempt,
        c.state == TaskState.LEASED,
    ]


async def renew_leases(
    conn: AsyncConnection, *, table: sa.Table, leases: Sequence[Lease], lease: timedelta
) -> set[str]:
    """Extend the leases still held; returns the task ids whose lease is still current."""
    if not leases:
        return set()
    c = table.c
    held = sa.or_(
        *(sa.and_(c.task_id == item.task_id, c.lease_token == item.lease_token) for item in leases)
    )
    rows = await conn.execute(
        sa.update(table)
        .where(held, c.state == TaskState.LEASED)
        .values(lease_expires_at=sa.func.now() + lease)
        .returning(c.task_id)
    )
    return {row.task_id for row in rows}
