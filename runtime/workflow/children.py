"""Child workflows: `workflow.start_child_workflow()` and `workflow.execute_child_workflow()`.

A child is a workflow run started by a step of its parent. Its id defaults to one derived from
the parent's run and step (deterministic, so a retried task never starts a second child); its
workflow tasks go to the parent's queue unless `task_queue` says otherwise. The parent hears its
close as history, like an activity's result: `await handle` returns the child's result or raises
ChildWorkflowError with the child's own failure as its cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypedDict, TypeVar, Unpack, overload

from burrow.protocol.shapes import check_workflow_timeouts
from burrow.workflow import context
from burrow.workflow.definition import definition_of_run, handler_name, return_type
from burrow.workflow.options import Duration, RetryPolicy, to_seconds
from burrow.workflow.visibility import SearchAttributeValue

R = TypeVar("R")
A1 = TypeVar("A1")
A2 = TypeVar("A2")
A3 = TypeVar("A3")
A4 = TypeVar("A4")


class ParentClosePolicy(StrEnum):
    """What happens to a child still running when its parent closes (for any reason).

    Applied once, by the store, when the parent's last run closes; a parent that continues as
    new keeps its children running.
    """

    TERMINATE = "terminate"
    REQUEST_CANCEL = "request_cancel"
    ABANDON = "abandon"


class ChildCancellationPolicy(StrEnum):
    """What the parent does for its child when the code awaiting the child is cancelled.

    `TRY_CANCEL` asks the child to cancel and raises at once; `WAIT_CANCELLATION_COMPLETED`
    asks and raises once the child has closed; `ABANDON` leaves the child alone.
    """

    TRY_CANCEL = "try_cancel"
    WAIT_CANCELLATION_COMPLETED = "wait_cancellation_completed"
    ABANDON = "abandon"


class ChildWorkflowOptions(TypedDict, total=False):
    """The keyword options of the child workflow calls, spelled once for their overloads."""

    id: str | None
    task_queue: str | None
    connection: str | None
    parent_close_policy: ParentClosePolicy
    cancellation_policy: ChildCancellationPolicy
    retry_policy: RetryPolicy | None
    execution_timeout: Duration | None
    run_timeout: Duration | None
    memo: Mapping[str, object] | None
    search_attributes: Mapping[str, SearchAttributeValue] | None


@dataclass(frozen=True, slots=True, eq=False)
class ChildWorkflowHandle(Generic[R]):
    """A child this run started: await it (or `result()`) for its result, or signal it."""

    workflow_id: str
    workflow_type: str
    step: int
    cancellation_policy: ChildCancellationPolicy
    _future: asyncio.Future[object]

    def __await__(self) -> Generator[Any, None, R]:
        return self.result().__await__()

    async def result(self) -> R:
        """The child's result; ChildWorkflowError if it failed, timed out, or was cancelled.

        If the awaiting code is cancelled meanwhile, the child is treated per its cancellation
        policy (`ChildCancellationPolicy`) and CancelledError propagates.
        """
        try:
            value: Any = await asyncio.shield(self._future)
            result: R = value  # decoded to the run method's return type (result_type)
            return result
        except asyncio.CancelledError:
            if self._future.done() or self.cancellation_policy is ChildCancellationPolicy.ABANDON:
                raise
            context.current().cancel_child_workflow(self.step)
            if self.cancellation_policy is ChildCancellationPolicy.WAIT_CANCELLATION_COMPLETED:
                await asyncio.wait([self._future])
            raise

    async def signal(self, signal: Callable[..., object] | str, /, *args: object) -> None:
        """Signal the child (a `@workflow.signal` method of its class, or a signal name).

        Recorded as a step, and delivered once, when this workflow task is written; a child
        that has closed by then does not get it.
        """
        name = signal if isinstance(signal, str) else handler_name(signal, "signal")
        context.current().signal_child_workflow(self.step, name, args)


@overload
async def start_child_workflow(
    fn: Callable[[Any], Awaitable[R]], /, **options: Unpack[ChildWorkflowOptions]
) -> ChildWorkflowHandle[R]: ...


@overload
async def start_child_workflow(
    fn: Callable[[Any, A1], Awaitable[R]], a1: A1, /, **options: Unpack[ChildWorkflowOptions]
) -> ChildWorkflowHandle[R]: ...


@overload
async def start_child_workflow(
    fn: Callable[[Any, A1, A2], Awaitable[R]],
    a1: A1,
    a2: A2,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> ChildWorkflowHandle[R]: ...


@overload
async def start_child_workflow(
    fn: Callable[[Any, A1, A2, A3], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> ChildWorkflowHandle[R]: ...


@overload
async def start_child_workflow(
    fn: Callable[[Any, A1, A2, A3, A4], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> ChildWorkflowHandle[R]: ...


@overload
async def start_child_workflow(
    fn: str, /, *args: object, **options: Unpack[ChildWorkflowOptions]
) -> ChildWorkflowHandle[Any]: ...
async def start_child_workflow(
    fn: Callable[..., Awaitable[object]] | str,
    *args: object,
    id: str | None = None,
    task_queue: str | None = None,
    connection: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    cancellation_policy: ChildCancellationPolicy = ChildCancellationPolicy.TRY_CANCEL,
    retry_policy: RetryPolicy | None = None,
    execution_timeout: Duration | None = None,
    run_timeout: Duration | None = None,
    memo: Mapping[str, object] | None = None,
    search_attributes: Mapping[str, SearchAttributeValue] | None = None,
) -> ChildWorkflowHandle[Any]:
    """Start a child workflow; its handle returns at once, `await handle` for its result.

    The start is written with this workflow task.
    `fn` is the child's `@workflow.run` method (`Child.run`), so type checkers match the
    arguments and the handle's result type, or a workflow type name (result `Any`). A child id
    that already has a running run fails the child: `await handle` raises
    ChildWorkflowAlreadyStartedError. `retry_policy` retries a failed child run (not by
    default); `execution_timeout` bounds all its runs, `run_timeout` each one (positive,
    run <= execution, else ValueError). `connection` sends its tasks to that partition (M7).
    `memo` and `search_attributes` are the child's own (issue 30), as a client start takes them.
    """
    runtime = context.current()
    result_type: object
    if isinstance(fn, str):
        workflow_type, result_type = fn, Any
    else:
        workflow_type, result_type = definition_of_run(fn).name, return_type(fn)
    execution = _seconds(execution_timeout, "execution_timeout")
    run = _seconds(run_timeout, "run_timeout")
    check_workflow_timeouts(execution, run)
    parent_close = ParentClosePolicy(parent_close_policy)
    cancellation = ChildCancellationPolicy(cancellation_policy)
    step, workflow_id, future = runtime.start_child_workflow(
        workflow_type,
        args,
        workflow_id=id,
        queue=task_queue,
        connection=connection,
        parent_close_policy=parent_close.value,
        cancellation_policy=cancellation.value,
        retry_policy=None if retry_policy is None else retry_policy.to_spec(),
        execution_timeout=execution,
        run_timeout=run,
        result_type=result_type,
        memo=memo,
        search_attributes=search_attributes,
    )
    return ChildWorkflowHandle(workflow_id, workflow_type, step, cancellation, future)


@overload
async def execute_child_workflow(
    fn: Callable[[Any], Awaitable[R]], /, **options: Unpack[ChildWorkflowOptions]
) -> R: ...


@overload
async def execute_child_workflow(
    fn: Callable[[Any, A1], Awaitable[R]], a1: A1, /, **options: Unpack[ChildWorkflowOptions]
) -> R: ...


@overload
async def execute_child_workflow(
    fn: Callable[[Any, A1, A2], Awaitable[R]],
    a1: A1,
    a2: A2,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> R: ...


@overload
async def execute_child_workflow(
    fn: Callable[[Any, A1, A2, A3], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> R: ...


@overload
async def execute_child_workflow(
    fn: Callable[[Any, A1, A2, A3, A4], Awaitable[R]],
    a1: A1,
    a2: A2,
    a3: A3,
    a4: A4,
    /,
    **options: Unpack[ChildWorkflowOptions],
) -> R: ...


@overload
async def execute_child_workflow(
    fn: str, /, *args: object, **options: Unpack[ChildWorkflowOptions]
) -> Any: ...
async def execute_child_workflow(
    fn: Callable[..., Awaitable[object]] | str,
    *args: object,
    **options: Unpack[ChildWorkflowOptions],
) -> object:
    """Start a child workflow and wait for its result (`start_child_workflow`, then await)."""
    handle = await start_child_workflow(fn, *args, **options)
    return await handle.result()


def _seconds(value: Duration | None, name: str) -> float | None:
    return None if value is None else to_seconds(value, name)
