"""Activity authoring: `@activity.defn` and the running attempt's `activity.context()`."""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from burrow.errors import NotInActivityError, WorkflowDefinitionError
from burrow.workflow.definition import param_types, return_type

F = TypeVar("F", bound=Callable[..., object])
DEFINITION_ATTR = "__burrow_activity__"


@dataclass(frozen=True, slots=True)
class ActivityDefinition:
    """An activity function with its registered name and signature types."""

    name: str
    fn: Callable[..., Any]  # the user's function: its result is any encodable value
    is_async: bool
    arg_types: tuple[object, ...]
    """Each parameter's type hint (a type form), for payload decoding."""
    result_type: Any


@overload
def defn(fn: F) -> F: ...
@overload
def defn(*, name: str | None = None) -> Callable[[F], F]: ...
def defn(fn: F | None = None, *, name: str | None = None) -> F | Callable[[F], F]:
    """Declare an activity: an async or plain function, registered under `name`."""

    def decorate(target: F) -> F:
        if not callable(target) or inspect.isclass(target):
            raise WorkflowDefinitionError(f"@activity.defn goes on a function, not {target!r}")
        definition = ActivityDefinition(
            name=name or target.__name__,
            fn=target,
            is_async=inspect.iscoroutinefunction(target),
            arg_types=param_types(target, skip_self=False),
            result_type=return_type(target),
        )
        setattr(target, DEFINITION_ATTR, definition)
        return target

    return decorate if fn is None else decorate(fn)


def get_definition(fn: Callable[..., object]) -> ActivityDefinition:
    """The definition attached by @activity.defn."""
    definition = getattr(fn, DEFINITION_ATTR, None)
    if not isinstance(definition, ActivityDefinition):
        raise WorkflowDefinitionError(f"{fn!r} is not decorated with @activity.defn")
    return definition


@dataclass(slots=True)
class ActivityContext:
    """The running attempt: ids for idempotency (A2), heartbeats and cancellation."""

    activity_type: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt_number: int
    workflow_id: str
    run_id: str
    namespace: str
    task_queue: str
    heartbeat_details: Any  # the user's last heartbeat details, decoded
    _heartbeat: Callable[[object], Awaitable[None]] = field(repr=False)
    _request_heartbeat: Callable[[object], None] = field(repr=False)
    cancel_requested: bool = False
    execution_mode: Literal["queued", "local"] = "queued"
    """`local` when the attempt runs inside its workflow task (`workflow.local_activity`, A3)."""

    async def aheartbeat(self, details: object = None) -> None:
        """Record progress now and learn of cancellation (async activities).

        During a store outage it returns at once, as `heartbeat()` does: the latest details are
        sent once the store is back, and the lease is renewed apart meanwhile. A lost lease or a
        cancellation still reaches the activity (StaleLease, or its task cancelled).
        """
        await self._heartbeat(details)

    def heartbeat(self, details: object = None) -> None:
        """Record progress; sent in the background, safe from sync and async activities."""
        self._request_heartbeat(details)


_current: contextvars.ContextVar[ActivityContext] = contextvars.ContextVar("burrow_activity")


def context() -> ActivityContext:
    """The running activity's context; raises NotInActivityError outside an activity."""
    try:
        return _current.get()
    except LookupError:
        raise NotInActivityError("activity.context() called outside a running activity") from None


def _set_context(ctx: ActivityContext) -> contextvars.Token[ActivityContext]:
    return _current.set(ctx)
