"""The Store's operator plane: repair, metrics, worker sessions and the HTTP server's reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Literal

from burrow.protocol.list_query_types import ListQuery
from burrow.protocol.shapes import SessionSpec
from burrow.store import (
    children,
    cooperative,
    fleet,
    fleet_details,
    history,
    isolation,
    metrics,
    operator,
    repair,
    rollouts,
    server_queries,
    session_views,
    sessions,
    visibility_sql,
    workflow_commands,
    workflow_views,
)
from burrow.store.facade import Facade
from burrow.store.models import (
    ChildInfo,
    Fence,
    JsonDict,
    SessionAdmission,
    SessionCounts,
    SessionState,
    SweepResult,
    WorkerSessionInfo,
)


class OperatorPlane(Facade):
    """What the repair loop, operators and the HTTP server call: each method one transaction."""

    async def sweep(
        self,
        *,
        republish_after: timedelta = repair.DEFAULT_REPUBLISH_AFTER,
        owner_stale: timedelta = repair.DEFAULT_OWNER_STALE,
    ) -> SweepResult:
        """One repair pass; `owner_stale` as in the claims' sticky rules (S5c)."""
        return await self.transactions.run(
            lambda txn: repair.sweep(txn, republish_after=republish_after, owner_stale=owner_stale)
        )

    async def sweep_due(self) -> SweepResult:
        """The time-driven steps of a pass alone: timers, deadlines, schedules."""
        return await self.transactions.run(repair.sweep_due)

    async def repair_failures(self, *, namespace: str) -> int:
        """How many rows of the namespace the repair pass isolated (issue 25 item 1)."""
        return await self.transactions.statement(
            lambda txn: isolation.count_isolated(txn.conn, namespace=namespace)
        )

    async def queue_stats(
        self, *, namespace: str | None = None, live_after: timedelta = operator.LIVE_AFTER
    ) -> list[operator.QueueStats]:
        """Backlog per queue and task kind, for operators (M8, M9)."""
        async with self.transactions.begin() as conn:
            return await operator.queue_stats(conn, namespace=namespace, live_after=live_after)

    async def operator_metrics(
        self,
        *,
        namespace: str,
        sticky_enabled: bool,
        sticky_ttl_seconds: float,
        pressure_ratio: float = metrics.DEFAULT_PRESSURE_RATIO,
        live_after: timedelta = operator.LIVE_AFTER,
    ) -> metrics.OperatorMetrics:
        """The operator metrics document of a namespace.

        Backlog and fleet (M8), sticky execution (S11) and sessions per state (W9).

        `live_after`: a worker heard from within it is live (pass the claims' owner staleness
        so "live" means what it means to a claim, S5c).
        """
        async with self.transactions.begin() as conn:
            counts = await session_views.session_counts(conn, namespace=namespace)
            backlog = await fleet.namespace_backlog(
                conn, namespace=namespace, live_after=live_after
            )
            repairing = await fleet.repair_metrics(conn)
            registered = await fleet.fleet(conn, namespace=namespace, live_after=live_after)
            sticky = await metrics.sticky_metrics(
                conn,
                namespace=namespace,
                enabled=sticky_enabled,
                ttl_seconds=sticky_ttl_seconds,
                pressure_ratio=pressure_ratio,
                live_after=live_after,
            )
        return metrics.OperatorMetrics.of(
            sticky,
            counts,
            backlog=backlog,
            repair=repairing,
            workers=fleet.WorkerFleetMetrics.of(registered),
        )

    async def task_queues(
        self, *, namespace: str, live_after: timedelta, queue: str | None = None
    ) -> list[fleet.TaskQueueView]:
        """Task queues with their backlog per kind and their workers (M8), or just `queue`."""
        async with self.transactions.begin() as conn:
            return await fleet.task_queues(
                conn, namespace=namespace, live_after=live_after, queue=queue
            )

    async def worker_fleet(
        self, *, namespace: str, live_after: timedelta
    ) -> fleet.WorkerFleetMetrics:
        """The namespace's registered workers that have not stopped, with counts (M8)."""
        async with self.transactions.begin() as conn:
            workers = await fleet.fleet(conn, namespace=namespace, live_after=live_after)
        return fleet.WorkerFleetMetrics.of(workers)

    async def registered_workers(
        self,
        *,
        namespace: str,
        stale_after: timedelta,
        task_queue: str | None = None,
        worker_id: str | None = None,
    ) -> list[fleet_details.RegisteredWorker]:
        """The namespace's workers that have not stopped (of one queue, or one id) (M8)."""
        async with self.transactions.begin() as conn:
            return await fleet_details.registered_workers(
                conn,
                namespace=namespace,
                stale_after=stale_after,
                task_queue=task_queue,
                worker_id=worker_id,
            )

    async def queue_detail(
        self,
        *,
        namespace: str,
        queue: str,
        overdue_after: timedelta = repair.DEFAULT_REPUBLISH_AFTER,
    ) -> fleet_details.QueueDetail:
        """One queue's open-task counts, oldest ready task and current leases (M8)."""
        async with self.transactions.begin() as conn:
            return await fleet_details.queue_detail(
                conn, namespace=namespace, queue=queue, overdue_after=overdue_after
            )

    async def build_cohorts(
        self, *, namespace: str, task_queue: str, stale_after: timedelta
    ) -> tuple[list[rollouts.CohortWorker], dict[str, rollouts.RolloutState]]:
        """The queue's registered workers and its cohorts' recorded drain intents (M7, M8)."""
        async with self.transactions.begin() as conn:
            found = await rollouts.cohort_workers(
                conn, namespace=namespace, task_queue=task_queue, stale_after=stale_after
            )
            return found, await rollouts.rollouts(conn, namespace=namespace, task_queue=task_queue)

    async def set_build_drain(
        self, *, namespace: str, task_queue: str, build_id: str | None, draining: bool
    ) -> rollouts.RolloutState:
        """Drain or resume a build-id cohort of a queue (store/rollouts.py)."""
        return await self.transactions.run(
            lambda txn: rollouts.set_drain_intent(
                txn,
                namespace=namespace,
                task_queue=task_queue,
                build_id=build_id,
                draining=draining,
            )
        )

    async def promote_build(
        self, *, namespace: str, task_queue: str, build_id: str | None, live_after: timedelta
    ) -> rollouts.RolloutState | rollouts.PromotionRefused:
        """Select a build-id cohort for fresh starts on a queue, or say why not (rollouts.py)."""
        return await self.transactions.run(
            lambda txn: rollouts.promote(
                txn,
                namespace=namespace,
                task_queue=task_queue,
                build_id=build_id,
                live_after=live_after,
            )
        )

    async def repair_candidates(self) -> repair.RepairCandidates:
        """What the next repair pass would act on, every namespace."""
        async with self.transactions.begin() as conn:
            return await repair.repair_candidates(conn)

    async def expired_activity_executions(self, *, namespace: str, limit: int) -> list[str]:
        """Open activity executions of the namespace past a timeout (at most `limit`)."""
        async with self.transactions.begin() as conn:
            return await repair.expired_activity_executions(conn, namespace=namespace, limit=limit)

    async def time_out_activity_executions(
        self, *, namespace: str, execution_ids: Sequence[str]
    ) -> list[repair.ActivityTimeoutOutcome]:
        """Enforce the passed timeouts of the named executions (M8)."""
        return await self.transactions.run(
            lambda txn: repair.time_out_executions(
                txn, namespace=namespace, execution_ids=execution_ids
            )
        )

    # -- worker sessions (W2, W5, W9) -------------------------------------------------------------

    async def create_worker_session(
        self,
        *,
        worker_id: str,
        namespace: str,
        options: SessionSpec,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> SessionAdmission:
        """Create a session before polling, or reuse or reacquire it (W5); refusals are typed."""
        return await self.transactions.run(
            lambda txn: sessions.create_session(
                txn.conn,
                worker_id=worker_id,
                namespace=namespace,
                options=options,
                owner_stale=owner_stale,
            )
        )

    async def heartbeat_worker_session(
        self,
        *,
        worker_id: str,
        namespace: str,
        session_id: str,
        lease_seconds: int | None = None,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> SessionAdmission:
        """Renew a session's lease for its owner (W1), for `lease_seconds` if given.

        Raises:
            ValueError: `lease_seconds` is below 1 (nothing is written).
        """
        if lease_seconds is not None and lease_seconds < 1:
            raise ValueError(f"lease_seconds must be at least 1, got {lease_seconds}")
        return await self.transactions.run(
            lambda txn: sessions.heartbeat_session(
                txn.conn,
                worker_id=worker_id,
                namespace=namespace,
                session_id=session_id,
                owner_stale=owner_stale,
                lease_seconds=lease_seconds,
            )
        )

    async def close_worker_session(
        self,
        *,
        worker_id: str,
        namespace: str,
        session_id: str,
        reason: str = sessions.CLOSE_REASON_SHUTDOWN,
    ) -> SessionAdmission:
        """Close a session for good (W5, W8); only its owner may."""
        return await self.transactions.run(
            lambda txn: sessions.close_session(
                txn.conn,
                worker_id=worker_id,
                namespace=namespace,
                session_id=session_id,
                reason=reason,
            )
        )

    async def get_worker_session(
        self,
        *,
        namespace: str,
        session_id: str,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> WorkerSessionInfo | None:
        """One session with its holder and active activity count (W9), or None."""
        async with self.transactions.begin() as conn:
            return await session_views.get_session(
                conn, namespace=namespace, session_id=session_id, owner_stale=owner_stale
            )

    async def list_worker_sessions(
        self,
        *,
        namespace: str,
        state: SessionState | None = None,
        limit: int = 100,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> tuple[list[WorkerSessionInfo], SessionCounts]:
        """The newest sessions of a namespace (of one state, if given) and counts per state (W9)."""
        async with self.transactions.begin() as conn:
            listed = await session_views.list_sessions(
                conn, namespace=namespace, state=state, limit=limit, owner_stale=owner_stale
            )
            return listed, await session_views.session_counts(conn, namespace=namespace)

    async def explain_session_admission(
        self,
        *,
        task_id: str,
        worker_id: str,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> SessionAdmission:
        """Whether a worker would be admitted to a session activity now, and the typed reason.

        Nothing is taken: the admission runs in a transaction that is rolled back.
        """
        async with self.transactions.begin(commit=False) as conn:
            return await sessions.explain_admission(
                conn, task_id=task_id, worker_id=worker_id, owner_stale=owner_stale
            )

    # -- HTTP server (PROTOCOL.md 5.6, 6.2, 4.3) ----------------------------------------------

    async def read_stored_history(self, *, run_id: str) -> list[history.StoredEvent]:
        """A run's whole history as stored, unparsed (the web UI's run page, issue 31)."""
        async with self.transactions.one_statement() as conn:
            return await history.read_stored_history(conn, run_id=run_id)

    async def open_attempts(self, *, run_id: str) -> list[history.OpenAttempt]:
        """A run's open activity attempts: heartbeat times and session holders (issue 31)."""
        async with self.transactions.one_statement() as conn:
            return await history.open_attempts(conn, run_id=run_id)

    async def run_children(self, *, run_ids: Sequence[str]) -> list[ChildInfo]:
        """The children the runs started, oldest first (the history export's links)."""
        async with self.transactions.one_statement() as conn:
            return await children.children_of(conn, run_ids=run_ids)

    async def workflow_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """A workflow task's current lease, for the server's poll resends."""
        async with self.transactions.one_statement() as conn:
            return await server_queries.workflow_task_lease(conn, task_id=task_id)

    async def activity_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """An activity task's current lease and attempt id, for the server's poll resends."""
        async with self.transactions.one_statement() as conn:
            return await server_queries.activity_task_lease(conn, task_id=task_id)

    async def task_arguments(
        self, *, kind: Literal["activity", "query"], task_id: str
    ) -> JsonDict | None:
        """An activity or query task's arguments (to answer a resent poll again), or None."""
        async with self.transactions.one_statement() as conn:
            return await server_queries.task_arguments(conn, kind=kind, task_id=task_id)

    async def query_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """A query task's current lease, for the server's poll resends (PROTOCOL.md 6.3)."""
        async with self.transactions.one_statement() as conn:
            return await server_queries.query_task_lease(conn, task_id=task_id)

    async def list_runs_page(
        self,
        *,
        namespace: str,
        wanted: workflow_views.RunFilter | None = None,
        workflow_type: str | None = None,
        after: tuple[visibility_sql.PageKey, str] | None = None,
        limit: int = 100,
        query: ListQuery | None = None,
    ) -> server_queries.RunPage:
        """A page of a namespace's runs after an (order key, run_id) key.

        Newest first, or in the order `query` names, of the runs it selects (issue 30).
        """
        async with self.transactions.begin() as conn:
            return await server_queries.list_runs_page(
                conn,
                namespace=namespace,
                wanted=wanted or workflow_views.RunFilter(),
                workflow_type=workflow_type,
                after=after,
                limit=limit,
                query=query,
            )

    async def ready_session_tasks(
        self, *, namespace: str, connection: str, queue: str, types: Sequence[str], limit: int
    ) -> list[tuple[str, str]]:
        """(task id, session id) of ready session attempts on a queue (to explain a poll)."""
        async with self.transactions.begin() as conn:
            return await server_queries.ready_session_tasks(
                conn,
                namespace=namespace,
                connection=connection,
                queue=queue,
                types=list(types),
                limit=limit,
            )

    async def worker_registration(
        self, *, worker_id: str
    ) -> server_queries.WorkerRegistration | None:
        """A worker's registration (queue and types), or None."""
        async with self.transactions.begin() as conn:
            return await server_queries.worker_registration(conn, worker_id=worker_id)

    async def recorded_signal(
        self, *, run_id: str, signal_id: str
    ) -> server_queries.RecordedSignal | None:
        """The signal first recorded under this id (to tell a resend from a conflict)."""
        async with self.transactions.begin() as conn:
            return await server_queries.recorded_signal(conn, run_id=run_id, signal_id=signal_id)

    async def cancel_workflow_now(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> None:
        """Close the run as cancelled at once, as the HTTP control plane's cancel does."""
        await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: server_queries.cancel_run_now(txn, run=run, reason=reason),
        )

    # -- the control plane's workflow commands and views (PROTOCOL.md 17) -------------------------

    async def workflow_runs(
        self, *, namespace: str, workflow_id: str
    ) -> list[workflow_views.ListedRun]:
        """Every run of the workflow id, oldest first (empty when it has none)."""
        async with self.transactions.begin() as conn:
            return await workflow_views.workflow_runs(
                conn, namespace=namespace, workflow_id=workflow_id
            )

    async def run_place(self, *, run_id: str) -> workflow_views.RunPlace:
        """The run's number among its workflow id's runs, whether it is current, and more."""
        async with self.transactions.begin() as conn:
            return await workflow_views.run_place(conn, run_id=run_id)

    async def repair_workflow_run(
        self,
        *,
        namespace: str,
        workflow_id: str,
        origin: workflow_commands.CommandOrigin,
        run_id: str | None = None,
    ) -> workflow_commands.RepairOutcome:
        """The repair pass for one run (the current one unless `run_id`), recorded in history.

        Raises:
            CommandRefused: the run is closed (nothing is written).
        """
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: workflow_commands.repair_run(txn, run=run, origin=origin),
        )

    async def archive_workflow_run(
        self,
        *,
        namespace: str,
        workflow_id: str,
        reason: str | None,
        origin: workflow_commands.CommandOrigin,
        run_id: str | None = None,
    ) -> workflow_commands.ArchiveOutcome:
        """Archive a closed run (the current one unless `run_id`), recorded in history.

        Raises:
            CommandRefused: the run is still running (nothing is written).
        """
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: workflow_commands.archive_run(
                txn, run=run, reason=reason, origin=origin
            ),
        )

    async def redrive_workflow_run(
        self,
        *,
        namespace: str,
        workflow_id: str,
        run_id: str,
        origin: workflow_commands.CommandOrigin,
    ) -> workflow_commands.RedriveOutcome:
        """Continue the failed run as a new run reusing its completed activity results.

        Raises:
            CommandRefused: the run cannot be continued so (nothing is written).
        """
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: workflow_commands.redrive_run(txn, source=run, origin=origin),
        )

    async def request_cancellation(
        self,
        *,
        namespace: str,
        workflow_id: str,
        run_id: str | None = None,
        reason: str | None = None,
        cleanup_seconds: int | None = None,
    ) -> cooperative.CancellationRequest:
        """Ask the run to cancel with bounded cleanup (once; a repeat returns the original)."""
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: cooperative.request_cancellation(
                txn, run=run, reason=reason, cleanup_seconds=cleanup_seconds
            ),
        )

    async def deliver_cancellation(
        self, *, lease: Fence, target: cooperative.DeliveryTarget
    ) -> cooperative.Delivery:
        """Deliver the run's cancellation request at the call its claim's worker names."""
        return await self.transactions.run(
            lambda txn: cooperative.deliver(txn, lease=lease, target=target)
        )

    async def activity_status(self, *, lease: Fence) -> cooperative.ActivityStatus:
        """A held activity attempt, observed without renewing its lease (protocol 1.20)."""
        return await self.transactions.run(
            lambda txn: cooperative.activity_status(txn.conn, lease=lease)
        )

    async def acknowledge_activity_stop(self, *, lease: Fence, request_id: str) -> str:
        """Close a held attempt its worker stopped as asked; the id of its close."""
        return await self.transactions.run(
            lambda txn: cooperative.acknowledge_activity_stop(
                txn, lease=lease, request_id=request_id
            )
        )

    async def release_workflow_leases(self, *, worker_id: str) -> int:
        """Hand a departing worker's workflow-task leases back; how many."""
        return await self.transactions.run(
            lambda txn: server_queries.release_workflow_leases(txn, worker_id=worker_id)
        )
