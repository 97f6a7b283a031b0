"""Workers' sticky cache figures as they report them, stored alike for every worker (S10, S11).

Burrow's own workers report their whole cache on each heartbeat; SDK workers over HTTP report
some of it on registration, heartbeat and workflow-task completion (PROTOCOL.md 11). Each
report is merged into the registration's `sticky_cache` (a field not reported keeps its last
value), and what its counters rose by since the last report is kept as a `sticky_reports` row
with the database's clock, so the operator metrics count the hits workers really had in the
last minute (S11), not the hits the server expected.

Counters are cumulative per worker process: one lower than its stored value means the process
restarted under the same worker id, and the reported value itself is what it rose by.
"""

from __future__ import annotations

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import schema as s
from burrow.store.models import RunStatus, StickyCacheReport, TaskState, WorkerState

# Reports older than this are pruned; the metrics read only the last minute.
KEPT_FOR = "5 minutes"
PRUNED_AT_ONCE = 1000

COUNTERS = ("hit_count", "miss_count", "forced_cold_replay_count", "eviction_count")


class StickyFigures(BaseModel):
    """Part or all of a worker's cache figures: a field left None was not reported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool | None = None
    capacity: int | None = Field(default=None, ge=0)
    size: int | None = Field(default=None, ge=0)
    hit_count: int | None = Field(default=None, ge=0)
    miss_count: int | None = Field(default=None, ge=0)
    forced_cold_replay_count: int | None = Field(default=None, ge=0)
    eviction_count: int | None = Field(default=None, ge=0)
    approximate_bytes: int | None = Field(default=None, ge=0)
    max_bytes: int | None = Field(default=None, ge=0)

    @classmethod
    def of(cls, report: StickyCacheReport) -> StickyFigures:
        """Every figure of a whole report."""
        return cls(**report.model_dump())

    def merged_into(self, stored: StickyCacheReport | None) -> StickyCacheReport:
        """`stored` with the reported figures replacing its own."""
        base = stored or StickyCacheReport(enabled=bool(self.enabled), capacity=0)
        return base.model_copy(update=self.model_dump(exclude_none=True))


def _rise(new: int, old: int) -> int:
    return new - old if new >= old else new


async def stored(conn: AsyncConnection, *, worker_id: str) -> StickyCacheReport | None:
    """The registration's figures as last stored, None without a cache (or registration)."""
    w = s.worker_registrations.c
    value = (
        await conn.execute(sa.select(w.sticky_cache).where(w.worker_id == worker_id))
    ).scalar_one_or_none()
    return StickyCacheReport.model_validate(value) if isinstance(value, dict) else None


async def record(
    conn: AsyncConnection, *, worker_id: str, figures: StickyFigures, heartbeat: bool = False
) -> StickyCacheReport | None:
    """Merge a worker's reported figures into its registration and keep what its counters rose by.

    With `heartbeat`, the worker is marked live now too. A stopped or unknown worker is left
    alone (None). Returns the figures now stored.
    """
    w = s.worker_registrations.c
    row = (
        await conn.execute(
            sa.select(w.namespace, w.sticky_cache)
            .where(w.worker_id == worker_id, w.state != WorkerState.STOPPED)
            .with_for_update()
        )
    ).first()
    if row is None:
        return None
    before = (
        StickyCacheReport.model_validate(row.sticky_cache)
        if isinstance(row.sticky_cache, dict)
        else None
    )
    after = figures.merged_into(before)
    values: dict[str, object] = {
        "sticky_cache": after.model_dump(),
        "sticky_cache_enabled": after.enabled,
        "sticky_cache_capacity": after.capacity,
    }
    if heartbeat:
        values["heartbeat_at"] = sa.func.now()
    await conn.execute(
        sa.update(s.worker_registrations).where(w.worker_id == worker_id).values(**values)
    )
    old = before or StickyCacheReport(enabled=after.enabled, capacity=after.capacity)
    rises = [_rise(getattr(after, name), getattr(old, name)) for name in COUNTERS]
    if any(rises):
        await conn.execute(
            sa.insert(s.sticky_reports).values(
                namespace=row.namespace,
                worker_id=worker_id,
                hits=rises[0],
                misses=rises[1],
                forced_cold_replays=rises[2],
                evictions=rises[3],
            )
        )
        await _prune(conn)
    return after


async def _prune(conn: AsyncConnection) -> None:
    """Delete reports past KEPT_FOR, of every worker (a stopped one reports no more).

    Rows another transaction is deleting are skipped, so reporters never wait on each other.
    """
    r = s.sticky_reports.c
    old = (
        sa.select(r.report_id)
        .where(r.reported_at < sa.func.now() - sa.text(f"interval '{KEPT_FOR}'"))
        .limit(PRUNED_AT_ONCE)
        .with_for_update(skip_locked=True)
    )
    await conn.execute(sa.delete(s.sticky_reports).where(r.report_id.in_(old.scalar_subquery())))


async def end_bindings(conn: AsyncConnection, *, worker_id: str) -> int:
    """End the sticky bindings a worker holds: it registered again, so its cache is gone.

    The binding is kept but expired now (PROTOCOL.md 11): the next claim of a bound task, by
    this worker or another, reports `forced_cold_replay` (S7). Returns how many open workflow
    tasks were bound.
    """
    r, t = s.runs.c, s.workflow_tasks.c
    now = sa.func.now()
    await conn.execute(
        sa.update(s.runs)
        .where(r.status == RunStatus.RUNNING, r.sticky_worker_id == worker_id, r.sticky_until > now)
        .values(sticky_until=now)
    )
    result = await conn.execute(
        sa.update(s.workflow_tasks)
        .where(
            t.sticky_worker_id == worker_id,
            t.sticky_until > now,
            t.state.in_((TaskState.READY, TaskState.LEASED)),
        )
        .values(sticky_until=now)
    )
    return int(result.rowcount or 0)
