"""Prometheus exposition of the operator figures (SPEC M8, M9) at `GET /metrics`.

Also at the reference server's `GET /api/system/prometheus-metrics`.

Read from Postgres at each scrape, for every namespace the server serves, so any server
replica reports the same figures; the held-poll figures (`burrow_task_queue_polls_*`,
`burrow_held_poll_capacity`) are the scraped process's own. Operator or admin role (a
scraper's bearer token); no control-plane header needed.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from burrow.server import operator_metrics
from burrow.server.auth import Role, authorize
from burrow.server.deps import State
from burrow.store.fleet import TaskQueueView
from burrow.store.metrics import OperatorMetrics
from burrow.supervision import Loops

router = APIRouter()
_READERS = frozenset({Role.OPERATOR, Role.ADMIN})


class _Gauges:
    """One scrape's gauges, on a registry of their own (nothing is kept between scrapes)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        task = ["namespace", "kind"]
        queue = ["namespace", "queue", "kind"]
        self.ready = self._gauge("burrow_tasks_ready", "Ready tasks that are due.", task)
        self.delayed = self._gauge("burrow_tasks_delayed", "Ready tasks not yet due.", task)
        self.leased = self._gauge("burrow_tasks_leased", "Leased tasks.", task)
        self.stale = self._gauge(
            "burrow_tasks_stale_leases", "Leased tasks whose lease ran out (not repaired).", task
        )
        self.blocked = self._gauge(
            "burrow_tasks_compatibility_blocked",
            "Due ready tasks no live worker of their connection and queue can take"
            " (type or build).",
            task,
        )
        self.unhealthy = self._gauge(
            "burrow_tasks_unhealthy",
            "Open tasks on a later attempt after a recorded failure (failing repeatedly).",
            task,
        )
        self.oldest = self._gauge(
            "burrow_oldest_ready_task_age_seconds", "Age of the oldest due ready task.", task
        )
        self.queue_ready = self._gauge(
            "burrow_task_queue_ready", "Due ready tasks per task queue.", queue
        )
        self.queue_oldest = self._gauge(
            "burrow_task_queue_oldest_ready_age_seconds",
            "Age of the oldest due ready task per task queue.",
            queue,
        )
        self.queue_unhealthy = self._gauge(
            "burrow_task_queue_unhealthy",
            "Open tasks on a later attempt after a recorded failure, per task queue.",
            queue,
        )
        scope = ["namespace", "queue"]
        self.slots_in_use = self._gauge(
            "burrow_task_queue_slots_in_use",
            "Leased workflow and activity tasks per task queue.",
            scope,
        )
        self.slot_capacity = self._gauge(
            "burrow_task_queue_slot_capacity",
            "Concurrency the live workers of a task queue declared.",
            scope,
        )
        self.polls_held = self._gauge(
            "burrow_task_queue_polls_held", "Long polls this process holds per task queue.", scope
        )
        self.polls_refused = Counter(
            "burrow_task_queue_polls_refused",
            "Polls this process refused with 429 long_poll_capacity_exhausted since it started.",
            scope,
            registry=self.registry,
        )
        self.poll_capacity = self._gauge(
            "burrow_held_poll_capacity",
            "Long polls this process holds at most, every queue together.",
            [],
        )
        self.queue_workers = self._gauge(
            "burrow_task_queue_live_workers", "Live workers per task queue.", ["namespace", "queue"]
        )
        self.workers = self._gauge(
            "burrow_workers", "Registered workers by liveness.", ["namespace", "state"]
        )
        self.sessions = self._gauge(
            "burrow_worker_sessions", "Worker sessions per state.", ["namespace", "state"]
        )
        self.sticky_runs = self._gauge(
            "burrow_sticky_active_runs", "Running runs bound to a worker.", ["namespace"]
        )
        self.sticky_hit_rate = self._gauge(
            "burrow_sticky_hit_rate_last_minute",
            "Cache hits workers reported over claims that found a binding, last minute (max 1).",
            ["namespace"],
        )
        self.matching = self._gauge(
            "burrow_matching_processes",
            "Live `burrow matching` processes connected to the database.",
            [],
        )
        self.queue_wake = self._gauge(
            "burrow_matching_queue_wake_enabled",
            "1 when workers re-poll and sweep themselves; 0 in the dedicated matching shape.",
            [],
        )
        self.isolated = self._gauge(
            "burrow_repair_rows_isolated",
            "Rows the repair pass failed to repair, held out of it until their retry time.",
            ["namespace"],
        )
        self.loops = _LoopMetrics(self.registry)

    def _gauge(self, name: str, text: str, labels: list[str]) -> Gauge:
        return Gauge(name, text, labels, registry=self.registry)

    def add(self, namespace: str, metrics: OperatorMetrics, queues: list[TaskQueueView]) -> None:
        for kind in metrics.backlog.by_kind:
            labels = (namespace, kind.kind)
            self.ready.labels(*labels).set(kind.ready)
            self.delayed.labels(*labels).set(kind.delayed)
            self.leased.labels(*labels).set(kind.leased)
            self.stale.labels(*labels).set(kind.stale_leases)
            self.blocked.labels(*labels).set(kind.compatibility_blocked)
            self.unhealthy.labels(*labels).set(kind.unhealthy)
            self.oldest.labels(*labels).set(kind.oldest_ready_age_seconds or 0.0)
        for view in queues:
            scope = (namespace, view.name)
            self.queue_workers.labels(*scope).set(view.workers.active_workers)
            throttling = view.throttling
            self.slots_in_use.labels(*scope).set(throttling.slots_in_use)
            self.slot_capacity.labels(*scope).set(throttling.slot_capacity)
            self.polls_held.labels(*scope).set(throttling.polls_held or 0)
            self.polls_refused.labels(*scope).inc(throttling.polls_refused or 0)
            for kind in view.backlog.by_kind:
                per_queue = (namespace, view.name, kind.kind)
                self.queue_ready.labels(*per_queue).set(kind.ready)
                self.queue_unhealthy.labels(*per_queue).set(kind.unhealthy)
                self.queue_oldest.labels(*per_queue).set(kind.oldest_ready_age_seconds or 0.0)
        workers = metrics.workers
        self.workers.labels(namespace, "live").set(workers.active_workers)
        self.workers.labels(namespace, "stale").set(workers.stale_workers)
        self.workers.labels(namespace, "draining").set(workers.draining_workers)
        for state, count in metrics.worker_sessions.model_dump().items():
            if state != "total":
                self.sessions.labels(namespace, state).set(count)
        self.matching.set(metrics.repair.matching_processes)
        self.sticky_runs.labels(namespace).set(metrics.sticky_execution.active_sticky_runs)
        self.sticky_hit_rate.labels(namespace).set(metrics.sticky_execution.hit_rate_last_minute)


class _LoopMetrics:
    """This server's supervised loops (issue 25 item 1): restarts, failures, failing now."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["loop"]
        self.restarts = Counter(
            "burrow_loop_restarts",
            "Restarts of a background loop after it raised.",
            labels,
            registry=registry,
        )
        self.failures = Counter(
            "burrow_loop_failures", "Failures of a background loop.", labels, registry=registry
        )
        self.isolated = Counter(
            "burrow_loop_repair_rows_isolated",
            "Rows this process's repair passes isolated.",
            labels,
            registry=registry,
        )
        self.failing = Gauge(
            "burrow_loop_consecutive_failures",
            "Failures of a background loop since it last succeeded (above 0: failing).",
            labels,
            registry=registry,
        )

    def add(self, loops: Loops) -> None:
        for loop in loops:
            self.restarts.labels(loop.name).inc(loop.restarts)
            self.failures.labels(loop.name).inc(loop.failures)
            self.isolated.labels(loop.name).inc(loop.rows_isolated)
            self.failing.labels(loop.name).set(loop.consecutive_failures)


@router.get("/metrics")
@router.get("/api/system/prometheus-metrics")
async def prometheus_metrics(request: Request, state: State) -> Response:
    """The text exposition format, one sample set per served namespace."""
    authorize(request, state.settings, _READERS)
    gauges = _Gauges()
    live_after = timedelta(seconds=state.runtime.sticky.owner_stale_seconds)
    for namespace in sorted(state.known.names or state.settings.namespaces):
        metrics = await operator_metrics.snapshot(state.store, state.runtime, namespace)
        queues = await state.store.task_queues(namespace=namespace, live_after=live_after)
        queues = operator_metrics.with_polls(queues, state.held, namespace)
        gauges.add(namespace, metrics, queues)
        gauges.isolated.labels(namespace).set(
            await state.store.repair_failures(namespace=namespace)
        )
    gauges.queue_wake.set(1 if state.runtime.wakes.worker_repoll else 0)
    gauges.poll_capacity.set(state.held.limit)
    gauges.loops.add(state.loops)
    return Response(generate_latest(gauges.registry), media_type=CONTENT_TYPE_LATEST)
