"""What every claim shares: the queue filter a poller names and the lease a claim takes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from burrow.store import fragments, sql
from burrow.store.models import Lease, TaskState


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """What a poller may take (M3, M7): namespace, connection, queue, build and types."""

    namespace: str
    queue: str
    types: Sequence[str]
    connection: str = "default"
    build_id: str | None = None


def ready_where(
    table: sa.Table, flt: QueueFilter, type_column: str
) -> list[sa.ColumnElement[bool]]:
    """The WHERE clauses of a ready task of `table` that `flt` lets a poller take."""
    c = table.c
    where = [
        fragments.state_is(c.state, TaskState.READY),
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


def lease_values(worker_id: str, lease: timedelta) -> dict[str, object]:
    """The columns a claim sets to lease a row to `worker_id` for `lease`."""
    return {
        "state": TaskState.LEASED,
        "lease_owner": worker_id,
        "lease_token": str(uuid.uuid4()),
        "lease_expires_at": sa.func.now() + lease,
    }


def lease_of(row: sql.AnyRow) -> Lease:
    """The lease a claim statement returned in `row`."""
    return Lease(
        task_id=row.task_id,
        run_id=row.run_id,
        lease_token=row.lease_token,
        lease_owner=row.lease_owner,
        attempt=row.attempt,
        lease_expires_at=row.lease_expires_at,
    )


def filter_params(flt: QueueFilter) -> dict[str, object]:
    """The parameters a claim statement binds for `flt`."""
    return {
        "namespace": flt.namespace,
        "queue": flt.queue,
        "connection": flt.connection,
        "types": list(flt.types),
        "build_id": flt.build_id,
    }


def claim_params(
    flt: QueueFilter, worker_id: str, lease: timedelta, *, limit: int
) -> dict[str, object]:
    """The parameters of a claim of up to `limit` tasks by `worker_id`, leased for `lease`."""
    return {
        **filter_params(flt),
        "worker_id": worker_id,
        "lease_seconds": lease.total_seconds(),
        "limit": limit,
    }
