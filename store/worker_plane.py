"""The Store's worker plane: claims, completions, heartbeats and worker registration."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import PayloadTooLarge
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure
from burrow.store import (
    activities,
    activity_leases,
    claims,
    errors,
    history,
    message_streams,
    queries,
    sessions,
    standalone,
    sticky_reports,
    tasks,
    workers,
)
from burrow.store import schema as s
from burrow.store.completion import at_position, transactional
from burrow.store.completion import plan as completion_plan
from burrow.store.completion.effects import CompletionOutcome, NotAtPosition
from burrow.store.facade import Facade
from burrow.store.models import (
    ClaimedActivityTask,
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    Fence,
    FencedTask,
    HeartbeatResult,
    HistoryEvent,
    JsonDict,
    Lease,
    LeaseRenewed,
    QueryTaskStatus,
    RunPosition,
    StickyCacheReport,
    WorkerState,
)
from burrow.store.transactions import Txn

log = structlog.get_logger("burrow.store")


@dataclass(frozen=True, slots=True)
class LeaseRenewal:
    """What one renewal of a worker's leases found.

    The task ids still held, by kind, and the activity attempts whose holder's outcome is
    already recorded (not lost: RECORDED_KEEPS_TOKEN in store/fragments.py).
    """

    workflow: set[str]
    activity: set[str]
    recorded: set[str]


@dataclass(frozen=True, slots=True)
class AttemptCompleted:
    """An activity attempt's recorded result."""

    task: FencedTask
    follow_up: ClaimedWorkflowTask | None
    """The follow-up workflow task, leased to the completer (eager dispatch)."""


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """An activity attempt's recorded failure."""

    task: FencedTask
    retried: bool
    """Whether another attempt was scheduled (else the execution failed)."""


class WorkerPlane(Facade):
    """What workers call: each method one transaction (or one statement)."""

    async def claim_workflow_task(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        sticky: claims.StickyClaim = claims.NO_CACHE,
    ) -> ClaimedWorkflowTask | None:
        """Lease one ready workflow task (with its history), or None."""
        leased = await self.transactions.statement(
            lambda txn: claims.claim_workflow_task(
                txn.conn, flt=flt, worker_id=worker_id, lease=lease, sticky=sticky
            ),
        )
        return None if leased is None else await self._opened(leased)

    async def claim_workflow_tasks(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        limit: int,
        sticky: claims.StickyClaim = claims.NO_CACHE,
        whole_history: bool = True,
    ) -> list[ClaimedWorkflowTask]:
        """Lease up to `limit` ready workflow tasks (each with its history) in one statement.

        `sticky` applies the binding rules (S5) and says whether a task bound to this worker
        returns only the events after the run's last committed sequence. Without
        `whole_history`, a long history comes as its first page and `history_through`: the
        claimer reads the rest with `history_pages`.
        """
        leased = await self.transactions.statement(
            lambda txn: claims.claim_workflow_tasks(
                txn.conn, flt=flt, worker_id=worker_id, lease=lease, limit=limit, sticky=sticky
            ),
        )
        return [await self._opened(run, whole_history=whole_history) for run in leased]

    async def complete_workflow_task(
        self,
        *,
        lease: Fence,
        commands: Sequence[cmd.Command | JsonDict],
        eager: claims.EagerClaim | None = None,
        sticky_ttl: timedelta | None = None,
        update_task: bool = False,
        position: RunPosition | None = None,
        stream_cursors: Sequence[message_streams.StreamCursor] = (),
    ) -> CompletionOutcome:
        """Apply a workflow task's commands; StaleLease (saying why) if the lease is not current.

        Commands may be given typed or in wire form (PROTOCOL.md 7); a malformed one raises
        InvalidCommands. With `eager`, activities it schedules on the caller's queue are leased
        to the caller. With `sticky_ttl`, the run stays bound to the lease owner (who keeps it
        warm) for that long (S4); without, any binding it had ends. With `update_task`, the
        task ran accepted updates on their own, as SDK workers do
        (`transactional.complete_workflow_task`).
        With `position` (the claim's `ClaimedWorkflowTask.position`), the usual completion is one
        statement instead of a transaction of four or five round trips.
        `stream_cursors` say how far the workflow has read its message streams: a run that
        continues as new carries them, and what it had not read, to its successor
        (`message_streams.carry_streams`; InvalidStreamCursor refuses a cursor it cannot have).
        """
        parsed = completion_plan.parse_commands(lease.task_id, commands)
        self._check_command_payloads(parsed)
        held = lease if isinstance(lease, Lease) else None
        if position and held and not update_task and completion_plan.foldable(parsed):
            # A refusal here is reported by the transactional path, which fences again.
            with contextlib.suppress(NotAtPosition):
                return await self.transactions.statement(
                    lambda txn: at_position.complete_at_position(
                        txn,
                        lease=held,
                        position=position,
                        commands=parsed,
                        eager=eager,
                        sticky_ttl=sticky_ttl,
                    ),
                )
        return await self.transactions.run(
            lambda txn: transactional.complete_workflow_task(
                txn,
                lease=lease,
                commands=parsed,
                eager=eager,
                sticky_ttl=sticky_ttl,
                update_task=update_task,
                stream_cursors=stream_cursors,
            )
        )

    async def fail_workflow_task(self, *, lease: Fence, failure: Failure) -> FencedTask:
        """Hand a workflow task back for a retry, recording the failure; returns the task."""
        return await self.transactions.run(
            lambda txn: tasks.fail_workflow_task(txn, lease=lease, failure=failure)
        )

    async def check_workflow_task_lease(self, *, lease: Fence) -> FencedTask:
        """The task, while `lease` is its current lease; else StaleLease saying why."""
        return await self.transactions.statement(
            lambda txn: tasks.check_workflow_task_lease(txn.conn, lease=lease)
        )

    async def read_leased_history(
        self, *, lease: Fence, after_seq: int = 0
    ) -> tuple[FencedTask, list[HistoryEvent]]:
        """The leased task and its run's events after `after_seq`; StaleLease if not current."""

        async def body(txn: Txn[AsyncConnection]) -> tuple[FencedTask, list[HistoryEvent]]:
            task = await tasks.check_workflow_task_lease(txn.conn, lease=lease)
            events = await history.read_history(txn.conn, run_id=task.run_id, after_seq=after_seq)
            return task, events

        return await self.transactions.run(body)

    async def append_for_leased_task(
        self, *, lease: Fence, events: Sequence[history.NewEvent]
    ) -> list[HistoryEvent]:
        """Append events to the leased task's run (StaleLease if not current): those recorded."""

        async def body(txn: Txn[AsyncConnection]) -> list[HistoryEvent]:
            task = await tasks.check_workflow_task_lease(txn.conn, lease=lease)
            return await history.append_to_leased_run(
                txn.conn, run_id=task.run_id, task_id=task.task_id, events=events
            )

        return await self.transactions.run(body)

    async def read_task_run_events(
        self, *, task_id: str, event_types: Sequence[str]
    ) -> list[HistoryEvent]:
        """The events of those types of a workflow task's run (no lease check: one statement)."""
        return await self.transactions.statement(
            lambda txn: history.read_task_run_events(
                txn.conn, task_id=task_id, event_types=event_types
            )
        )

    async def heartbeat_workflow_task(
        self, *, lease: Fence, lease_duration: timedelta
    ) -> HeartbeatResult:
        """Renew a workflow task lease while it runs a local activity (A3); reports cancellation."""
        return await self.transactions.run(
            lambda txn: tasks.heartbeat_workflow_task(
                txn.conn, lease=lease, lease_duration=lease_duration
            )
        )

    async def claim_activity_tasks(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        limit: int,
        owner_stale: timedelta = sessions.DEFAULT_OWNER_STALE,
    ) -> list[ClaimedActivityTask]:
        """Lease up to `limit` ready activity attempts.

        Session attempts only when the worker is admitted to their session (W3, W6), which the
        claim creates, renews or reacquires; `owner_stale` is when a silent holder counts as gone.
        """
        return await self.transactions.run(
            lambda txn: claims.claim_activity_tasks(
                txn.conn,
                flt=flt,
                worker_id=worker_id,
                lease=lease,
                limit=limit,
                owner_stale=owner_stale,
            )
        )

    async def complete_activity_task(
        self,
        *,
        lease: Fence,
        result: JsonDict,
        eager: claims.EagerClaim | None = None,
        finished_at: datetime | None = None,
    ) -> AttemptCompleted:
        """Record an attempt's result once; with `eager`, lease the follow-up workflow task.

        `finished_at` is when the attempt returned by its worker's clock (ActivityCompleted's
        `finished_at`; the database's clock when None).

        The completion is one statement. Two rarer cases take one more, after it commits: a
        follow-up task that was already waiting is claimed (or announced), and a session
        attempt's session has its waiting attempts announced again. Neither is durable state:
        if that statement fails, the re-poll finds the work (C3), and the completion stands.
        A standalone activity's host run is closed in a transaction after it (`standalone`);
        if that fails, the repair pass closes it.
        """
        self.check_payload(result, "activity result")
        done = await self.transactions.statement(
            lambda txn: activities.complete_activity(
                txn, lease=lease, result=result, eager=eager, finished_at=finished_at
            )
        )
        leased = done.leased
        try:
            if done.standalone_host:
                run_id = done.task.run_id
                await self.transactions.run(lambda txn: standalone.settle(txn, run_id=run_id))
            if done.session is not None:
                namespace, session_id = done.session
                await self.transactions.statement(
                    lambda txn: sessions.announce_ready(
                        txn, namespace=namespace, session_id=session_id
                    ),
                )
            if done.waiting is not None and eager is not None:
                waiting = done.waiting
                leased = await self.transactions.statement(
                    lambda txn: activities.claim_waiting(txn, waiting, eager),
                )
        except errors.StoreError as exc:
            log.warning(
                "activity_follow_up_failed",
                namespace=None if eager is None else eager.flt.namespace,
                queue=None if eager is None else eager.flt.queue,
                run_id=done.task.run_id,
                task_id=lease.task_id,
                worker_id=lease.lease_owner,
                error=str(exc),
            )
        return AttemptCompleted(
            task=done.task, follow_up=None if leased is None else await self._opened(leased)
        )

    async def complete_activity_with_workflow_task(
        self,
        *,
        lease: Lease,
        result: JsonDict,
        task: at_position.WorkflowTaskRun,
        eager: claims.EagerClaim | None = None,
        sticky_ttl: timedelta | None = None,
        finished_at: datetime | None = None,
    ) -> CompletionOutcome | None:
        """Record an attempt's result and the workflow task that consumed it, in one statement.

        `task` is what the caller's warm instance did with the result (completion/at_position.py);
        `finished_at` as for `complete_activity_task`.
        None when nothing was written (the run moved or is busy, the lease is stale, a payload
        is too large): the caller then completes the attempt with `complete_activity_task`.
        """
        self.check_payload(result, "activity result")
        try:
            self._check_command_payloads(task.commands)
        except PayloadTooLarge:
            return None  # the usual path reports it, from the task that runs the code again
        with contextlib.suppress(NotAtPosition):
            return await self.transactions.statement(
                lambda txn: at_position.complete_with_workflow_task(
                    txn,
                    lease=lease,
                    result=result,
                    task=task,
                    eager=eager,
                    sticky_ttl=sticky_ttl,
                    finished_at=finished_at,
                ),
            )
        return None

    async def fail_activity_task(self, *, lease: Fence, failure: Failure) -> AttemptFailed:
        """Record a failed attempt, and whether another attempt was scheduled."""
        retried, task = await self.transactions.run(
            lambda txn: activities.fail_activity(txn, lease=lease, failure=failure)
        )
        return AttemptFailed(task=task, retried=retried)

    async def heartbeat_activity_task(
        self, *, lease: Fence, details: JsonDict | None, lease_duration: timedelta
    ) -> HeartbeatResult:
        """Record heartbeat details and renew the lease."""
        self.check_payload(details, "heartbeat details")
        return await self.transactions.run(
            lambda txn: activities.heartbeat_activity(
                txn.conn, lease=lease, details=details, lease_duration=lease_duration
            )
        )

    async def renew_activity_lease(
        self, *, lease: Fence, lease_duration: timedelta
    ) -> LeaseRenewed:
        """Renew a live attempt's lease without recording progress (no history, no details)."""
        return await self.transactions.run(
            lambda txn: activity_leases.renew_activity_lease(
                txn.conn, lease=lease, lease_duration=lease_duration
            )
        )

    async def claim_query_task(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        kinds: Sequence[str] = ("query",),
    ) -> ClaimedQueryTask | None:
        """Lease one ready query task of `kinds` ("query", "update_validation")."""
        return await self.transactions.run(
            lambda txn: claims.claim_query_task(
                txn.conn, flt=flt, worker_id=worker_id, lease=lease, kinds=kinds
            )
        )

    async def answer_query_task(
        self, *, lease: Fence, result: JsonDict | None, failure: Failure | None
    ) -> FencedTask:
        """Store a query's answer (fenced); returns the task."""
        return await self.transactions.run(
            lambda txn: queries.answer_query(txn, lease=lease, result=result, failure=failure)
        )

    async def observe_query_task(self, *, lease: Fence) -> QueryTaskStatus:
        """A live query claim as its holder sees it; renews nothing (StaleLease if not live)."""
        async with self.transactions.one_statement() as conn:
            return await queries.observe_query(conn, lease=lease)

    async def renew_leases(
        self, *, workflow: Sequence[Lease], activity: Sequence[Lease], lease: timedelta
    ) -> LeaseRenewal:
        """Extend the worker's leases; says which are held, and which attempts are recorded."""

        async def body(txn: Txn[AsyncConnection]) -> LeaseRenewal:
            conn = txn.conn
            wf = await claims.renew_leases(
                conn, table=s.workflow_tasks, leases=workflow, lease=lease
            )
            act = await claims.renew_leases(
                conn, table=s.activity_tasks, leases=activity, lease=lease
            )
            await sessions.renew_for_attempts(conn, task_ids=act)  # W1, as a heartbeat would
            unheld = [item for item in activity if item.task_id not in act]
            recorded = await claims.recorded_leases(conn, table=s.activity_tasks, leases=unheld)
            return LeaseRenewal(workflow=wf, activity=act, recorded=recorded)

        return await self.transactions.run(body)

    async def register_worker(
        self,
        *,
        worker_id: str,
        namespace: str,
        task_queue: str,
        workflow_types: Sequence[str],
        activity_types: Sequence[str],
        concurrency: int,
        connection: str = "default",
        build_id: str | None = None,
        sticky_cache: StickyCacheReport | None = None,
        capabilities: Sequence[str] = (),
        max_concurrent_worker_sessions: int = workers.DEFAULT_MAX_CONCURRENT_WORKER_SESSIONS,
        workflow_fingerprints: Mapping[str, str] | None = None,
        runtime: str = "python",
        update_validators: Mapping[str, Sequence[str]] | None = None,
        sdk_version: str | None = None,
        max_workflow_tasks: int | None = None,
        max_activity_tasks: int | None = None,
    ) -> WorkerState:
        """Register (or refresh) a worker; `sticky_cache` if it keeps one (S3, S10).

        `capabilities` are what session requirements are matched against (W3);
        `max_concurrent_worker_sessions` bounds the sessions it holds at once (W6);
        `workflow_fingerprints` name the definitions of the workflow types it runs (S8);
        `runtime` is the language of its SDK, as the fleet reports it (S10); `sdk_version` and
        the `max_*_tasks` an HTTP worker declared are reported by the fleet views (M8);
        `update_validators`: workflow type -> the updates it validates before they are accepted.
        Returns its state: `draining` when its build-id cohort is drained (store/rollouts.py).
        """
        return await self.transactions.run(
            lambda txn: workers.register_worker(
                txn.conn,
                worker_id=worker_id,
                namespace=namespace,
                task_queue=task_queue,
                workflow_types=workflow_types,
                activity_types=activity_types,
                concurrency=concurrency,
                connection=connection,
                build_id=build_id,
                sticky_cache=sticky_cache,
                capabilities=capabilities,
                max_concurrent_worker_sessions=max_concurrent_worker_sessions,
                workflow_fingerprints=workflow_fingerprints,
                runtime=runtime,
                update_validators=update_validators,
                sdk_version=sdk_version,
                max_workflow_tasks=max_workflow_tasks,
                max_activity_tasks=max_activity_tasks,
            )
        )

    async def heartbeat_worker(
        self, *, worker_id: str, sticky_cache: StickyCacheReport | None = None
    ) -> None:
        """Mark a worker live, with its cache figures (S10); renews its sessions (W1)."""
        await self.transactions.run(
            lambda txn: workers.heartbeat_worker(
                txn.conn, worker_id=worker_id, sticky_cache=sticky_cache
            )
        )

    async def report_sticky_cache(
        self, *, worker_id: str, figures: sticky_reports.StickyFigures, heartbeat: bool = False
    ) -> StickyCacheReport | None:
        """Store the cache figures a worker reported (S10); with `heartbeat`, mark it live.

        Returns the figures now stored (None for a stopped or unknown worker).
        """
        return await self.transactions.run(
            lambda txn: sticky_reports.record(
                txn.conn, worker_id=worker_id, figures=figures, heartbeat=heartbeat
            )
        )

    async def sticky_cache_figures(self, *, worker_id: str) -> StickyCacheReport | None:
        """The cache figures stored for a worker, None if it keeps no cache."""
        return await self.transactions.run(
            lambda txn: sticky_reports.stored(txn.conn, worker_id=worker_id)
        )

    async def end_sticky_bindings(self, *, worker_id: str) -> int:
        """Expire the bindings a worker holds; their next claim replays forced cold (S7)."""
        return await self.transactions.run(
            lambda txn: sticky_reports.end_bindings(txn.conn, worker_id=worker_id)
        )

    async def drain_worker(self, *, worker_id: str) -> int:
        """Mark a worker draining: its sticky bindings are released to other workers (S8).

        The worker sessions it holds are handed over when reacquirable, else closed (W5).
        """
        return await self.transactions.run(
            lambda txn: workers.drain_worker(txn, worker_id=worker_id)
        )

    async def deregister_worker(self, *, worker_id: str) -> None:
        """Mark a worker stopped; its sessions are handed over or closed, as on a drain (W5)."""
        await self.transactions.run(lambda txn: workers.deregister_worker(txn, worker_id=worker_id))
