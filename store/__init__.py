"""The Store facade: one method per transaction, delegating to the SQL modules.

Transactions are opened by `transactions.Transactions`; the methods are grouped by who calls
them: the client plane here, the worker plane (worker_plane.py), and operators and the HTTP
server (operator_plane.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

import asyncpg
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from burrow.store import (
    children,
    errors,
    external_payloads,
    message_streams,
    operator,
    payloads,
    queries,
    ready,
    runs,
    server_epochs,
    signals,
    standalone,
    start_batches,
    workers,
    workflow_streams,
    workflow_views,
)
from burrow.store.change_marks import ChangeMarks
from burrow.store.engine import DEFAULT_APPLICATION_NAME, create_engine
from burrow.store.models import (
    HistoryEvent,
    IdReusePolicy,
    JsonDict,
    QueryTaskInfo,
    RunDescription,
    RunInfo,
    RunRow,
    RunStatus,
    UpdateInfo,
)
from burrow.store.namespace_plane import NamespacePlane
from burrow.store.operator_plane import OperatorPlane
from burrow.store.prepared_plane import PreparedLocalPlane
from burrow.store.schedule_plane import SchedulePlane
from burrow.store.transactions import AfterCommit, Transactions, Txn
from burrow.store.visibility_plane import VisibilityPlane
from burrow.store.worker_plane import WorkerPlane

__all__ = ["Store"]

HEALTH_TIMEOUT_SECONDS = 5.0


class Store(
    WorkerPlane,
    OperatorPlane,
    PreparedLocalPlane,
    SchedulePlane,
    VisibilityPlane,
    NamespacePlane,
    ChangeMarks,
):
    """Durable state of one database: every public method is one transaction."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        after_commit: AfterCommit | None = None,
    ):
        self.engine = engine
        self.server_epochs = server_epochs.watch(engine)  # which server: sticky entries check it
        self.transactions = Transactions(engine, after_commit=after_commit)
        self.max_payload_bytes = max_payload_bytes
        self._starts = start_batches.StartBatcher(self._create_runs)

    @classmethod
    def connect(
        cls,
        database_url: str,
        *,
        pool_size: int = 10,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        after_commit: AfterCommit | None = None,
        application_name: str = DEFAULT_APPLICATION_NAME,
    ) -> Store:
        """Create a store on a new engine (connections open lazily), named `application_name`."""
        engine = create_engine(database_url, pool_size=pool_size, application_name=application_name)
        return cls(engine, max_payload_bytes=max_payload_bytes, after_commit=after_commit)

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self.engine.dispose()

    async def reachable(self, *, timeout: float = HEALTH_TIMEOUT_SECONDS) -> bool:
        """Whether the database answers a `SELECT 1` within `timeout` seconds (health check).

        Not retried: the caller asks about now. A pool with no free connection for `timeout`
        seconds counts as unreachable too.
        """
        try:
            async with asyncio.timeout(timeout), self.engine.connect() as conn:
                await conn.execute(sa.text("SELECT 1"))
        except (TimeoutError, OSError, SQLAlchemyError, asyncpg.PostgresError):
            return False
        return True

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
        workflow_definition_fingerprint: str | None = None,
        execution_timeout_seconds: float | None = None,
        run_timeout_seconds: float | None = None,
        retry_policy: JsonDict | None = None,
        memo: JsonDict | None = None,
        search_attributes: Mapping[str, object] | None = None,
    ) -> RunInfo:
        """Create a run, its `WorkflowStarted` event and first workflow task.

        `build_id` pins the run to workers of that build (M7); `workflow_definition_fingerprint`
        is recorded in `WorkflowStarted` (S8), or, when None, the one the active worker of the
        queue (and build) heard from last registered for the type.

        `notify_queue`: the starting client's broker queue, which hears the run's changes unbound.
        `id_reuse_policy` decides, in the inserting statement, whether the runs the id already
        has refuse the start. `run_id`: the new run's id (default a new UUID), by which a
        `USE_EXISTING` caller tells a created run from the running one returned. The timeouts
        (validated by the caller: `shapes.check_workflow_timeouts`) set the run's deadlines;
        `retry_policy` (the RetrySpec shape) retries its failed runs (store/run_retries.py).

        `memo` (any JSON object) and `search_attributes` (typed by the namespace's registry)
        are the run's visibility metadata: such a start is written alone, in a transaction.

        Raises:
            WorkflowAlreadyStartedError: the policy refused the start; nothing was written.
            InvalidSearchAttribute, PayloadError, PayloadTooLarge: bad metadata; nothing written.
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
            workflow_definition_fingerprint=workflow_definition_fingerprint,
            execution_timeout_seconds=execution_timeout_seconds,
            run_timeout_seconds=run_timeout_seconds,
            retry_policy=retry_policy,
            memo=memo,
            search_attributes=search_attributes,
        )
        try:
            if memo or search_attributes:
                outcome = await self.transactions.run(lambda txn: runs.create_runs(txn, [new]))
                return runs.answer_start(new, outcome[0])
            # Starts asked for concurrently share a statement and its commit (start_batches.py).
            return await self._starts.start(new)
        except errors.WorkflowAlreadyStartedError:
            if id_reuse_policy is not IdReusePolicy.USE_EXISTING:
                raise
        # A running run begun after the statement did (or in its batch) is returned too: read.
        latest = await self.get_run(namespace=namespace, workflow_id=workflow_id)
        return runs.answer_start(new, runs.Refused(latest))

    async def start_activity(
        self, new: standalone.NewStandaloneActivity
    ) -> standalone.StandaloneActivityInfo:
        """Start a standalone activity: its host run and activity task, in one transaction.

        Raises:
            WorkflowAlreadyStartedError: a run of the activity id exists; nothing was written.
        """
        self.check_payload(new.arguments, "activity input")
        return await self.transactions.run(lambda txn: standalone.start(txn, new))

    async def describe_activity(
        self, *, namespace: str, activity_id: str
    ) -> standalone.StandaloneActivityInfo | None:
        """The latest standalone activity of that id; None when there is none."""
        async with self.transactions.begin() as conn:
            return await standalone.describe(conn, namespace=namespace, activity_id=activity_id)

    async def list_activities(
        self,
        *,
        namespace: str,
        statuses: Sequence[RunStatus] | None = None,
        after: tuple[datetime, str] | None = None,
        limit: int = 100,
    ) -> standalone.StandalonePage:
        """A page of the namespace's standalone activities, newest first."""
        async with self.transactions.begin() as conn:
            return await standalone.list_page(
                conn, namespace=namespace, statuses=statuses, after=after, limit=limit
            )

    async def _create_runs(self, wanted: Sequence[runs.NewRun]) -> list[RunInfo | runs.Refused]:
        return await self.transactions.statement(lambda txn: runs.create_runs(txn, wanted))

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
            lambda txn, run: signals.signal_run(
                txn, run=run, signal_name=signal_name, arguments=arguments, signal_id=signal_id
            ),
        )

    async def append_message(
        self,
        *,
        namespace: str,
        workflow_id: str,
        stream_name: str,
        message_id: str,
        payload: JsonDict,
        signal_name: str,
        signal_arguments: Callable[[int], JsonDict],
    ) -> message_streams.AppendedMessage:
        """Append a message to the workflow id's stream once per id, with its carrying signal.

        The message goes to the id's current run (the one a continue-as-new racing this made,
        once it commits); its position and id count across the id's runs (message_streams).

        Raises:
            WorkflowNotFoundError: no run has the workflow id.
            WorkflowNotRunningError: the run is closed (and the id is new to the stream).
        """
        self.check_payload(payload, "message")

        async def body(txn: Txn[AsyncConnection]) -> message_streams.AppendedMessage:
            run = await message_streams.lock_current_run(
                txn.conn, namespace=namespace, workflow_id=workflow_id
            )
            return await message_streams.append_message(
                txn,
                run=run,
                stream_name=stream_name,
                message_id=message_id,
                payload=payload,
                signal_name=signal_name,
                signal_arguments=signal_arguments,
            )

        return await self.transactions.run(body)

    async def list_workflow_streams(
        self, *, namespace: str, workflow_id: str, run_id: str
    ) -> list[workflow_streams.StreamState]:
        """The run's output streams, by name.

        Raises:
            WorkflowNotFoundError: no such run of the workflow id.
        """
        async with self.transactions.begin() as conn:
            await runs.find_run(conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id)
            return await workflow_streams.list_streams(conn, run_id=run_id)

    async def read_workflow_stream(
        self,
        *,
        namespace: str,
        workflow_id: str,
        run_id: str,
        stream_name: str,
        from_offset: int = 0,
        limit: int = 0,
    ) -> tuple[RunRow, workflow_streams.StreamState | None, list[workflow_streams.StreamItem]]:
        """The run, its stream (None when it has none of the name) and up to `limit` items.

        Resuming from `from_offset` (with `limit` > 0) marks the items below it delivered.

        Raises:
            WorkflowNotFoundError: no such run of the workflow id.
        """

        async def read(
            txn: Txn[AsyncConnection],
        ) -> tuple[RunRow, workflow_streams.StreamState | None, list[workflow_streams.StreamItem]]:
            run = await runs.find_run(
                txn.conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            if limit < 1:
                stream = await workflow_streams.get_stream(
                    txn.conn, run_id=run_id, stream_name=stream_name
                )
                return run, stream, []
            stream, items = await workflow_streams.read_items(
                txn.conn,
                run_id=run_id,
                stream_name=stream_name,
                from_offset=from_offset,
                limit=limit,
            )
            return run, stream, items

        return await self.transactions.run(read)

    async def append_workflow_stream(
        self,
        *,
        namespace: str,
        workflow_id: str,
        run_id: str,
        stream_name: str,
        items: Sequence[workflow_streams.NewItem],
        max_pending_items: int | None = None,
    ) -> workflow_streams.Appended:
        """Append a client's items to the run's output stream (see workflow_streams.append).

        Raises:
            WorkflowNotFoundError: no such run of the workflow id.
            WorkflowNotRunningError, StreamTerminal, StreamFull, ItemKeyConflict: refused.
        """
        for item in items:
            self.check_payload(item.payload, "workflow stream item")
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: workflow_streams.append(
                txn,
                run=run,
                stream_name=stream_name,
                items=items,
                origin=workflow_streams.ItemOrigin.CLIENT,
                max_pending_items=max_pending_items,
            ),
        )

    async def close_workflow_stream(
        self,
        *,
        namespace: str,
        workflow_id: str,
        run_id: str,
        stream_name: str,
        error_reason: str | None = None,
        retention_seconds: int | None = None,
    ) -> workflow_streams.StreamState:
        """Close (or error) the run's output stream.

        Raises:
            WorkflowNotFoundError: no such run of the workflow id.
            StreamTerminal: the stream already ended another way.
        """
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: workflow_streams.close(
                txn,
                run=run,
                stream_name=stream_name,
                error_reason=error_reason,
                retention_seconds=retention_seconds,
            ),
        )

    async def put_external_payload(
        self, *, namespace: str, codec: str, sha256: str, data: bytes
    ) -> external_payloads.StoredPayload:
        """Keep an uploaded payload blob (digest checked by the caller); its reference."""
        return await self.transactions.run(
            lambda txn: external_payloads.put(
                txn.conn, namespace=namespace, codec=codec, sha256=sha256, data=data
            )
        )

    async def read_external_payloads(
        self, *, namespace: str, reference_ids: Sequence[str]
    ) -> dict[str, external_payloads.StoredPayload]:
        """The namespace's uploaded blobs of these references, by id (unknown ones left out)."""
        async with self.transactions.begin() as conn:
            return await external_payloads.get_many(
                conn, namespace=namespace, reference_ids=reference_ids
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

        async def accept(txn: Txn[AsyncConnection], run: RunRow) -> str:
            await runs.accept_update(
                txn, run=run, update_name=update_name, arguments=arguments, update_id=update_id
            )
            return run.run_id

        return await self._on_run(namespace, workflow_id, run_id, accept)

    async def get_update(self, *, run_id: str, update_id: str) -> UpdateInfo | None:
        """The update's state, result and failure, or None."""
        async with self.transactions.begin() as conn:
            return await runs.get_update(conn, run_id=run_id, update_id=update_id)

    async def cancel_workflow(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> bool:
        """Request cancellation; the workflow code sees it at its next await."""
        return await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: runs.request_cancel(txn, run=run, reason=reason),
        )

    async def terminate_workflow(
        self, *, namespace: str, workflow_id: str, reason: str = "", run_id: str | None = None
    ) -> None:
        """Close the run now without running workflow code."""
        await self._on_run(
            namespace,
            workflow_id,
            run_id,
            lambda txn, run: children.terminate(txn, run=run, reason=reason),
        )

    async def closed_runs(self, run_ids: Sequence[str]) -> dict[str, ready.RunOutcome | None]:
        """Which of these runs have closed, and how (the result waiters' fallback poll).

        An outcome too large to carry is None: its waiter reads the run.
        """
        async with self.transactions.one_statement() as conn:
            return await queries.closed_runs(conn, run_ids=run_ids)

    async def get_run(
        self, *, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunInfo:
        """The run (latest of the workflow id unless run_id is given)."""
        async with self.transactions.one_statement() as conn:
            run = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
        return run.info()

    async def describe_workflow(
        self, *, namespace: str, workflow_id: str, run_id: str | None = None
    ) -> RunDescription:
        """The run plus its open workflow task, open activities and any compatibility gap."""
        async with self.transactions.begin() as conn:
            run = await runs.find_run(
                conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            return await operator.describe_run(conn, run=run)

    async def read_history(self, *, run_id: str, after_seq: int = 0) -> list[HistoryEvent]:
        """A run's history events after `after_seq`, read page by page."""
        return await self._history_pages(run_id, after_seq)

    async def list_workflows(
        self,
        *,
        namespace: str,
        status: str | None = None,
        workflow_type: str | None = None,
        limit: int = 100,
        archived: bool | None = None,
    ) -> list[RunInfo]:
        """Recent runs of a namespace (of one workflow type if given), newest first.

        Archived runs too, unless `archived` keeps only them (True) or leaves them out (False).
        """
        async with self.transactions.begin() as conn:
            return await workflow_views.list_runs(
                conn,
                namespace=namespace,
                status=status,
                workflow_type=workflow_type,
                limit=limit,
                archived=archived,
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

        async def body(txn: Txn[AsyncConnection]) -> str:
            run = await runs.find_run(
                txn.conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            return await queries.submit_query(
                txn, run=run, query_name=query_name, arguments=arguments, timeout=timeout
            )

        return await self.transactions.run(body)

    async def submit_update_validation(
        self,
        *,
        namespace: str,
        workflow_id: str,
        update_name: str,
        arguments: JsonDict,
        timeout: timedelta,
        run_id: str | None = None,
        update_id: str | None = None,
    ) -> str | None:
        """An update validation task for the run; None when it needs no approval.

        It needs one when a worker of the run's queue declares a validator for `update_name`,
        unless the run holds the update `update_id` already (a resent update, approved before).
        """
        self.check_payload(arguments, "update arguments")

        async def body(txn: Txn[AsyncConnection]) -> str | None:
            run = await runs.find_run(
                txn.conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            if not await queries.validators_declared(txn.conn, run=run, update_name=update_name):
                return None
            if update_id is not None and await runs.get_update(
                txn.conn, run_id=run.run_id, update_id=update_id
            ):
                return None
            return await queries.submit_query(
                txn,
                run=run,
                query_name=update_name,
                arguments=arguments,
                timeout=timeout,
                task_kind=queries.UPDATE_VALIDATION,
            )

        return await self.transactions.run(body)

    async def get_query(self, *, task_id: str) -> QueryTaskInfo | None:
        """The query task's state, result and failure, or None."""
        async with self.transactions.begin() as conn:
            return await queries.get_query(conn, task_id=task_id)

    async def live_workers(
        self, *, namespace: str, task_queue: str, stale_after: timedelta
    ) -> list[tuple[str, list[str], list[str]]]:
        """Live workers on a queue with their declared types."""
        async with self.transactions.begin() as conn:
            return await workers.live_workers(
                conn, namespace=namespace, task_queue=task_queue, stale_after=stale_after
            )
