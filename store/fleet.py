"""Backlog, task queues and the worker fleet, as operators see them (SPEC M2, M8, M9).

Read-only. Backlog figures count open tasks only (through the open-task indexes); a "stale lease"
is a leased task whose lease already ran out and that the repair pass has not yet returned to
ready: a count that keeps growing means nobody sweeps (no worker repair, no matching role).
An "unhealthy" task is an open workflow or activity task whose earlier attempt failed (see
`UNHEALTHY`): work that keeps coming back rather than finishing.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import sql
from burrow.store.models import WorkerState
from burrow.store.sql import statement

KINDS = ("workflow", "activity", "query")
# M8 health diagnostics: an open (ready or leased) task on its second or later attempt with the
# previous attempt's failure recorded. Every way an attempt ends without finishing (the worker
# reported a failure, its lease ran out, its owner deregistered) bumps `attempt` and sets
# `last_failure` (fragments.return_to_ready); a workflow task's completion clears `last_failure`
# and the next one starts at attempt 1. Query tasks have no attempts: never unhealthy.
UNHEALTHY = "attempt > 1 AND last_failure IS NOT NULL"
# `burrow matching` names its connections so; each live process has at least one open.
MATCHING_APPLICATION_PREFIX = "burrow-matching:"


class KindBacklog(BaseModel):
    """The open tasks of one task kind (on one queue, or a whole namespace)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    ready: int = 0
    """Ready and due: claimable now."""
    delayed: int = 0
    """Ready but not yet due (a retry's backoff)."""
    leased: int = 0
    stale_leases: int = 0
    compatibility_blocked: int = 0
    """Ready and due, but no live worker serving its connection and queue declares its type
    and build (M9)."""
    unhealthy: int = 0
    """Open (ready, delayed or leased) on attempt 2 or later after a recorded failure (M8)."""
    oldest_ready_at: datetime | None = None
    oldest_ready_age_seconds: float | None = None


class BacklogMetrics(BaseModel):
    """`backlog` of a namespace: open tasks of every kind, and how long the oldest waited (M9)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runnable_tasks: int = 0
    delayed_tasks: int = 0
    leased_tasks: int = 0
    stale_leases: int = 0
    compatibility_blocked_tasks: int = 0
    unhealthy_tasks: int = 0
    """Open tasks whose previous attempt failed (`UNHEALTHY`, M8), every kind."""
    oldest_ready_at: datetime | None = None
    oldest_ready_age_seconds: float | None = None
    by_kind: tuple[KindBacklog, ...] = ()

    @classmethod
    def of(cls, kinds: list[KindBacklog]) -> BacklogMetrics:
        """The totals over `kinds` (one entry per kind)."""
        waiting = [k for k in kinds if k.oldest_ready_at is not None]
        oldest = min(waiting, key=lambda k: k.oldest_ready_at or datetime.max, default=None)
        return cls(
            runnable_tasks=sum(k.ready for k in kinds),
            delayed_tasks=sum(k.delayed for k in kinds),
            leased_tasks=sum(k.leased for k in kinds),
            stale_leases=sum(k.stale_leases for k in kinds),
            compatibility_blocked_tasks=sum(k.compatibility_blocked for k in kinds),
            unhealthy_tasks=sum(k.unhealthy for k in kinds),
            oldest_ready_at=None if oldest is None else oldest.oldest_ready_at,
            oldest_ready_age_seconds=None if oldest is None else oldest.oldest_ready_age_seconds,
            by_kind=tuple(kinds),
        )


class FleetWorker(BaseModel):
    """One registered worker (not stopped) and whether it is live."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    worker_id: str
    task_queue: str
    connection: str
    build_id: str | None
    runtime: str
    state: WorkerState
    live: bool
    registered_at: datetime
    heartbeat_at: datetime
    workflow_types: tuple[str, ...]
    activity_types: tuple[str, ...]
    capabilities: tuple[str, ...]
    concurrency: int


class WorkerFleetMetrics(BaseModel):
    """`workers`: the fleet of a namespace (M8): live, stale and draining pollers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    active_workers: int = 0
    """Active and heard from within the liveness window."""
    stale_workers: int = 0
    """Registered as active but silent: probably gone (their bindings and sessions end)."""
    draining_workers: int = 0
    active_worker_scopes: int = 0
    """Task queues with at least one live worker."""
    slot_capacity: int = 0
    """Tasks the live active workers run at once: the sum of the `concurrency` each declared
    at registration (an HTTP worker's max workflow plus max activity tasks; a native worker's
    workflow plus activity slots for the kinds it serves)."""
    fleet: tuple[FleetWorker, ...] = ()

    @classmethod
    def of(cls, fleet: list[FleetWorker]) -> WorkerFleetMetrics:
        """The counts over `fleet`."""
        active = [w for w in fleet if w.state == WorkerState.ACTIVE]
        return cls(
            active_workers=sum(w.live for w in active),
            stale_workers=sum(not w.live for w in active),
            draining_workers=sum(w.state == WorkerState.DRAINING for w in fleet),
            active_worker_scopes=len({(w.connection, w.task_queue) for w in active if w.live}),
            slot_capacity=sum(w.concurrency for w in active if w.live),
            fleet=tuple(fleet),
        )


class RepairMetrics(BaseModel):
    """`repair`: who sweeps this database right now (SPEC M4c)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    matching_processes: int = 0
    """Live `burrow matching` processes connected to the database (any namespace)."""


class QueueThrottling(BaseModel):
    """How close one task queue is to its limits (M8 "throttling").

    Slots come from the store: `slots_in_use` is the queue's leased workflow and activity tasks
    (Burrow does not know which worker's slot each occupies, only that a lease holds one) and
    `slot_capacity` the live workers' declared concurrency. The poll figures are the serving
    process's own held-poll limiter (PROTOCOL.md 2.4), None where no server answers (the CLI):
    polls of this queue held now, the process-wide cap every queue shares, and the polls of this
    queue refused with 429 `long_poll_capacity_exhausted` since the process started.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    slots_in_use: int = 0
    slot_capacity: int = 0
    polls_held: int | None = None
    held_poll_capacity: int | None = None
    polls_refused: int | None = None


class TaskQueueView(BaseModel):
    """One task queue (M8): backlog per kind, the workers polling it, and its throttling."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    backlog: BacklogMetrics
    workers: WorkerFleetMetrics
    throttling: QueueThrottling = QueueThrottling()


_BACKLOG_SQL = """
    SELECT '{kind}' AS kind, queue,
           count(*) FILTER (WHERE state = 'ready' AND available_at <= now()) AS ready,
           count(*) FILTER (WHERE state = 'ready' AND available_at > now()) AS delayed,
           count(*) FILTER (WHERE state = 'leased') AS leased,
           count(*) FILTER (WHERE state = 'leased' AND lease_expires_at < now()) AS stale_leases,
           count(*) FILTER (WHERE {unhealthy}) AS unhealthy,
           min(available_at) FILTER (WHERE state = 'ready' AND available_at <= now())
               AS oldest_ready_at,
           now() AS now
    FROM {table}
    WHERE state IN ('ready', 'leased') AND namespace = :namespace
      AND (CAST(:queue AS text) IS NULL OR queue = :queue)
    GROUP BY queue
"""
_BACKLOG = statement(
    " UNION ALL ".join(
        _BACKLOG_SQL.format(
            kind=kind, table=f"{kind}_tasks", unhealthy="false" if kind == "query" else UNHEALTHY
        )
        for kind in KINDS
    )
)
# M9: ready work no live worker can take. Grouped first, so each (connection, queue, type, build)
# costs one probe of the registrations however deep its backlog; the rule is the claims'
# (store/claims.py): a worker serves one connection (M7), a task without a build id goes to any
# build, one with a build id only to that build.
_BLOCKED_SQL = """
    SELECT '{kind}' AS kind, namespace, connection, queue, {type} AS type, build_id,
           count(*) AS n
    FROM {kind}_tasks
    WHERE state = 'ready' AND available_at <= now()
      AND (CAST(:namespace AS text) IS NULL OR namespace = :namespace)
      AND (CAST(:queue AS text) IS NULL OR queue = :queue)
    GROUP BY namespace, connection, queue, {type}, build_id
"""
_BLOCKED = statement(
    "WITH ready AS ("
    + " UNION ALL ".join(
        _BLOCKED_SQL.format(kind=kind, type=f"{kind}_type") for kind in ("workflow", "activity")
    )
    + """)
    SELECT r.kind, r.namespace, r.connection, r.queue, sum(r.n) AS blocked FROM ready r
    WHERE NOT EXISTS (
        SELECT 1 FROM worker_registrations w
        WHERE w.namespace = r.namespace AND w.task_queue = r.queue
          AND w.connection = r.connection AND w.state = 'active'
          AND w.heartbeat_at > now() - make_interval(secs => :live_seconds)
          AND (r.build_id IS NULL OR w.build_id = r.build_id)
          AND r.type = ANY(CASE r.kind WHEN 'workflow' THEN w.workflow_types
                                       ELSE w.activity_types END)
    )
    GROUP BY r.kind, r.namespace, r.connection, r.queue"""
)
_FLEET = statement("""
    SELECT worker_id, task_queue, connection, build_id, runtime, state,
           heartbeat_at > now() - make_interval(secs => :live_seconds) AS live,
           registered_at, heartbeat_at, workflow_types, activity_types, capabilities, concurrency
    FROM worker_registrations
    WHERE namespace = :namespace AND state <> 'stopped'
      AND (CAST(:queue AS text) IS NULL OR task_queue = :queue)
    ORDER BY task_queue, worker_id
""")


_MATCHING_PROCESSES = statement("""
    SELECT count(DISTINCT application_name) FROM pg_stat_activity
    WHERE datname = current_database() AND starts_with(application_name, :prefix)
""")


async def repair_metrics(conn: AsyncConnection) -> RepairMetrics:
    """The live matching processes, counted by their connections' application name."""
    found = await sql.scalar_one(conn, _MATCHING_PROCESSES, {"prefix": MATCHING_APPLICATION_PREFIX})
    return RepairMetrics(matching_processes=found)


async def blocked_counts(
    conn: AsyncConnection,
    *,
    namespace: str | None,
    live_after: timedelta,
    queue: str | None = None,
) -> dict[tuple[str, str, str, str], int]:
    """Compatibility-blocked ready tasks (M9) by (namespace, connection, queue, kind).

    Blocked: due and ready, but no live worker serving its connection and queue declares its
    type (and build, when pinned); such work waits until one registers. None: every namespace.
    """
    rows = await sql.fetch(
        conn,
        _BLOCKED,
        {"namespace": namespace, "queue": queue, "live_seconds": live_after.total_seconds()},
    )
    return {(r.namespace, r.connection, r.queue, r.kind): int(r.blocked) for r in rows}


async def queue_backlogs(
    conn: AsyncConnection, *, namespace: str, live_after: timedelta, queue: str | None = None
) -> dict[str, list[KindBacklog]]:
    """Open tasks per queue and kind (every kind listed for each queue)."""
    params = {"namespace": namespace, "queue": queue}
    rows = await sql.fetch(conn, _BACKLOG, params)
    blocked: dict[tuple[str, str], int] = defaultdict(int)
    found_blocked = await blocked_counts(
        conn, namespace=namespace, live_after=live_after, queue=queue
    )
    for (_, _, name, kind), count in found_blocked.items():
        blocked[name, kind] += count  # every connection of the queue
    found: dict[str, dict[str, KindBacklog]] = defaultdict(dict)
    for row in rows:
        age = None if row.oldest_ready_at is None else row.now - row.oldest_ready_at
        found[row.queue][row.kind] = KindBacklog(
            kind=row.kind,
            ready=row.ready,
            delayed=row.delayed,
            leased=row.leased,
            stale_leases=row.stale_leases,
            compatibility_blocked=blocked.get((row.queue, row.kind), 0),
            unhealthy=row.unhealthy,
            oldest_ready_at=row.oldest_ready_at,
            oldest_ready_age_seconds=None if age is None else age.total_seconds(),
        )
    return {
        name: [kinds.get(kind, KindBacklog(kind=kind)) for kind in KINDS]
        for name, kinds in found.items()
    }


def merge_kinds(per_queue: list[list[KindBacklog]]) -> list[KindBacklog]:
    """Per-kind totals over several queues; the oldest ready task is the oldest of any queue."""
    merged = []
    for index, kind in enumerate(KINDS):
        total = BacklogMetrics.of([kinds[index] for kinds in per_queue])
        merged.append(
            KindBacklog(
                kind=kind,
                ready=total.runnable_tasks,
                delayed=total.delayed_tasks,
                leased=total.leased_tasks,
                stale_leases=total.stale_leases,
                compatibility_blocked=total.compatibility_blocked_tasks,
                unhealthy=total.unhealthy_tasks,
                oldest_ready_at=total.oldest_ready_at,
                oldest_ready_age_seconds=total.oldest_ready_age_seconds,
            )
        )
    return merged


async def namespace_backlog(
    conn: AsyncConnection, *, namespace: str, live_after: timedelta
) -> BacklogMetrics:
    """The backlog of a whole namespace, per kind and in total."""
    backlogs = await queue_backlogs(conn, namespace=namespace, live_after=live_after)
    per_queue = list(backlogs.values())
    return BacklogMetrics.of(merge_kinds(per_queue))


async def fleet(
    conn: AsyncConnection, *, namespace: str, live_after: timedelta, queue: str | None = None
) -> list[FleetWorker]:
    """The namespace's registered workers that have not stopped (of one queue, if given)."""
    rows = await sql.fetch(
        conn,
        _FLEET,
        {"namespace": namespace, "live_seconds": live_after.total_seconds(), "queue": queue},
    )
    return [FleetWorker.model_validate(dict(row)) for row in rows]


async def task_queues(
    conn: AsyncConnection, *, namespace: str, live_after: timedelta, queue: str | None = None
) -> list[TaskQueueView]:
    """Every queue with open tasks or registered workers (or just `queue`), by name."""
    backlogs = await queue_backlogs(conn, namespace=namespace, live_after=live_after, queue=queue)
    workers = await fleet(conn, namespace=namespace, live_after=live_after, queue=queue)
    by_queue: dict[str, list[FleetWorker]] = defaultdict(list)
    for worker in workers:
        by_queue[worker.task_queue].append(worker)
    names = sorted(set(backlogs) | set(by_queue))
    views = []
    for name in names:
        backlog = BacklogMetrics.of(backlogs.get(name) or [KindBacklog(kind=k) for k in KINDS])
        polling = WorkerFleetMetrics.of(by_queue.get(name, []))
        in_use = sum(k.leased for k in backlog.by_kind if k.kind != "query")
        throttling = QueueThrottling(slots_in_use=in_use, slot_capacity=polling.slot_capacity)
        views.append(
            TaskQueueView(name=name, backlog=backlog, workers=polling, throttling=throttling)
        )
    return views
