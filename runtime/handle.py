"""WorkflowHandle: one workflow id (and optionally one run) to signal, query, update and await.

Calls take the workflow's own methods (`Checkout.status`), so a type checker matches arguments
and results against their signatures; names (str) still work and give `Any`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

import structlog

from burrow import payloads
from burrow.codec import Payload
from burrow.errors import (
    QueryFailedError,
    UpdateFailedError,
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
)
from burrow.failures import error_from_failure
from burrow.outcomes import (
    ClosedRun,
    query_done,
    timeout_seconds,
    update_done,
)
from burrow.store.errors import StoreUnavailable
from burrow.store.models import (
    HistoryEvent,
    RunDescription,
    RunInfo,
    RunStatus,
    TaskState,
    UpdateState,
)
from burrow.workflow.definition import (
    WorkflowDefinition,
    handler_name,
    return_type,
)

if TYPE_CHECKING:
    from burrow.client import Client

OUTAGE_RETRY_SECONDS = 0.5
JUST_STARTED_SECONDS = 0.001
"""`result()` called this soon after the run's start skips its first read: the run cannot have
closed yet (a workflow task alone takes longer), so the close wake answers it."""
log = structlog.get_logger("burrow.client")
# The narrower error a run closed so raises from result(); any other close without a result
# (failed) raises WorkflowFailureError itself.
_FAILURE_ERRORS: dict[RunStatus, type[WorkflowFailureError]] = {
    RunStatus.TERMINATED: WorkflowTerminatedError,
    RunStatus.TIMED_OUT: WorkflowTimedOutError,
}


def id_or_new(value: str | None, *, what: str) -> str:
    """`value`, or a new random id when it is None.

    Raises:
        ValueError: `value` is empty or blank. A random id in its place would make a retried
            call a second call (ids are what makes calls idempotent).
    """
    if value is None:
        return str(uuid.uuid4())
    if not value.strip():
        raise ValueError(f"{what} {value!r} is empty or blank; pass None for a new random id")
    return value


T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
Q = TypeVar("Q")  # a handler's result, apart from the handle's R
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")


@dataclass
class WorkflowHandle(Generic[R]):
    """A workflow id (and optionally one run) to interact with; `result()` returns an `R`."""

    client: Client
    workflow_id: str
    run_id: str | None = None
    definition: WorkflowDefinition | None = None
    _started_at: float | None = field(default=None, repr=False, compare=False)
    """When this client's `start_workflow` returned the run (monotonic), for `result()`."""
    _notify_queue: str | None = field(default=None, repr=False, compare=False)
    """The client queue the run sends its changes to, named when this client started it."""

    @property
    def _ns(self) -> str:
        return self.client.namespace

    def _result_type(self) -> object:
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
            WorkflowTerminatedError: The run was terminated.
            WorkflowTimedOutError: The run passed its run or execution timeout (and was not
                retried).
            WorkflowFailureError: The run failed; `cause` is the failure.
            TimeoutError: The run is still open after `timeout`.

        A store outage while waiting is waited out (logged), within `timeout`.
        """
        deadline = None
        if timeout is not None:
            deadline = time.monotonic() + timeout_seconds("result() timeout", timeout, 0.0)
        run_id = self.run_id
        while True:
            run = await self._closed_run(run_id, deadline, timeout)
            # A run continued as new, or failed (or timed out) and retried, goes on in the next.
            if run.status != RunStatus.COMPLETED and follow_runs and run.continued_to_run_id:
                run_id = run.continued_to_run_id
                continue
            return self._outcome(run)

    async def _closed_run(
        self, run_id: str | None, deadline: float | None, timeout: object
    ) -> ClosedRun:
        """The run once it is closed: from its change, else read back, else the fallback poll."""
        if run_id is None:  # the latest run of the workflow id: learn which before watching
            run = await self._read_run(None, deadline)
            if run.status != RunStatus.RUNNING:
                return ClosedRun.of(run)
            run_id = run.run_id
        watched = run_id
        closed = await self.client.runs.wait_closed(
            watched,
            lambda: self._read_run(watched, deadline),
            deadline=deadline,
            skip_first_read=self._just_started(watched),
            notify_queue=self._notify_queue if run_id == self.run_id else None,
        )
        if closed is None:
            raise TimeoutError(f"workflow {self.workflow_id} still running after {timeout}")
        return closed

    def _just_started(self, run_id: str) -> bool:
        """Whether this is the first wait on a run this client started within JUST_STARTED."""
        started, self._started_at = self._started_at, None
        return (
            run_id == self.run_id
            and started is not None
            and time.monotonic() - started < JUST_STARTED_SECONDS
        )

    async def _read_run(self, run_id: str | None, deadline: float | None) -> RunInfo:
        """The run, waiting out a store outage (logged) until the deadline."""
        while True:
            try:
                return await self.client.store.get_run(
                    namespace=self._ns, workflow_id=self.workflow_id, run_id=run_id
                )
            except StoreUnavailable as exc:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                log.warning(
                    "result_wait_store_unavailable",
                    workflow_id=self.workflow_id,
                    run_id=run_id,
                    error=str(exc),
                )
                await asyncio.sleep(OUTAGE_RETRY_SECONDS)

    def _outcome(self, run: ClosedRun) -> R:
        if run.status == RunStatus.COMPLETED:
            value: R = payloads.decode_value(run.result, self._result_type())
            return value
        failure = run.failure or {}
        message = str(failure.get("message") or run.status)
        if run.status == RunStatus.CANCELLED:
            raise WorkflowCancelledError(
                run_id=run.run_id, workflow_id=self.workflow_id, message=message, failure=failure
            )
        error = _FAILURE_ERRORS.get(run.status, WorkflowFailureError)
        cause = error_from_failure(failure) if run.status == RunStatus.FAILED else None
        raise error(
            run_id=run.run_id,
            workflow_id=self.workflow_id,
            status=str(run.status),
            message=message,
            failure=failure,
            cause=cause,
        )

    @overload
    async def signal(
        self, signal: Callable[[S], object], /, *, signal_id: str | None = ...
    ) -> bool: ...

    @overload
    async def signal(
        self, signal: Callable[[S, A1], object], a1: A1, /, *, signal_id: str | None = ...
    ) -> bool: ...

    @overload
    async def signal(
        self,
        signal: Callable[[S, A1, A2], object],
        a1: A1,
        a2: A2,
        /,
        *,
        signal_id: str | None = ...,
    ) -> bool: ...

    @overload
    async def signal(
        self,
        signal: Callable[[S, A1, A2, A3], object],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        signal_id: str | None = ...,
    ) -> bool: ...

    @overload
    async def signal(self, signal: str, /, *args: object, signal_id: str | None = ...) -> bool: ...

    async def signal(
        self, signal: Callable[..., object] | str, /, *args: object, signal_id: str | None = None
    ) -> bool:
        """Send a signal; a repeated `signal_id` is delivered once (returns False).

        `signal` is a `@workflow.signal` method (`Checkout.bump`, typed) or its name. Given the
        method, the arguments are checked against its signature first, as the worker will.

        Raises:
            InvalidArgumentsError: The arguments do not fit the given handler; nothing was
                written. (By name, the worker skips such a signal and counts it in describe().)
        """
        name = signal if isinstance(signal, str) else handler_name(signal, "signal")
        arguments = self._encode_for(signal, args, what="signal")
        return await self.client.store.signal_workflow(
            namespace=self._ns,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            signal_name=name,
            arguments=dict(arguments),
            signal_id=id_or_new(signal_id, what="signal_id"),
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
    async def query(
        self, query: str, /, *args: object, timeout: timedelta | float = ...
    ) -> Any: ...

    async def query(
        self, query: Callable[..., object] | str, *args: object, timeout: timedelta | float = 10.0
    ) -> Any:
        """Ask a worker to replay the run and answer a query handler.

        `query` is a `@workflow.query` method (`Checkout.status`, typed) or its name.

        Raises:
            QueryFailedError: The handler raised (or there is no such query); `cause` says why.
            TimeoutError: No worker answered within `timeout`.
        """
        name = query if isinstance(query, str) else handler_name(query, "query")
        hint = Any if isinstance(query, str) else return_type(query)
        seconds = timeout_seconds("query() timeout", timeout, 10.0)
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
        row = await self.client.runs.wait_for(
            task_id, lambda: self.client.store.get_query(task_id=task_id), query_done, seconds
        )
        if row is None or not query_done(row):
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
        *args: object,
        update_id: str | None = ...,
        timeout: timedelta | float = ...,
    ) -> Any: ...

    async def update(
        self,
        update: Callable[..., object] | str,
        *args: object,
        update_id: str | None = None,
        timeout: timedelta | float = 60.0,
    ) -> Any:
        """Run an update handler durably and wait for its result.

        `update` is a `@workflow.update` method (`Checkout.add_item`, typed) or its name; a
        repeated `update_id` is applied once and returns the first outcome.

        Raises:
            InvalidArgumentsError: The arguments do not fit the given handler; nothing was
                written.
            UpdateFailedError: The handler raised, there is no such update, or its arguments do
                not fit (type `InvalidUpdateArguments`); `cause` says why.
            TimeoutError: The update did not complete within `timeout`.
        """
        name = update if isinstance(update, str) else handler_name(update, "update")
        hint = Any if isinstance(update, str) else return_type(update)
        seconds = timeout_seconds("update() timeout", timeout, 60.0)
        arguments = self._encode_for(update, args, what="update")
        uid = id_or_new(update_id, what="update_id")
        run_id = await self.client.store.submit_update(
            namespace=self._ns,
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            update_name=name,
            arguments=dict(arguments),
            update_id=uid,
        )
        row = await self.client.runs.wait_for(
            run_id,
            lambda: self.client.store.get_update(run_id=run_id, update_id=uid),
            update_done,
            seconds,
        )
        if row is None or not update_done(row):
            raise TimeoutError(f"update {name!r} not completed within {seconds}s")
        if row.state == UpdateState.FAILED:
            raise UpdateFailedError(
                workflow_id=self.workflow_id,
                update_name=name,
                update_id=uid,
                cause=error_from_failure(row.failure or {"message": "update failed"}),
            )
        return payloads.decode_value(row.result, hint)

    def _encode_for(
        self, handler: Callable[..., object] | str, args: tuple[object, ...], *, what: str
    ) -> Payload:
        """Encode a handler's arguments; with the handler itself, refuse what would not bind."""
        arguments = payloads.encode_args(
            args, limit=self.client.settings.max_payload_bytes, what=f"{what} arguments"
        )
        if not isinstance(handler, str):
            label = f"{what} {getattr(handler, '__qualname__', handler)!r}"
            payloads.bind_args(arguments, handler, handler=label, skip_self=True)
        return arguments

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
