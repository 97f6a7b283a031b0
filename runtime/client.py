"""Client: start workflows and talk to them (signal, query, update, cancel, result).

Calls take a workflow's methods themselves (`Checkout.run`, `Checkout.status`), so a type checker
matches arguments and results against their signatures; names (str) still work and give `Any`.
Typed calls take up to four positional arguments: pass more through a dataclass, or use names.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, NotRequired, TypedDict, TypeVar, Unpack, overload

from burrow import payloads
from burrow.config import Settings
from burrow.errors import (
    QueryFailedError,
    UnknownWorkflowType,
    UpdateFailedError,
    WorkflowCancelledError,
    WorkflowFailureError,
)
from burrow.failures import error_from_failure
from burrow.store import Store
from burrow.store.models import (
    HistoryEvent,
    QueryTaskInfo,
    RunDescription,
    RunInfo,
    RunStatus,
    TaskState,
    UpdateInfo,
    UpdateState,
)
from burrow.wakes import WakeLink
from burrow.workflow.definition import (
    WorkflowDefinition,
    definition_of_run,
    get_definition,
    handler_name,
    return_type,
)

LIVE_WORKER_SECONDS = 60
RESULT_POLL_MAX_SECONDS = 0.5

T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
Q = TypeVar("Q")  # a handler's result, apart from the handle's R
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")


class StartOptions(TypedDict):
    """The keyword options of `Client.start_workflow()`, spelled once for its overloads."""

    task_queue: str
    id: NotRequired[str | None]
    check_workers: NotRequired[bool]


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
        wakes = None
        if final.wakes.enabled:
            # Starts, signals and cancels wake workers at once; without a broker they poll.
            wakes = WakeLink(final, name=f"burrow-client:{os.getpid()}")
            await wakes.start()
        store = Store.connect(
            final.database_url,
            pool_size=5,
            max_payload_bytes=final.max_payload_bytes,
            after_commit=None if wakes is None else wakes.publish_ready,
        )
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

    @overload
    async def start_workflow(
        self, workflow: str | type, /, *args: Any, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[Any]: ...

    @overload
    async def start_workflow(
        self, workflow: Callable[[S], Awaitable[R]], /, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self, workflow: Callable[[S, A1], Awaitable[R]], a1: A1, /, **options: Unpack[StartOptions]
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2], Awaitable[R]],
        a1: A1,
        a2: A2,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2, A3], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    @overload
    async def start_workflow(
        self,
        workflow: Callable[[S, A1, A2, A3, A4], Awaitable[R]],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        **options: Unpack[StartOptions],
    ) -> WorkflowHandle[R]: ...

    async def start_workflow(
        self,
        workflow: Callable[..., Awaitable[Any]] | type | str,
        *args: Any,
        id: str | None = None,
        task_queue: str,
        check_workers: bool = True,
    ) -> WorkflowHandle[Any]:
        """Start a run of a workflow given by its run method, its class or its type name.

        `start_workflow(Checkout.run, "order-1", ...)` returns a `WorkflowHandle[str]` when
        `run` returns `str`; a class or a name gives `WorkflowHandle[Any]`.

        Raises WorkflowAlreadyStartedError for a running id and PayloadError for bad input. With
        `check_workers`, a type that live workers on the queue do not declare is refused
        (UnknownWorkflowType) before anything is written; with no live worker it is accepted.
        """
        definition: WorkflowDefinition | None = None
        if isinstance(workflow, str):
            workflow_type = workflow
        else:
            if isinstance(workflow, type):
                definition = get_definition(workflow)
            else:
                definition = definition_of_run(workflow)
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

    def get_handle(self, workflow_id: str, *, run_id: str | None = None) -> WorkflowHandle[Any]:
        """A handle on an existing workflow (latest run unless run_id is given)."""
        return WorkflowHandle(self, workflow_id, run_id=run_id)

    async def list_workflows(self, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """Recent runs in this namespace."""
        return await self.store.list_workflows(namespace=self.namespace, status=status, limit=limit)


@dataclass
class WorkflowHandle(Generic[R]):
    """A workflow id (and optionally one run) to interact with; `result()` returns an `R`."""

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
    ) -> R:
        """Wait for the run to close and return its result.

        Raises:
            WorkflowCancelledError: The run was cancelled.
            WorkflowFailureError: The run failed or was terminated; `cause` is the failure.
            TimeoutError: The run is still open after `timeout`.
        """
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

    def _outcome(self, run: RunInfo) -> R:
        if run.status == RunStatus.COMPLETED:
            value: R = payloads.decode_value(run.result, self._result_type())
            return value
        failure = run.failure or {}
        message = str(failure.get("message") or run.status)
        if run.status == RunStatus.CANCELLED:
            raise WorkflowCancelledError(
                run_id=run.run_id, workflow_id=run.workflow_id, message=message, failure=failure
            )
        cause = error_from_failure(failure) if run.status == RunStatus.FAILED else None
        raise WorkflowFailureError(
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            status=str(run.status),
            message=message,
            failure=failure,
            cause=cause,
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

    @overload
    async def query(self, query: Callable[[S], Q], /, *, timeout: timedelta | float = ...) -> Q: ...

    @overload
    async def query(
        self, query: Callable[[S, A1], Q], a1: A1, /, *, timeout: timedelta | float = ...
    ) -> Q: ...

    @overload
    async def query(
        self,
        query: Callable[[S, A1, A2], Q],
        a1: A1,
        a2: A2,
        /,
        *,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def query(
        self,
        query: Callable[[S, A1, A2, A3], Q],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def query(self, query: str, /, *args: Any, timeout: timedelta | float = ...) -> Any: ...

    async def query(
        self, query: Callable[..., Any] | str, *args: Any, timeout: timedelta | float = 10.0
    ) -> Any:
        """Ask a worker to replay the run and answer a query handler.

        `query` is a `@workflow.query` method (`Checkout.status`, typed) or its name.

        Raises:
            QueryFailedError: The handler raised (or there is no such query); `cause` says why.
            TimeoutError: No worker answered within `timeout`.
        """
        name = query if isinstance(query, str) else handler_name(query, "query")
        hint = Any if isinstance(query, str) else return_type(query)
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
            lambda: self.client.store.get_query(task_id=task_id), seconds, _query_done
        )
        if row is None:
            raise TimeoutError(f"no worker answered query {name!r} within {seconds}s")
        if row.state == TaskState.FAILED:
            raise QueryFailedError(
                workflow_id=self.workflow_id,
                query_name=name,
                cause=error_from_failure(row.failure or {"message": "query failed"}),
            )
        return payloads.decode_value(row.result, hint)

    @overload
    async def update(
        self,
        update: Callable[[S], Awaitable[Q]],
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1], Awaitable[Q]],
        a1: A1,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1, A2], Awaitable[Q]],
        a1: A1,
        a2: A2,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1, A2, A3], Awaitable[Q]],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S], Q],
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1], Q],
        a1: A1,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1, A2], Q],
        a1: A1,
        a2: A2,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: Callable[[S, A1, A2, A3], Q],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Q: ...

    @overload
    async def update(
        self,
        update: str,
        /,
        *args: Any,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Any: ...

    async def update(
        self,
        update: Callable[..., Any] | str,
        *args: Any,
        update_id: str | None = None,
        timeout: timedelta | float = 60.0,
    ) -> Any:
        """Run an update handler durably and wait for its result.

        `update` is a `@workflow.update` method (`Checkout.add_item`, typed) or its name; a
        repeated `update_id` is applied once and returns the first outcome.

        Raises:
            UpdateFailedError: The handler raised (or there is no such update); `cause` says why.
            TimeoutError: The update did not complete within `timeout`.
        """
        name = update if isinstance(update, str) else handler_name(update, "update")
        hint = Any if isinstance(update, str) else return_type(update)
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
            _update_done,
        )
        if row is None:
            raise TimeoutError(f"update {name!r} not completed within {seconds}s")
        if row.state == UpdateState.FAILED:
            raise UpdateFailedError(
                workflow_id=self.workflow_id,
                update_name=name,
                update_id=uid,
                cause=error_from_failure(row.failure or {"message": "update failed"}),
            )
        return payloads.decode_value(row.result, hint)

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


def _query_done(row: QueryTaskInfo) -> bool:
    return row.state in (TaskState.COMPLETED, TaskState.FAILED)


def _update_done(row: UpdateInfo) -> bool:
    return row.state in (UpdateState.COMPLETED, UpdateState.FAILED)


async def _poll(
    fetch: Callable[[], Awaitable[T | None]], seconds: float, is_done: Callable[[T], bool]
) -> T | None:
    deadline = time.monotonic() + seconds
    delay = 0.01
    while time.monotonic() < deadline:
        row = await fetch()
        if row is not None and is_done(row):
            return row
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, RESULT_POLL_MAX_SECONDS)
    return None
