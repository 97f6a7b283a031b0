"""The worker: register, heartbeat, poll durable state, run tasks, repair, drain on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType

import structlog

from burrow.app import App
from burrow.broker.messages import TaskKind, Wake, WakeDisposition
from burrow.config import Settings
from burrow.store import Store, queries
from burrow.store import errors as store_errors
from burrow.store.claims import EagerClaim, QueueFilter, StickyClaim
from burrow.store.models import ClaimedActivityTask, ClaimedWorkflowTask
from burrow.supervision import Backoff, Loops, supervise
from burrow.wake_link import WakeLink
from burrow.worker import activity_tasks, workflow_tasks
from burrow.worker.env import TaskEnv
from burrow.worker.gone_owners import GoneOwners
from burrow.worker.leases import LeaseKeeper
from burrow.worker.polling import ClaimTrigger, Pass, claim_into_slots, poll
from burrow.worker.repair import RepairLoop
from burrow.worker.router import ReadyRouter
from burrow.worker.slots import Slots
from burrow.worker.sticky_cache import Eviction, StickyCache
from burrow.workflow import fingerprints

log = structlog.get_logger("burrow.worker")
DEFAULT_DRAIN_SECONDS = 30.0
NO_REPOLL_SECONDS = 3600.0
STOP_CONSUMING_SECONDS = 5.0
REPOLL_JITTER = 0.2  # workers started together must not re-poll in lockstep
MAX_WORKFLOW_CLAIM_BATCH = 8  # each claimed task loads its run's history in the claim txn
# Started while Postgres is down: retry the registration like the broker connection does.
FIRST_REGISTER_RETRY_SECONDS = 0.1
MAX_REGISTER_RETRY_SECONDS = 5.0
# A loop that fails retries at most a second apart (work resumes within about a second of the
# store coming back); one that ran this long before failing starts its backoff over.
GUARD_MAX_BACKOFF_SECONDS = 1.0
GUARD_HEALTHY_SECONDS = 5.0
# The query poller answers queries and update validations alike (both replay read-only).
QUERY_KINDS = (queries.QUERY, queries.UPDATE_VALIDATION)
# The loops of other objects, by their class; a worker's own loops go by their method name.
_LOOP_NAMES: dict[type, str] = {RepairLoop: "repair_pass", LeaseKeeper: "lease_keeper"}


def new_worker_id() -> str:
    """A worker id unique per process start (S8)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs an App's workflow and activity tasks from Postgres with leases."""

    def __init__(
        self,
        app: App,
        *,
        settings: Settings | None = None,
        store: Store | None = None,
        worker_id: str | None = None,
        task_queue: str | None = None,
        build_id: str | None = None,
        connection: str | None = None,
    ) -> None:
        self.app = app
        # Without explicit settings, the environment's, as for Client.connect() and the CLI.
        self.settings = settings or Settings.load()
        self._owns_store = store is None
        ws = self.settings.worker
        self.worker_id = worker_id or new_worker_id()
        self.task_queue = task_queue or app.task_queue
        # M7: every poller (workflow, query, activity, eager and session claims) serves this
        # connection only; the registration records it.
        self.connection = connection or ws.connection
        kinds = [TaskKind.WORKFLOW, TaskKind.QUERY] if app.workflows else []
        self.router = ReadyRouter(
            namespace=self.settings.namespace,
            connection=self.connection,
            queue=self.task_queue,
            kinds=kinds + ([TaskKind.ACTIVITY] if app.activities else []),
            poke=self._poke,
        )
        # A store passed in keeps its own after-commit hook; this worker then learns of new work
        # by its wakes and re-polls only.
        self.store = store or Store.connect(
            self.settings.database_url,
            pool_size=ws.pool_size(),
            max_payload_bytes=self.settings.max_payload_bytes,
            after_commit=self.router.on_commit,
        )
        self.build_id = build_id
        self.lease = timedelta(seconds=ws.lease_seconds)
        sticky = self.settings.sticky
        # S3: a worker with a cache opts in to sticky routing; without one it only honours the
        # bindings of others.
        self.sticky_cache = StickyCache(
            capacity=ws.sticky_cache_capacity if sticky.enabled and app.workflows else 0,
            max_bytes=ws.sticky_cache_max_bytes,
        )
        self.sticky_ttl = (
            timedelta(seconds=sticky.ttl_seconds) if self.sticky_cache.enabled else None
        )
        self.executor = ThreadPoolExecutor(
            max_workers=ws.concurrency, thread_name_prefix="burrow-activity"
        )
        self.stopping = False
        self.workflow_slots = Slots(ws.workflow_concurrency if app.workflows else 0)
        self.activity_slots = Slots(ws.concurrency if app.activities else 0)
        self._triggers = {kind: ClaimTrigger() for kind in TaskKind}
        self.wakes: WakeLink | None = None
        self.workflow_filter = self._filter(app.workflows)
        self._sticky_claim = StickyClaim(
            enabled=self.settings.sticky.enabled,
            owner_stale=timedelta(seconds=self.settings.sticky.owner_stale_seconds),
            tail_when_bound=self.sticky_cache.enabled,
        )
        self.gone_owners = GoneOwners(self.settings.sticky.owner_stale_seconds)
        self._activity_filter = self._filter(app.activities)
        self.leases = LeaseKeeper(store=self.store, worker_id=self.worker_id, lease=self.lease)
        self.loops = Loops()
        """The background loops' state: failures, restarts, the repair pass's last success."""
        self.repair = RepairLoop(
            store=self.store,
            worker_id=self.worker_id,
            health=self.loops.add(_LOOP_NAMES[RepairLoop]),
            interval=timedelta(seconds=ws.repair_interval_seconds),
            republish_after=timedelta(seconds=self.settings.wakes.ttl_seconds),
            owner_stale=timedelta(seconds=self.settings.sticky.owner_stale_seconds),
        )
        self.env = TaskEnv(
            store=self.store,
            app=app,
            worker_id=self.worker_id,
            task_queue=self.task_queue,
            lease=self.lease,
            max_payload_bytes=self.settings.max_payload_bytes,
            executor=self.executor,
            workflow_slots=self.workflow_slots,
            activity_slots=self.activity_slots,
            eager_claim=self.eager_claim,
            start_workflow_task=self.start_workflow_task,
            start_activity_task=self.start_activity_task,
            is_stopping=lambda: self.stopping,
            sticky_cache=self.sticky_cache,
            sticky_ttl=self.sticky_ttl,
            build_id=self.build_id,
            lease_expires_at=self.leases.expires_at,
        )
        self._activity_jobs: dict[str, asyncio.Task[None]] = {}
        self._workflow_jobs: set[asyncio.Task[None]] = set()
        self._pollers: list[asyncio.Task[None]] = []
        self._keepers: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self._stopping = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------------

    def _filter(self, types: Iterable[str]) -> QueueFilter:
        return QueueFilter(
            namespace=self.settings.namespace,
            connection=self.connection,
            queue=self.task_queue,
            types=sorted(types),
            build_id=self.build_id,
        )

    async def start(self) -> None:
        """Register (waiting out a store outage) and start polling.

        Raises:
            ConfigurationError: The database refused the credentials (CredentialsRejected).
            StoreError: The database is missing or not migrated (DatabaseNotReady), or another
                error retrying cannot fix.
        """
        if not await self._register():
            return  # shutdown() came first: nothing was started
        log.info(
            "worker_started",
            worker_id=self.worker_id,
            namespace=self.settings.namespace,
            connection=self.connection,
            queue=self.task_queue,
            workflows=sorted(self.app.workflows),
            activities=sorted(self.app.activities),
            sticky_cache_capacity=self.sticky_cache.capacity,
        )
        if self.settings.wakes.enabled:
            await self._start_wakes()
        pollers: list[Callable[[], Awaitable[None]]] = []
        if self.app.workflows:
            pollers += [self._workflow_poller, self._query_poller]
        if self.app.activities:
            pollers.append(self._activity_poller)
        if self.settings.worker.repair and self.settings.wakes.worker_repoll:
            # DW_V2_MATCHING_ROLE_QUEUE_WAKE=0: a `burrow matching` process sweeps (M4c).
            pollers.append(self.repair.run)
        self._pollers = [asyncio.create_task(self._guard(fn)) for fn in pollers]
        # Leases and the registration stay alive while draining, until the last task ends.
        keepers = (self.leases.run, self._heartbeat_loop)
        self._keepers = [asyncio.create_task(self._guard(fn)) for fn in keepers]

    async def _register(self) -> bool:
        """Register, retrying with capped backoff while the store is unavailable.

        A worker started before Postgres must wait for it, as it does for RabbitMQ, rather than
        exit and be restart-looped by its supervisor. Configuration errors are not retried.

        Returns:
            True once registered; False when shutdown() was called first.
        """
        delay, attempt = FIRST_REGISTER_RETRY_SECONDS, 1
        while not self.stopping:
            try:
                await self.store.register_worker(
                    worker_id=self.worker_id,
                    namespace=self.settings.namespace,
                    task_queue=self.task_queue,
                    connection=self.connection,
                    workflow_types=sorted(self.app.workflows),
                    activity_types=sorted(self.app.activities),
                    # Its slots, as an HTTP worker declares them: workflow plus activity (M8).
                    concurrency=max(1, self.workflow_slots.total + self.activity_slots.total),
                    build_id=self.build_id,
                    sticky_cache=self.sticky_cache.report(),
                    capabilities=self.settings.worker.capabilities,
                    max_concurrent_worker_sessions=self.settings.worker.max_concurrent_worker_sessions,
                    workflow_fingerprints={
                        name: fingerprints.fingerprint(definition)
                        for name, definition in self.app.workflows.items()
                    },
                    # Updates whose validator is asked before they are accepted (6.5).
                    update_validators={
                        name: sorted(definition.validators)
                        for name, definition in self.app.workflows.items()
                        if definition.validators
                    },
                )
                return True
            except store_errors.StoreUnavailable as exc:
                log.warning(
                    "store_unavailable_at_start",
                    worker_id=self.worker_id,
                    attempt=attempt,
                    retry_in_seconds=delay,
                    error=str(exc),
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
            delay, attempt = min(delay * 2, MAX_REGISTER_RETRY_SECONDS), attempt + 1
        return False

    async def _start_wakes(self) -> None:
        """Publish after commit, consume this queue's wakes, re-poll after every reconnect."""
        self.wakes = WakeLink(self.settings, name=f"burrow-worker:{self.worker_id}")
        await self.wakes.start()
        self.router.attach(self.wakes)
        self.wakes.on_reconnect(self._repoll_now)
        ns, conn, queue = self.settings.namespace, self.connection, self.task_queue
        subscriptions = []
        if self.app.workflows:
            subscriptions += [
                (ns, conn, queue, TaskKind.WORKFLOW),
                (ns, conn, queue, TaskKind.QUERY),
            ]
        if self.app.activities:
            subscriptions.append((ns, conn, queue, TaskKind.ACTIVITY))
        ws = self.settings.worker
        await self.wakes.consume(
            subscriptions,
            on_wake=self._on_wake,
            prefetch=ws.concurrency + ws.workflow_concurrency,
            # C1, S3: wakes for the runs bound here come to this worker's own queue.
            sticky_worker_id=self.worker_id if self.sticky_cache.enabled else None,
        )

    async def run(self) -> None:
        """Start, then serve until shutdown() is called (e.g. from a SIGTERM handler)."""
        await self.start()
        await self._stopped.wait()

    async def shutdown(self, *, drain_seconds: float = DEFAULT_DRAIN_SECONDS) -> None:
        """Drain: stop claiming, let running tasks finish, hand back the rest, deregister."""
        if self.stopping:
            await self._stopped.wait()
            return
        self.stopping = True
        self._stopping.set()
        self.workflow_slots.close()
        self.activity_slots.close()
        # S8: take no new workflow tasks; what is bound here goes to other workers now.
        self.sticky_cache.clear(Eviction.DRAIN)
        with contextlib.suppress(store_errors.StoreError):
            # S11: the hits since the last heartbeat count too (sticky_reports.py).
            await self.store.heartbeat_worker(
                worker_id=self.worker_id, sticky_cache=self.sticky_cache.report()
            )
        with contextlib.suppress(store_errors.StoreError):
            await self.store.drain_worker(worker_id=self.worker_id)
        log.info("worker_draining", worker_id=self.worker_id, running=len(self._activity_jobs))
        for trigger in self._triggers.values():
            trigger.release_all()  # deliveries waiting for a pass are acked; the work stays ready
        if self.wakes is not None:
            # Bounded: a stuck broker channel must not keep the drain from starting.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_CONSUMING_SECONDS):
                    await self.wakes.stop_consuming()
        log.info("worker_stopped_consuming", worker_id=self.worker_id)
        for task in self._pollers:
            task.cancel()
        jobs = [*self._activity_jobs.values(), *self._workflow_jobs]
        if jobs:
            _, pending = await asyncio.wait(jobs, timeout=drain_seconds)
            for job in pending:
                job.cancel()  # activity_tasks reports WorkerShutdown, which retries elsewhere
            if pending:
                await asyncio.wait(pending, timeout=5)
        log.info("worker_jobs_settled", worker_id=self.worker_id)
        for task in self._keepers:
            task.cancel()
        await asyncio.gather(*self._pollers, *self._keepers, return_exceptions=True)
        with contextlib.suppress(store_errors.StoreError):
            await self.store.deregister_worker(worker_id=self.worker_id)
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.wakes is not None:
            self.router.attach(None)
            await self.wakes.close()
        if self._owns_store:
            await self.store.close()
        log.info("worker_stopped", worker_id=self.worker_id)
        self._stopped.set()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    def _poke(self, kind: TaskKind) -> None:
        """Claim now: the router saw work made ready on our queue while wakes are not flowing."""
        self._triggers[kind].poke()

    # -- loops ----------------------------------------------------------------------------------

    async def _guard(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Keep a loop alive whatever it raises; it only ends when cancelled (issue 25 item 1).

        The backoff grows while the loop keeps failing and starts over once it ran for a while,
        so a later outage is retried as promptly as the first (within a second of the store
        coming back). Its failures and restarts are recorded in `self.loops`.
        """
        owner = type(getattr(fn, "__self__", None))
        name = _LOOP_NAMES.get(owner, fn.__name__.strip("_"))
        backoff = Backoff(
            first=self.settings.worker.poll_interval_seconds,
            maximum=GUARD_MAX_BACKOFF_SECONDS,
            healthy_after=GUARD_HEALTHY_SECONDS,
        )
        await supervise(
            fn,
            self.loops.add(name),
            backoff=backoff,
            log=log.bind(worker_id=self.worker_id),
            event="worker_loop_crashed",
            outage_event="store_unavailable",
        )

    async def _idle(self, wake: asyncio.Event, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), delay)
        wake.clear()

    def _poll_delay(self, backoff: float) -> float:
        """How long to wait before re-polling durable state (C4, M5).

        With healthy wakes, a bounded re-poll interval (or none: the matching role owns re-poll
        wakes); without them, durable polling with backoff.
        """
        if self.wakes is not None and self.wakes.healthy:
            if not self.settings.wakes.worker_repoll:
                return NO_REPOLL_SECONDS
            interval = self.settings.wakes.repoll_interval_seconds
            return interval * (1 - REPOLL_JITTER * random.random())
        return backoff

    async def _poll(
        self,
        kind: TaskKind,
        claim_once: Callable[[], Awaitable[Pass]],
        wait_for_capacity: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        ws = self.settings.worker
        await poll(
            self._triggers[kind],
            claim_once,
            self._poll_delay,
            wait_for_capacity=wait_for_capacity,
            min_backoff=ws.poll_interval_seconds,
            max_backoff=ws.max_poll_interval_seconds,
        )

    async def _workflow_poller(self) -> None:
        await self._poll(
            TaskKind.WORKFLOW, self._claim_workflow_once, self.workflow_slots.wait_free
        )

    async def _claim_workflow_once(self) -> Pass:
        """One claim transaction for up to the free workflow slots (capped)."""
        return await claim_into_slots(
            self.workflow_slots,
            MAX_WORKFLOW_CLAIM_BATCH,
            lambda limit: self.store.claim_workflow_tasks(
                flt=self.workflow_filter,
                worker_id=self.worker_id,
                lease=self.lease,
                limit=limit,
                sticky=self.sticky_claim,
                whole_history=False,  # a cold replay reads a long history page by page
            ),
            self.start_workflow_task,
        )

    @property
    def sticky_claim(self) -> StickyClaim:
        """How this worker's claims treat sticky bindings now (with the owners heard as gone)."""
        gone = self.gone_owners.current()
        if not gone:
            return self._sticky_claim
        return dataclasses.replace(self._sticky_claim, gone_owners=gone)

    async def _on_wake(self, wake: Wake) -> WakeDisposition:
        """A delivery: the first claim pass on that queue that starts after it, then ack (C3).

        The pass is the poller's, so wakes arriving while it claims cost one more pass between
        them. With no free slot the wake goes back to the queue for a worker that has one; this
        worker claims as soon as a slot frees in case none does.
        """
        if self.stopping:
            return WakeDisposition.DONE
        if wake.unroutable_owner is not None:
            self.gone_owners.note(wake.unroutable_owner)
        trigger = self._triggers[wake.kind]
        free = {
            TaskKind.WORKFLOW: self.workflow_slots.free,
            TaskKind.ACTIVITY: self.activity_slots.free,
        }.get(wake.kind, 1)
        if free <= 0:
            trigger.poke()
            if wake.sticky_worker_id is not None:
                return WakeDisposition.DONE  # bound here: no other worker may take it anyway
            return WakeDisposition.HAND_BACK
        await trigger.claim_after()
        return WakeDisposition.DONE

    async def _repoll_now(self) -> None:
        """After a (re)connect, re-check durable state before trusting the broker again."""
        log.info("wakes_connected_repolling", worker_id=self.worker_id)
        for trigger in self._triggers.values():
            trigger.poke()
        self.repair.poke()

    # -- slots and jobs (also used by eager dispatch) -------------------------------------------

    def start_workflow_task(self, claimed: ClaimedWorkflowTask) -> None:
        """Run a claimed workflow task; the caller already holds a workflow slot for it."""
        self.leases.hold_workflow(claimed.lease)
        job = asyncio.create_task(self._run_workflow_task(claimed))
        self._workflow_jobs.add(job)
        job.add_done_callback(self._workflow_jobs.discard)

    def start_activity_task(self, task: ClaimedActivityTask) -> None:
        """Run a claimed activity attempt; the caller already holds a slot for it."""
        job = asyncio.create_task(self._run_activity_task(task))
        self._activity_jobs[task.lease.task_id] = job
        self.leases.hold_activity(task.lease, on_lost=job.cancel)

    def eager_claim(self, types: Iterable[str], limit: int = 1) -> EagerClaim:
        """What to lease to this worker when a completion makes work ready on its queue."""
        return EagerClaim(
            flt=self._filter(types),
            worker_id=self.worker_id,
            lease=self.lease,
            limit=limit,
            sticky=self.sticky_claim,
        )

    async def _run_workflow_task(self, claimed: ClaimedWorkflowTask) -> None:
        try:
            outcome = await workflow_tasks.process(self.env, claimed)
        except store_errors.StoreUnavailable as exc:
            log.warning(
                "workflow_task_store_unavailable", task_id=claimed.lease.task_id, error=str(exc)
            )
            outcome = None
        finally:
            self.leases.release(claimed.lease.task_id)
            self.workflow_slots.release()
        if outcome is None:
            return
        if outcome.timers_started or outcome.close_policies_pending:
            self.repair.poke(full=outcome.close_policies_pending)

    async def _activity_poller(self) -> None:
        await self._poll(
            TaskKind.ACTIVITY, self._claim_activities_once, self.activity_slots.wait_free
        )

    async def _claim_activities_once(self) -> Pass:
        """One claim transaction for up to the free activity slots."""
        return await claim_into_slots(
            self.activity_slots,
            self.activity_slots.free,
            lambda limit: self.store.claim_activity_tasks(
                flt=self._activity_filter,
                worker_id=self.worker_id,
                lease=self.lease,
                limit=limit,
                owner_stale=self.repair.owner_stale,  # when a silent session holder is gone (W5)
            ),
            self.start_activity_task,
        )

    async def _run_activity_task(self, task: ClaimedActivityTask) -> None:
        try:
            await activity_tasks.process(self.env, task)
        except store_errors.StoreUnavailable as exc:
            log.warning(
                "activity_task_store_unavailable", task_id=task.lease.task_id, error=str(exc)
            )
        finally:
            self._activity_jobs.pop(task.lease.task_id, None)
            self.leases.release(task.lease.task_id)
            self.activity_slots.release()

    async def _query_poller(self) -> None:
        await self._poll(TaskKind.QUERY, self._claim_query_once)

    async def _claim_query_once(self) -> Pass:
        """Claim and answer one query task."""
        claimed = await self.store.claim_query_task(
            flt=self.workflow_filter, worker_id=self.worker_id, lease=self.lease, kinds=QUERY_KINDS
        )
        if claimed is None:
            return Pass(0, 1)
        await workflow_tasks.answer_query(self.env, claimed)
        return Pass(1, 1)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.worker.heartbeat_interval_seconds)
            await self.store.heartbeat_worker(
                worker_id=self.worker_id, sticky_cache=self.sticky_cache.report()
            )
