"""Operator metrics: sticky execution (S11), worker sessions per state (W9), backlog and fleet (M8).

The figures follow the reference server's `OperatorMetrics` so the operator API can serve them as
`operator_metrics.sticky_execution` (PROTOCOL.md 11, 15). They are read in one statement, so
every figure describes the same instant: the database's `now()`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import sql
from burrow.store.fleet import BacklogMetrics, RepairMetrics, WorkerFleetMetrics
from burrow.store.models import SessionCounts, WorkerState
from burrow.store.operator import LIVE_AFTER
from burrow.store.sql import jsonb_object, statement

# A worker whose cache holds at least this share of its capacity may soon evict warm runs.
DEFAULT_PRESSURE_RATIO = 0.9


class StickyWorkerMetrics(BaseModel):
    """One worker's sticky cache as it last reported it (S10), for `sticky_execution_workers`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    task_queue: str
    state: WorkerState
    live: bool
    capacity: int
    size: int
    hit_count: int
    miss_count: int
    forced_cold_replay_count: int
    eviction_count: int
    capacity_pressure: bool


class StickyExecutionMetrics(BaseModel):
    """`sticky_execution` of one namespace (S11), plus the caches of its workers.

    A miss is a forced cold replay, as in the reference server: a task claimed without any
    binding (`cold_replay`) was never expected to hit. Rates are over the tasks claimed with a
    binding in the last minute, 0.0 when there were none. The hit rate counts the hits workers
    reported in the last minute (`hit_last_minute`: what their cache counters rose by,
    sticky_reports.py), not the claims expected to hit; a worker that resumed warm without a
    claim (Burrow's eager path) adds to the whole, so the rate never passes 1.0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool
    ttl_seconds: float
    active_sticky_runs: int
    ready_sticky_tasks: int
    leased_sticky_tasks: int
    hit_expected_last_minute: int
    hit_last_minute: int
    miss_last_minute: int
    forced_cold_replay_last_minute: int
    cold_replay_last_minute: int
    hit_rate_last_minute: float
    miss_rate_last_minute: float
    capacity_pressure_tasks: int
    capacity_pressure_workers: int
    # Served beside this section (PROTOCOL.md 15), not inside it.
    measured_at: datetime = Field(exclude=True)
    workers: tuple[StickyWorkerMetrics, ...] = Field(exclude=True)


class WorkerSessionMetrics(BaseModel):
    """`worker_sessions`: the sessions of a namespace per state (W9, PROTOCOL.md 6.4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int = 0
    active: int = 0
    closed: int = 0
    expired: int = 0
    failed: int = 0
    orphaned: int = 0

    @classmethod
    def of(cls, counts: SessionCounts) -> WorkerSessionMetrics:
        """The section from the store's per-state counts."""
        return cls(**{name: getattr(counts, name) for name in cls.model_fields})


class OperatorMetrics(BaseModel):
    """The `operator_metrics` document of one namespace (PROTOCOL.md 15).

    Backlog, workers, sticky execution and worker sessions.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    generated_at: datetime
    backlog: BacklogMetrics = BacklogMetrics()
    repair: RepairMetrics = RepairMetrics()
    workers: WorkerFleetMetrics = WorkerFleetMetrics()
    sticky_execution: StickyExecutionMetrics
    sticky_execution_workers: tuple[StickyWorkerMetrics, ...]
    worker_sessions: WorkerSessionMetrics = WorkerSessionMetrics()

    @classmethod
    def of(
        cls,
        sticky: StickyExecutionMetrics,
        sessions: SessionCounts | None = None,
        *,
        backlog: BacklogMetrics | None = None,
        repair: RepairMetrics | None = None,
        workers: WorkerFleetMetrics | None = None,
    ) -> OperatorMetrics:
        """The document holding `sticky` (and the other sections), generated when measured."""
        return cls(
            generated_at=sticky.measured_at,
            backlog=backlog or BacklogMetrics(),
            repair=repair or RepairMetrics(),
            workers=workers or WorkerFleetMetrics(),
            sticky_execution=sticky,
            sticky_execution_workers=sticky.workers,
            worker_sessions=WorkerSessionMetrics.of(sessions or SessionCounts()),
        )


_WORKER = jsonb_object(
    StickyWorkerMetrics,
    **{name: name for name in StickyWorkerMetrics.model_fields},
)

# Every task count reads the open tasks only, through the partial indexes on ready and leased
# workflow tasks, except the last-minute replay modes: they read closed tasks too, so without an
# index on sticky_claimed_at that count scans the whole workflow_tasks table.
_STICKY_METRICS = statement(f"""
    WITH cache AS (
        SELECT worker_id, task_queue, state,
               heartbeat_at > now() - make_interval(secs => :live_seconds) AS live,
               coalesce((sticky_cache->>'capacity')::int, 0) AS capacity,
               coalesce((sticky_cache->>'size')::int, 0) AS size,
               coalesce((sticky_cache->>'hit_count')::int, 0) AS hit_count,
               coalesce((sticky_cache->>'miss_count')::int, 0) AS miss_count,
               coalesce((sticky_cache->>'forced_cold_replay_count')::int, 0)
                   AS forced_cold_replay_count,
               coalesce((sticky_cache->>'eviction_count')::int, 0) AS eviction_count
        FROM worker_registrations
        -- A registration without a cache may hold JSON null rather than SQL NULL.
        WHERE namespace = :namespace AND state <> 'stopped'
          AND jsonb_typeof(sticky_cache) = 'object'
    ), workers AS (
        SELECT *, capacity > 0
                  AND size >= CAST(:pressure_ratio AS double precision) * capacity
                  AS capacity_pressure
        FROM cache
    ), ready AS (
        SELECT count(*) AS tasks, count(p.worker_id) AS pressure_tasks
        FROM workflow_tasks t
        LEFT JOIN workers p ON p.worker_id = t.sticky_worker_id AND p.capacity_pressure
        WHERE t.state = 'ready' AND t.sticky_worker_id IS NOT NULL
          AND t.namespace = :namespace AND t.sticky_until > now()
    ), modes AS (
        SELECT count(*) FILTER (WHERE sticky_replay_mode = 'sticky_hit_expected') AS hit,
               count(*) FILTER (WHERE sticky_replay_mode = 'forced_cold_replay') AS forced,
               count(*) FILTER (WHERE sticky_replay_mode = 'cold_replay') AS cold
        FROM workflow_tasks
        WHERE namespace = :namespace AND sticky_claimed_at >= now() - interval '1 minute'
    ), reported AS (
        SELECT coalesce(sum(hits), 0)::bigint AS hits FROM sticky_reports
        WHERE namespace = :namespace AND reported_at >= now() - interval '1 minute'
    )
    SELECT now() AS measured_at,
           (SELECT count(*) FROM runs
            WHERE namespace = :namespace AND status = 'running'
              AND sticky_worker_id IS NOT NULL AND sticky_until > now()) AS active_sticky_runs,
           ready.tasks AS ready_sticky_tasks,
           (SELECT count(*) FROM workflow_tasks
            WHERE state = 'leased' AND sticky_worker_id IS NOT NULL
              AND namespace = :namespace) AS leased_sticky_tasks,
           modes.hit, modes.forced, modes.cold, reported.hits AS real_hits,
           ready.pressure_tasks AS capacity_pressure_tasks,
           (SELECT count(*) FROM workers WHERE capacity_pressure) AS capacity_pressure_workers,
           (SELECT coalesce(jsonb_agg({_WORKER} ORDER BY worker_id), '[]')
            FROM workers) AS workers
    FROM ready, modes, reported
""")


def _rate(part: int, whole: int) -> float:
    return 0.0 if whole == 0 else part / whole


async def sticky_metrics(
    conn: AsyncConnection,
    *,
    namespace: str,
    enabled: bool,
    ttl_seconds: float,
    pressure_ratio: float = DEFAULT_PRESSURE_RATIO,
    live_after: timedelta = LIVE_AFTER,
) -> StickyExecutionMetrics:
    """Sticky execution figures of `namespace` now, and its workers' caches (S11).

    `enabled` and `ttl_seconds` are the settings in force, reported as they are. A worker is
    under capacity pressure when its reported cache size reaches `pressure_ratio` of its
    capacity; `live` says whether it heartbeat within `live_after`.
    """
    row = await sql.one(
        conn,
        _STICKY_METRICS,
        {
            "namespace": namespace,
            "pressure_ratio": pressure_ratio,
            "live_seconds": live_after.total_seconds(),
        },
    )
    routed = row.hit + row.forced  # claims that found a binding (S7)
    real = int(row.real_hits)
    return StickyExecutionMetrics(
        enabled=enabled,
        ttl_seconds=ttl_seconds,
        active_sticky_runs=row.active_sticky_runs,
        ready_sticky_tasks=row.ready_sticky_tasks,
        leased_sticky_tasks=row.leased_sticky_tasks,
        hit_expected_last_minute=row.hit,
        hit_last_minute=real,
        miss_last_minute=row.forced,
        forced_cold_replay_last_minute=row.forced,
        cold_replay_last_minute=row.cold,
        hit_rate_last_minute=_rate(real, max(routed, real)),
        miss_rate_last_minute=_rate(row.forced, routed),
        capacity_pressure_tasks=row.capacity_pressure_tasks,
        capacity_pressure_workers=row.capacity_pressure_workers,
        measured_at=row.measured_at,
        workers=tuple(StickyWorkerMetrics.model_validate(w) for w in row.workers),
    )
