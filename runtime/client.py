"""Client: start workflows and talk to them (signal, query, update, cancel, result)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any

from burrow import payloads
from burrow.config import Settings
from burrow.errors import ApplicationError, UnknownWorkflowType, WorkflowFailureError
from burrow.store import Store
from burrow.store.models import HistoryEvent, RunDescription, RunInfo, RunStatus
from burrow.wakes import WakeLink
from burrow.workflow.definition import WorkflowDefinition, get_definition

LIVE_WORKER_SECONDS = 60
RESULT_POLL_MAX_SECONDS = 0.5


def _seconds(value: timedelta | float | None) -> float | None:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


class Client:
    """A connection to one Burrow database and namespace."""

    def __init__(
        self,
        store: Store,
        *,
        settings: Settings,
        owns_store: bool = False,
        wakes: WakeLink | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.namespace = settings.namespace
        self._owns_store = owns_store
        self._wakes = wakes

    @classmethod
    async def connect(
        cls,
        database_url: str | None = None,
        *,
        namespace: str | None = None,
        settings: Settings | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Client:
        """Connect with defaults from BURROW_* environment variables."""
        if settings is None:
            final = Settings.load(environ, database_url=database_url, namespace=namespace)
        else:
            given = {"database_url": database_url, "namespace": namespace}
            final = settings.model_copy(update={k: v for k, v in given.items() if v is not None})
        store = Store.connect(
            final.database_url, pool_size=5, max_payload_bytes=final.max_payload_bytes
        )
        wakes = None
        if final.wakes.enabled:
            # Starts, signals and cancels wake workers at once; without a broker they poll.
            wakes = WakeLink(final, name=f"burrow-client:{os.getpid()}")
            await wakes.start()
            store.after_commit = wakes.publish_ready
        return cls(store, settings=final, owns_store=True, wakes=wakes)

    async def close(self) -> None:
        """Release connections."""
        if self._wakes is not None:
            await self._wakes.close()
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start_workflow(
        self,
        workflow: type | str,
        *args: Any,
        id: str | None = None,
        task_queue: str,
        check_workers: bool = True,
    ) -> WorkflowHandle:
        """Start a run; raises WorkflowAlreadyStarted for a running id, PayloadError for bad input.

        With `check_workers`, a type that live workers on the queue do not declare is refused
        (UnknownWorkflowType) before anything is written; with no live worker it is accepted.
        """
        definition: WorkflowDefinition | None = None
        if isinstance(workflow, str):
            workflow_type = workflow
        else:
            definition = get_definition(workflow)
            workflow_type = definition.name
        arguments = payloads.encode_args(
            args, limit=self.settings.max_payload_bytes, what="workflow input"
        )
        if check_workers:
            await self._check_workflow_type(workflow_type, task_queue)
        run = await self.store.start_workflow(
            namespace=self.namespace,
            workflow_id=id or str(uuid.uuid4()),
            workflow_type=workflow_type,
            task_queue=task_queue,
            input=dict(arguments),
        )
        return WorkflowHandle(self, run.workflow_id, run_id=run.run_id, definition=definition)

    async def _check_workflow_type(self, workflow_type: str, task_queue: str) -> None:
        live = await self.store.live_workers(
            namespace=self.namespace,
            task_queue=task_queue,
            stale_after=timedelta(seconds=LIVE_WORKER_SECONDS),
        )
        if live and not any(workflow_type in types for _, types, _ in live):
            known = sorted({t for _, types, _ in live for t in types})
            raise UnknownWorkflowType(
                workflow_type=workflow_type,
                task_queue=task_queue,
                detail=f"live workers there declare {known}",
            )

    def get_handle(self, workflow_id: str, *, run_id: str | None = None) -> WorkflowHandle:
        """A handle on an existing workflow (latest run unless run_id is given)."""
        return WorkflowHandle(self, workflow_id, run_id=run_id)

    async def list_workflows(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """Recent runs in this namespace."""
        return await self.store.list_workflows(namespace=self.namespace, status=status, limit=limit)


@dataclass
class WorkflowHandle:
    """A workflow id (and optionally one run) to interact with."""

    client: Client
    workflow_id: str
    run_id: str | None = None
    definition: WorkflowDefinition | None = None

    @property
    def _ns(self) -> str:
        return self.client.namespace

    def _result_type(self) -> Any:
        if self.definition is None:
            return Any
        from burrow.workflow.definition import return_type

        return return_type(getattr(self.definition.cls, self.definition.run_method))

    async def describe(self) -> RunDescription:
        """The run's status, open tasks (with attempts and last failures) and any gap."""
        return await self.client.store.describe_workflow(
            namespace=self._ns, workflow_id=self.workflow_id, run_id=self.run_id
        )

    async def history(self) -> list[HistoryEvent]:
        """The run's events with sequence, event_type, payload and recorded_at."""
        run = await self.client.store.get_run(
            namespace=self._ns, workflow_id=self.workflow_id, run_id=self.run_id
        )
        return await self.client.store.read_history(run_id=run.run_id)

    async def result(
        self, *, timeout: timedelta | float | None = None, follow_runs: bool = True
    ) -> Any:
        """Wait for the run to close; return its result or raise WorkflowFailureError."""
        deadline = None if timeout is None else time.monotonic() + float(_seconds(timeout) or 0)
        run_id = self.run_id
        delay = 0.01
        while True:
            run = await self.client.store.get_run(
                namespace=self._ns, workflow_id=self.workflow_id, run_id=run_id
            )
            if run.status == RunStatus.CONTINUED_AS_NEW and follow_runs and run.continued_to_run_id:
                run_id = run.continued_to_run_id
                continue
            if run.status != RunStatus.RUNNING:
                return self._outcome(run)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.workflow_id} still running after {timeout}")
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, RESULT_POLL_MAX_SECONDS)

    def _outcome(self, run: RunInfo) -> Any:
        if run.status == RunStatus.COMPLETED:
            return payloads.decode_value(run.result, self._result_type())
        failure = run.failure or {}
        raise WorkflowFailureError(
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            status=str(run.status),
            message=str(failure.get("message") or run.status),
            failure=failure,
        )

    async def signal(self, name: str, *args: Any, signal_id: str | None = None) -> bool:
        """Send a signal; a repeated `signal_id` is delivered once (returns False)."""
        arguments = payloads.encode_args(
            args, limit=self.client.settings.max_payload_bytes, what="signal arguments"
        )
        return await self.client.store.signal_workflow(
            namespace=self._ns,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            signal_name=name,
            arguments=dict(arguments),
            signal_id=signal_id or str(uuid.uuid4()),
        )

    async def query(self, name: str, *args: Any, timeout: timedelta | float = 10.0) -> Any:
        """Ask a worker to replay the run and answer a query handler."""
        seconds = float(_seconds(timeout) or 10.0)
        arguments = payloads.encode_args(
            args, limit=self.client.settings.max_payload_bytes, what="query arguments"
        )
        task_id = await self.client.store.submit_query(
            namespace=self._ns,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            query_name=name,
            arguments=dict(arguments),
            timeout=timedelta(seconds=seconds),
        )
        row = await _poll(
            lambda: self.client.store.get_query(task_id=task_id), seconds, ("completed", "failed")
        )
        if row is None:
            raise TimeoutError(f"no worker answered query {name!r} within {seconds}s")
        if row.state == "failed":
            raise ApplicationError(
                row.failure.get("message", "query failed"), type=row.failure.get("exception_type")
            )
        return payloads.decode_value(row.result)

    async def update(
        self, name: str, *args: Any, update_id: str | None = None, timeout: timedelta | float = 60.0
    ) -> Any:
        """Run an update handler durably and wait for its result."""
        seconds = float(_seconds(timeout) or 60.0)
        arguments = payloads.encode_args(
            args, limit=self.client.settings.max_payload_bytes, what="update arguments"
        )
        uid = update_id or str(uuid.uuid4())
        run_id = await self.client.store.submit_update(
            namespace=self._ns,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            update_name=name,
            arguments=dict(arguments),
            update_id=uid,
        )
        row = await _poll(
            lambda: self.client.store.get_update(run_id=run_id, update_id=uid),
            seconds,
            ("completed", "failed"),
        )
        if row is None:
            raise TimeoutError(f"update {name!r} not completed within {seconds}s")
        if row.state == "failed":
            failure = row.failure or {}
            raise ApplicationError(
                str(failure.get("message")), type=failure.get("exception_type"), non_retryable=True
            )
        return payloads.decode_value(row.result)

    async def cancel(self, *, reason: str = "") -> None:
        """Request cancellation; the workflow code sees it and may clean up."""
        await self.client.store.cancel_workflow(
            namespace=self._ns, workflow_id=self.workflow_id, run_id=self.run_id, reason=reason
        )

    async def terminate(self, *, reason: str = "") -> None:
        """Close the run immediately without running workflow code."""
        await self.client.store.terminate_workflow(
            namespace=self._ns, workflow_id=self.workflow_id, run_id=self.run_id, reason=reason
        )


async def _poll(fetch: Any, seconds: float, done: tuple[str, ...]) -> Any:
    deadline = time.monotonic() + seconds
    delay = 0.01
    while time.monotonic() < deadline:
        row = await fetch()
        if row is not None and row.state in done:
            return row
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, RESULT_POLL_MAX_SECONDS)
    return None
