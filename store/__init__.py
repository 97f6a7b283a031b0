"""The Store facade: the only place that opens transactions; composes the SQL modules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

from burrow.errors import PayloadTooLarge
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import SessionSpec
from burrow.store import (
    activities,
    claims,
    errors,
    fleet,
    history,
    isolation,
    metrics,
    operator,
    queries,
    ready,
    repair,
    runs,
    server_queries,
    session_views,
    sessions,
    sql,
    start_batches,
    tasks,
    workers,
)
from burrow.store import schema as s
from burrow.store.completion import at_position, transactional
from burrow.store.completion import plan as completion_plan
from burrow.store.completion.effects import CompletionOutcome, NotAtPosition
from burrow.store.engine import DEFAULT_APPLICATION_NAME, create_engine
from burrow.store.models import (
    ClaimedActivityTask,
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    HeartbeatResult,
    HistoryEvent,
    IdReusePolicy,
    JsonDict,
    Lease,
    QueryTaskInfo,
    RunDescription,
    RunInfo,
    RunPosition,
    RunRow,
    SessionAdmission,
    SessionCounts,
    SessionState,
    StickyCacheReport,
    SweepResult,
    UpdateInfo,
    WorkerSessionInfo,
)
from burrow.store.transactions import Txn

__all__ = ["Store"]

log = structlog.get_logger("burrow.store")

T = TypeVar("T")
C = TypeVar("C")
AfterCommit = Callable[[list[ready.Notice]], Awaitable[None]]
DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
CONFLICT_RETRIES = 5


class Store:
    """Durable state of one database: every public method is one transaction."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        after_commit: AfterCommit | None = None,
    ):
        self.engine = engine
        # Shares the engine's pool; every store connection is AUTOCOMMIT to SQLAlchemy (_begin).
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self.max_payload_bytes = max_payload_bytes
        self._after_commit = after_commit
        self._starts = start_batches.StartBatcher(self._create_runs)

    @classmethod
    def connect(
        cls,
        database_url: str,
        *,
        pool_size: int = 10,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        after_commit: AfterCommit | None = None,
        application_name: str = DEFAULT_APPLICATION_NAME,
    ) -> Store:
        """Create a store on a new engine (connections open lazily), named `application_name`."""
        engine = create_engine(database_url, pool_size=pool_size, application_name=application_name)
        return cls(engine, max_payload_bytes=max_payload_bytes, after_commit=after_commit)

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self.engine.dispose()

    @contextlib.asynccontextmanager
    async def _begin(self, *, commit: bool = True) -> AsyncIterator[AsyncConnection]:
        """One transaction, begun and ended by the driver itself (rolled back if not `commit`).

        SQLAlchemy sees an AUTOCOMMIT connection and begins nothing of its own, so its Core
        statements and the text statements run on the driver (store/sql.py) share the one
        transaction.
        """
        with errors.translate_db_errors():
            async with self._autocommit.connect() as conn, _dropped_when_broken(conn) as raw:
                txn = raw.transaction()
                await txn.start()
                try:
                    yield conn
                except BaseException:
                    await _roll_back(raw, txn)
                    raise
                if commit:
                    await txn.commit()
                else:
                    await txn.rollback()

    @contextlib.asynccontextmanager
    async def _one_statement(self) -> AsyncIterator[AsyncConnection]:
        """For work of ONE statement: no transaction block, so no BEGIN/COMMIT round trips.

        A single statement is atomic and sees one snapshot by itself; more need `_begin`.
        """
        with errors.translate_db_errors():
            async with self._autocommit.connect() as conn, _dropped_when_broken(conn):
                yield conn

    @contextlib.asynccontextmanager
    async def _driven(self) -> AsyncIterator[sql.Driven]:
        """One statement straight on a pooled driver connection: no SQLAlchemy Connection.

        What `_one_statement` and `_dropped_when_broken` do around a statement, done on the
        pool's connection record itself: a lost connection is invalidated pool-wide, and one
        left inside a transaction is never reused.
        """
        with errors.translate_db_errors():
            fairy = await self.engine.raw_connection()
            raw = fairy.driver_connection
            try:
                yield sql.Driven(raw)
            except BaseException as exc:
                if errors.connection_lost(exc, raw) and fairy.is_valid:
                    self.engine.sync_engine.pool._invalidate(fairy, exc, _checkin=False)
                    await greenlet_spawn(fairy.invalidate, exc)
                raise
            finally:
                if fairy.is_valid and raw is not None and raw.is_in_transaction():
                    await greenlet_spawn(fairy.invalidate)
                await greenlet_spawn(fairy.close)

    async def _txn(self, fn: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run `fn` in one transaction (again on a deadlock), then report what became ready."""
        return await self._retried(self._begin, fn)

    async def _statement(self, fn: Callable[[sql.Conn], Awaitable[T]]) -> T:
        """`_txn` for a `fn` of exactly ONE text statement (sql.py), its own transaction.

        It runs outside a transaction block, on a `Driven` connection.
        """
        return await self._retried(self._driven, fn)

    async def _retried(
        self,
        opener: Callable[[], contextlib.AbstractAsyncContextManager[C]],
        fn: Callable[[C], Awaitable[T]],
    ) -> T:
        for attempt in range(CONFLICT_RETRIES):
            notices, token = ready.collect()
            try:
                async with opener() as conn:
                    result = await fn(conn)
            except errors.RetryableConflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
                continue
            finally:
                ready.stop(token)
            if notices and self._after_commit is not None:
                await self._after_commit(notices)  # after commit, never inside (broker invariant 1)
            return result
        raise errors.RetryableConflict("transaction conflict persisted")

    def check_payload(self, payload: Mapping[str, Any] | None, what: str) -> None:
        """Refuse an oversized payload before anything is written."""
        if payload is None:
            return
        size = len(str(payload.get("blob", "")).encode())
        if size > self.max_payload_bytes:
            raise PayloadTooLarge(size=size, limit=self.max_payload_bytes, what=what)

    def _check_command_payloads(self, commands: Sequence[cmd.Command]) -> None:
        """Refuse a command whose payload is oversized, before anything is written."""
        for command in commands:
            for key, envelope in cmd.envelopes(command):
                self.check_payload(envelope, f"{command.type} {key}")

    # -- client plane -------------------------------------------------------------------------

    async def start_workflow(
        self,
        *,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        task_queue: str,
        input: JsonDict,
        connection: str = "default",
        build_id: str | None = None,
        notify_queue: str | None = None,
        id_reuse_policy: IdReusePolicy = IdReusePolicy.ALLOW_DUPLICATE,
        run_id: str | None = None,
    ) -> RunInfo:
        """Create a run, its `WorkflowStarted` event and first workflow task.

        `notify_queue`: the starting client's broker queue, which hears the run's changes unbound.
        `id_reuse_policy` decides, in the inserting statement, whether the runs the id already
        has refuse the start. `run_id`: the new run's id (default a new UUID), by which a
        `USE_EXISTING` caller tells a created run from the running one returned.

        Raises:
            WorkflowAlreadyStartedError: the policy refused the start; nothing was written.
        """
        self.check_payload(input, "workflow input")
        new = runs.NewRun(
            namespace=namespace,
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            task_queue=task_queue,
            input=input,
            connection=connection,
            build_id=build_id,
            notify_queue=notify_queue,
            id_reuse_policy=id_reuse_policy,
            run_id=run_id,
        )
        try:
            # Starts asked for concurrently share a statement and its commit (start_batches.py).
            return await self._starts.start(new)
        except errors.WorkflowAlreadyStartedError:
            if id_reuse_policy is not IdReusePolicy.USE_EXISTING:
                raise
        # A running run begun after the statement did (or in its batch) is returned too: read.
        latest = await self.get_run(namespace=namespace, workflow_id=workflow_id)
        return runs.answer_start(new, runs.Refused(latest))

    async def _create_runs(self, wanted: Sequence[runs.NewRun]) -> list[RunInfo | runs.Refused]:
        return await self._statement(lambda conn: runs.create_runs(conn, wanted))

    async def _on_run(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        fn: Callable[[AsyncConnection, RunRow], Awaitable[T]],
    ) -> T:
        async def body(conn: AsyncConnection) -> T:
            found = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            run = await runs.lock_run(conn, run_id=found.run_id)
            return await fn(conn, run)

        return await self._txn(body)

    async def signal_workflow(
        self,
        *,
        namespace: str,
        workflow_id: str,
        signal_name: str,
        arguments: JsonDict,
        signal_id: str,
        run_id: str | None = None,
    ) -> bool:
        """Deliver a signal once per signal id; False when it was a duplicate."""
        self.check_payload(arguments, "signal arguments")
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda conn, run: runs.signal_run(
                conn, run=run, signal_name=signal_name, arguments=arguments, signal_id=signal_id
            ),
        )

    async def submit_update(
        self,
        *,
        namespace: str,
        workflow_id: str,
        update_name: str,
        arguments: JsonDict,
        update_id: str,
        run_id: str | None = None,
    ) -> str:
        """Accept an update; returns the run id it was accepted on."""
        self.check_payload(arguments, "update arguments")

        async def accept(conn: AsyncConnection, run: RunRow) -> str:
            await runs.accept_update(
                conn, run=run, update_name=update_name, arguments=arguments, update_id=update_id
            )
            return run.run_id

        return await self._on_run(namespace, workflow_id, run_id, accept)

    async def get_update(self, *, run_id: str, update_id: str) -> UpdateInfo | None:
        """The update's state, result and failure, or None."""
        async with self._begin() as conn:
            return await runs.get_update(conn, run_id=run_id, update_id=update_id)

    async def cancel_workflow(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> bool:
        """Request cancellation; the workflow code sees it at its next await."""
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda conn, run: runs.request_cancel(conn, run=run, reason=reason),
        )

    async def terminate_workflow(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> None:
        """Close the run now without running workflow code."""
        await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda conn, run: runs.terminate_run(conn, run=run, reason=reason),
        )

    async def closed_runs(self, run_ids: Sequence[str]) -> dict[str, ready.RunOutcome | None]:
        """Which of these runs have closed, and how (the result waiters' fallback poll).

        An outcome too large to carry is None: its waiter reads the run.
        """
        async with self._one_statement() as conn:
            return await queries.closed_runs(conn, run_ids=run_ids)

    async def get_run(
        self, *, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunInfo:
        """The run (latest of the workflow id unless run_id is given)."""
        async with self._one_statement() as conn:
            run = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
        return run.info()

    async def describe_workflow(
        self, *, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunDescription:
        """The run plus its open workflow task, open activities and any compatibility gap."""
        async with self._begin() as conn:
            run = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            return await operator.describe_run(conn, run=run)

    async def read_history(self, *, run_id: str, after_seq: int = 0) -> list[HistoryEvent]:
        """A run's history events after `after_seq`."""
        async with self._begin() as conn:
            return await history.read_history(conn, run_id=run_id, after_seq=after_seq)

    async def list_workflows(
        self,
        *,
        namespace: str,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
    ) -> list[RunInfo]:
        """Recent runs of a namespace (of one workflow type if given), newest first."""
        async with self._begin() as conn:
            return await runs.list_runs(
                conn, namespace=namespace, status=status, workflow_type=workflow_type, limit=limit
            )

    async def submit_query(
        self,
        *,
        namespace: str,
        workflow_id: str,
        query_name: str,
        arguments: JsonDict,
        timeout: timedelta,
        run_id: str | None = None,
    ) -> str:
        """Create a query task for a worker to answer; returns its id."""
        self.check_payload(arguments, "query arguments")

        async def body(conn: AsyncConnection) -> str:
            run = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            return await queries.submit_query(
                conn, run=run, query_name=query_name, arguments=arguments, timeout=timeout
            )

        return await self._txn(body)

    async def get_query(self, *, task_id: str) -> QueryTaskInfo | None:
        """The query task's state, result and failure, or None."""
        async with self._begin() as conn:
            return await queries.get_query(conn, task_id=task_id)

    async def live_workers(
        self, *, namespace: str, task_queue: str, stale_after: timedelta
    ) -> list[tuple[str, list[str], list[str]]]:
        """Live workers on a queue with their declared types."""
        async with self._begin() as conn:
            return await workers.live_workers(
                conn, namespace=namespace, task_queue=task_queue, stale_after=stale_after
            )

    # -- worker plane -------------------------------------------------------------------------

    async def claim_workflow_task(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        sticky: claims.StickyClaim = claims.NO_CACHE,
    ) -> ClaimedWorkflowTask | None:
        """Lease one ready workflow task (with its history), or None."""
        leased = await self._statement(
            lambda conn: claims.claim_workflow_task(
                conn, flt=flt, worker_id=worker_id, lease=lease, sticky=sticky
            ),
        )
        return None if leased is None else leased.claimed()

    async def claim_workflow_tasks(
        self,
        *,
        flt: claims.QueueFilter,
        worker_id: str,
        lease: timedelta,
        limit: int,
        sticky: claims.StickyClaim = claims.NO_CACHE,
    ) -> list[ClaimedWorkflowTask]:
        """Lease up to `limit` ready workflow tasks (each with its history) in one statement.

        `sticky` applies the binding rules (S5) and says whether a task bound to this worker
        returns only the events after the run's last committed sequence.
        """
        leased = await self._statement(
            lambda conn: claims.claim_workflow_tasks(
                conn, flt=flt, worker_id=worker_id, lease=lease, limit=limit, sticky=sticky
            ),
        )
        return [run.claimed() for run in leased]

    async def complete_workflow_task(
        self,
        *,
        lease: Lease,
        commands: Sequence[cmd.Command | JsonDict],
        eager: claims.EagerClaim | None = None,
        sticky_ttl: timedelta | None = None,
        update_task: bool = False,
        position: RunPosition | None = None,
    ) -> CompletionOutcome:
        """Apply a workflow task's commands; StaleLease if the lease is no longer current.

        Commands may be given typed or in wire form (PROTOCOL.md 7); a malformed one raises
        InvalidCommands. With `eager`, activities it schedules on the caller's queue are leased
        to the caller. With `sticky_ttl`, the run stays bound to the lease owner (who keeps it
        warm) for that long (S4); without, any binding it had ends. With `update_task`, the
        task ran accepted updates on their own, as SDK workers do
        (`transactional.complete_workflow_task`).
        With `position` (the claim's `ClaimedWorkflowTask.position`), the usual completion is one
        statement instead of a transaction of four or five round trips.
        """
        parsed = completion_plan.parse_commands(lease.task_id, commands)
        self._check_command_payloads(parsed)
        if position is not None and not update_task and completion_plan.foldable(parsed):
            with contextlib.suppress(NotAtPosition):
                return await self._statement(
                    lambda conn: at_position.complete_at_position(
                        Txn(conn, ready.current()),  # until the facade passes a Txn
                        lease=lease,
                        position=position,
                        commands=parsed,
                        eager=eager,
                        sticky_ttl=sticky_ttl,
                    ),
                )
        return await self._txn(
            lambda conn: transactional.complete_workflow_task(
                Txn(conn, ready.current()),  # until the facade passes a Txn
                lease=lease,
                commands=parsed,
                eager=eager,
                sticky_ttl=sticky_ttl,
                update_task=update_task,
            )
        )

    async def fail_workflow_task(self, *, lease: Lease, failure: JsonDict) -> None:
        """Hand a workflow task back for a retry, recording the failure."""
        await self._txn(lambda conn: tasks.fail_workflow_task(conn, lease=lease, failure=failure))

    async def heartbeat_workflow_task(
        self, *, lease: Lease, lease_duration: timedelta
    ) -> HeartbeatResult:
        """Renew a workflow task lease while it runs a local activity (A3); reports cancellation."""
        return await self._txn(
            lambda conn: tasks.heartbeat_workflow_task(
                conn, lease=lease, lease_duration=lease_duration
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
        return await self._txn(
            lambda conn: claims.claim_activity_tasks(
                conn,
                flt=flt,
                worker_id=worker_id,
                lease=lease,
                limit=limit,
                owner_stale=owner_stale,
            )
        )

    async def complete_activity_task(
        self, *, lease: Lease, result: JsonDict, eager: claims.EagerClaim | None = None
    ) -> ClaimedWorkflowTask | None:
        """Record an attempt's result once; with `eager`, lease the follow-up workflow task.

        The completion is one statement. Two rarer cases take one more, after it commits: a
        follow-up task that was already waiting is claimed (or announced), and a session
        attempt's session has its waiting attempts announced again. Neither is durable state:
        if that statement fails, the re-poll finds the work (C3), and the completion stands.
        """
        self.check_payload(result, "activity result")
        done = await self._statement(
            lambda conn: activities.complete_activity(conn, lease=lease, result=result, eager=eager)
        )
        leased = done.leased
        try:
            if done.session is not None:
                namespace, session_id = done.session
                await self._statement(
                    lambda conn: sessions.announce_ready(
                        conn, namespace=namespace, session_id=session_id
                    ),
                )
            if done.waiting is not None and eager is not None:
                waiting = done.waiting
                leased = await self._statement(
                    lambda conn: activities.claim_waiting(conn, waiting, eager),
                )
        except errors.StoreError as exc:
            log.warning(
                "activity_follow_up_failed",
                namespace=None if eager is None else eager.flt.namespace,
                queue=None if eager is None else eager.flt.queue,
                run_id=lease.run_id,
                task_id=lease.task_id,
                worker_id=lease.lease_owner,
                error=str(exc),
            )
        return None if leased is None else leased.claimed()

    async def complete_activity_with_workflow_task(
        self,
        *,
        lease: Lease,
        result: JsonDict,
        task: at_position.WorkflowTaskRun,
        eager: claims.EagerClaim | None = None,
        sticky_ttl: timedelta | None = None,
    ) -> CompletionOutcome | None:
        """Record an attempt's result and the workflow task that consumed it, in one statement.

        `task` is what the caller's warm instance did with the result (at_position.py). None
        when nothing was written (the run moved or is busy, the lease is stale, a payload is
        too large): the caller then completes the attempt with `complete_activity_task`.
        """
        self.check_payload(result, "activity result")
        try:
            self._check_command_payloads(task.commands)
        except PayloadTooLarge:
            return None  # the usual path reports it, from the task that runs the code again
        with contextlib.suppress(NotAtPosition):
            return await self._statement(
                lambda conn: at_position.complete_with_workflow_task(
                    Txn(conn, ready.current()),  # until the facade passes a Txn
                    lease=lease,
                    result=result,
                    task=task,
                    eager=eager,
                    sticky_ttl=sticky_ttl,
                ),
            )
        return None

    async def fail_activity_task(self, *, lease: Lease, failure: JsonDict) -> bool:
        """Record a failed attempt; True when another attempt was scheduled."""
        return await self._txn(
            lambda conn: activities.fail_activity(conn, lease=lease, failure=failure)
        )

    async def heartbeat_activity_task(
        self, *, lease: Lease, details: JsonDict | None, lease_duration: timedelta
    ) -> HeartbeatResult:
        """Record heartbeat details and renew the lease."""
        self.check_payload(details, "heartbeat details")
        return await self._txn(
            lambda conn: activities.heartbeat_activity(
                conn, lease=lease, details=details, lease_duration=lease_duration
            )
        )

    async def claim_query_task(
        self, *, flt: claims.QueueFilter, worker_id: str, lease: timedelta
    ) -> ClaimedQueryTask | None:
        """Lease one ready query task."""
        return await self._txn(
            lambda conn: claims.claim_query_task(conn, flt=flt, worker_id=worker_id, lease=lease)
        )

    async def answer_query_task(
        self, *, lease: Lease, result: JsonDict | None, failure: JsonDict | None
    ) -> None:
        """Store a query's answer (fenced)."""
        await self._txn(
            lambda conn: queries.answer_query(conn, lease=lease, result=result, failure=failure)
        )

    async def renew_leases(
        self, *, workflow: Sequence[Lease], activity: Sequence[Lease], lease: timedelta
    ) -> tuple[set[str], set[str]]:
        """Extend the worker's leases; returns (held workflow, held activity) task ids."""

        async def body(conn: AsyncConnection) -> tuple[set[str], set[str]]:
            wf = await claims.renew_leases(
                conn, table=s.workflow_tasks, leases=workflow, lease=lease
            )
            act = await claims.renew_leases(
                conn, table=s.activity_tasks, leases=activity, lease=lease
            )
            await sessions.renew_for_attempts(conn, task_ids=act)  # W1, as a heartbeat would
            return wf, act

        return await self._txn(body)

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
    ) -> None:
        """Register (or refresh) a worker; `sticky_cache` if it keeps one (S3, S10).

        `capabilities` are what session requirements are matched against (W3);
        `max_concurrent_worker_sessions` bounds the sessions it holds at once (W6).
        """
        await self._txn(
            lambda conn: workers.register_worker(
                conn,
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
            )
        )

    async def heartbeat_worker(
        self, *, worker_id: str, sticky_cache: StickyCacheReport | None = None
    ) -> None:
        """Mark a worker live, with its cache figures (S10)."""
        await self._txn(
            lambda conn: workers.heartbeat_worker(
                conn, worker_id=worker_id, sticky_cache=sticky_cache
            )
        )

    async def drain_worker(self, *, worker_id: str) -> int:
        """Mark a worker draining: its sticky bindings are released to other workers (S8).

        The worker sessions it holds are closed (W8).
        """
        return await self._txn(lambda conn: workers.drain_worker(conn, worker_id=worker_id))

    async def deregister_worker(self, *, worker_id: str) -> None:
        """Mark a worker stopped; the worker sessions it still holds are closed (W8)."""
        await self._txn(lambda conn: workers.deregister_worker(conn, worker_id=worker_id))

    async def sweep(
        self,
        *,
        republish_after: timedelta = repair.DEFAULT_REPUBLISH_AFTER,
        owner_stale: timedelta = repair.DEFAULT_OWNER_STALE,
    ) -> SweepResult:
        """One repair pass; `owner_stale` as in the claims' sticky rules (S5c)."""
        return await self._txn(
            lambda conn: repair.sweep(
                conn, republish_after=republish_after, owner_stale=owner_stale
            )
        )

    async def repair_failures(self, *, namespace: str) -> int:
        """How many rows of the namespace the repair pass isolated (issue 25 item 1)."""
        return await self._statement(
            lambda conn: isolation.count_isolated(conn, namespace=namespace)
        )

    async def queue_stats(
        self, *, namespace: str | None = None, live_after: timedelta = operator.LIVE_AFTER
    ) -> list[operator.QueueStats]:
        """Backlog per queue and task kind, for operators (M8, M9)."""
        async with self._begin() as conn:
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
        async with self._begin() as conn:
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
        async with self._begin() as conn:
            return await fleet.task_queues(
                conn, namespace=namespace, live_after=live_after, queue=queue
            )

    async def worker_fleet(
        self, *, namespace: str, live_after: timedelta
    ) -> fleet.WorkerFleetMetrics:
        """The namespace's registered workers that have not stopped, with counts (M8)."""
        async with self._begin() as conn:
            workers = await fleet.fleet(conn, namespace=namespace, live_after=live_after)
        return fleet.WorkerFleetMetrics.of(workers)

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
        return await self._txn(
            lambda conn: sessions.create_session(
                conn,
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
        return await self._txn(
            lambda conn: sessions.heartbeat_session(
                conn,
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
        return await self._txn(
            lambda conn: sessions.close_session(
                conn, worker_id=worker_id, namespace=namespace, session_id=session_id, reason=reason
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
        async with self._begin() as conn:
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
        async with self._begin() as conn:
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
        async with self._begin(commit=False) as conn:
            return await sessions.explain_admission(
                conn, task_id=task_id, worker_id=worker_id, owner_stale=owner_stale
            )

    # -- HTTP server (PROTOCOL.md 5.6, 6.2, 4.3) ----------------------------------------------

    async def workflow_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """A workflow task's current lease, for the server's fencing checks."""
        async with self._one_statement() as conn:
            return await server_queries.workflow_task_lease(conn, task_id=task_id)

    async def activity_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """An activity task's current lease and attempt id, for the server's fencing checks."""
        async with self._one_statement() as conn:
            return await server_queries.activity_task_lease(conn, task_id=task_id)

    async def task_arguments(
        self, *, kind: Literal["activity", "query"], task_id: str
    ) -> JsonDict | None:
        """An activity or query task's arguments (to answer a resent poll again), or None."""
        async with self._one_statement() as conn:
            return await server_queries.task_arguments(conn, kind=kind, task_id=task_id)

    async def query_task_lease(self, *, task_id: str) -> server_queries.TaskLeaseState | None:
        """A query task's current lease, for the server's fencing checks (PROTOCOL.md 6.3)."""
        async with self._one_statement() as conn:
            return await server_queries.query_task_lease(conn, task_id=task_id)

    async def list_runs_page(
        self,
        *,
        namespace: str,
        status: str | None = None,
        workflow_type: str | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> server_queries.RunPage:
        """A page of a namespace's runs, newest first, after a (created_at, run_id) key."""
        async with self._begin() as conn:
            return await server_queries.list_runs_page(
                conn,
                namespace=namespace,
                status=status,
                workflow_type=workflow_type,
                after=after,
                limit=limit,
            )

    async def ready_session_tasks(
        self, *, namespace: str, connection: str, queue: str, types: Sequence[str], limit: int
    ) -> list[tuple[str, str]]:
        """(task id, session id) of ready session attempts on a queue (to explain a poll)."""
        async with self._begin() as conn:
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
        async with self._begin() as conn:
            return await server_queries.worker_registration(conn, worker_id=worker_id)

    async def recorded_signal(
        self, *, run_id: str, signal_id: str
    ) -> server_queries.RecordedSignal | None:
        """The signal first recorded under this id (to tell a resend from a conflict)."""
        async with self._begin() as conn:
            return await server_queries.recorded_signal(conn, run_id=run_id, signal_id=signal_id)

    async def cancel_workflow_now(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> None:
        """Close the run as cancelled at once, as the HTTP control plane's cancel does."""
        await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda conn, run: server_queries.cancel_run_now(conn, run=run, reason=reason),
        )

    async def release_workflow_leases(self, *, worker_id: str) -> int:
        """Hand a departing worker's workflow-task leases back; how many."""
        return await self._txn(
            lambda conn: server_queries.release_workflow_leases(conn, worker_id=worker_id)
        )


@contextlib.asynccontextmanager
async def _dropped_when_broken(conn: AsyncConnection) -> AsyncIterator[Any]:
    """The driver connection under `conn`; invalidated if an error leaves it unusable.

    SQLAlchemy never sees the errors of statements run on the driver, so this does what it does
    for its own: invalidate the connection and mark every pooled connection opened before now
    stale, so the pool reconnects instead of handing out connections a restart killed. A
    connection still inside a transaction (its end was interrupted) is not reused either.
    """
    raw = sql.driver(conn)
    try:
        yield raw
    except BaseException as exc:
        if errors.connection_lost(exc, raw) and not conn.invalidated:
            # Pool-wide, as SQLAlchemy's own disconnect handling does (a private call there too).
            fairy = conn.sync_connection.connection  # type: ignore[union-attr]
            conn.sync_engine.pool._invalidate(fairy, exc, _checkin=False)
            await conn.invalidate(exc)
        raise
    finally:
        if raw.is_in_transaction() and not conn.invalidated:
            await conn.invalidate()


async def _roll_back(raw: Any, txn: Any) -> None:
    """End a failed transaction; the error that failed it is what the caller sees, always.

    A closed connection has no transaction left to end (a cancelled statement can leave it so),
    and one that fails to roll back is dropped by `_dropped_when_broken`, never reused: a
    rollback error must not replace the original error, least of all a task's cancellation.
    """
    if raw.is_closed():
        return
    with contextlib.suppress(Exception):
        await txn.rollback()
