"""Worker registrations: register, heartbeat, deregister, and who is live on a queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import schema as s
from burrow.store.models import WorkerState


async def register_worker(
    conn: AsyncConnection,
    *,
    worker_id: str,
    namespace: str,
    task_queue: str,
    workflow_types: Sequence[str],
    activity_types: Sequence[str],
    concurrency: int,
    connection: str = "default",
    build_id: str | None = None,
) -> None:
    """Insert or refresh a worker's registration (S3, S10)."""
    values = {
        "namespace": namespace,
        "connection": connection,
        "task_queue": task_queue,
        "build_id": build_id,
        "workflow_types": list(workflow_types),
        "activity_types": list(activity_types),
        "concurrency": concurrency,
        "state": WorkerState.ACTIVE,
        "heartbeat_at": sa.func.now(),
        "stopped_at": None,
    }
    stmt = pg.insert(s.worker_registrations).values(worker_id=worker_id, **values)
    await conn.execute(stmt.on_conflict_do_update(index_elements=["worker_id"], set_=values))


async def heartbeat_worker(conn: AsyncConnection, *, worker_id: str) -> None:
    """Mark a worker live now."""
    w = s.worker_registrations.c
    await conn.execute(
        sa.update(s.worker_registrations)
        .where(w.worker_id == worker_id)
        .values(heartbeat_at=sa.func.now(), state=WorkerState.ACTIVE)
    )


async def deregister_worker(conn: AsyncConnection, *, worker_id: str) -> None:
    """Mark a worker stopped (graceful shutdown)."""
    w = s.worker_registrations.c
    await conn.execute(
        sa.update(s.worker_registrations)
        .where(w.worker_id == worker_id)
        .values(state=WorkerState.STOPPED, stopped_at=sa.func.now())
    )


async def live_workers(
    conn: AsyncConnection, *, namespace: str, task_queue: str, stale_after: timedelta
) -> list[tuple[str, list[str], list[str]]]:
    """(worker_id, workflow_types, activity_types) of live workers on a queue."""
    w = s.worker_registrations.c
    rows = await conn.execute(
        sa.select(w.worker_id, w.workflow_types, w.activity_types).where(
            w.namespace == namespace,
            w.task_queue == task_queue,
            w.state == WorkerState.ACTIVE,
            w.heartbeat_at > sa.func.now() - stale_after,
        )
    )
    return [(row.worker_id, list(row.workflow_types), list(row.activity_types)) for row in rows]
