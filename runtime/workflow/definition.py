"""Workflow decorators and the frozen definitions they produce; misuse raises at decoration."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

from burrow.errors import WorkflowDefinitionError

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., object])
AsyncF = TypeVar("AsyncF", bound=Callable[..., Awaitable[object]])

_RUN = "__burrow_run__"
_HANDLER = "__burrow_handler__"
DEFINITION_ATTR = "__burrow_workflow__"
_RUN_OF = "__burrow_run_of__"
_VALIDATOR = "__burrow_update_validator__"


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """Everything the runtime needs to know about one workflow class."""

    name: str
    cls: type
    run_method: str
    arg_types: tuple[object, ...]
    signals: dict[str, str] = field(default_factory=dict)
    queries: dict[str, str] = field(default_factory=dict)
    updates: dict[str, str] = field(default_factory=dict)
    validators: dict[str, Callable[..., object]] = field(default_factory=dict)
    """Update name -> its validator, run (read-only) before the update is accepted."""


def parameters(fn: Callable[..., object], *, skip_self: bool) -> tuple[inspect.Parameter, ...]:
    """The parameters of `fn` (without the first when `skip_self`), as `inspect` sees them."""
    func, skip = _unbound(fn, skip_self)
    if inspect.isfunction(func):
        return _parameters(func, skip)
    return _parameters.__wrapped__(func, skip)


def param_types(fn: Callable[..., object], *, skip_self: bool) -> tuple[object, ...]:
    """Type hints of the positional parameters (Any where missing), for payload decoding."""
    func, skip = _unbound(fn, skip_self)
    if inspect.isfunction(func):
        return _param_types(func, skip)
    return _param_types.__wrapped__(func, skip)


def return_type(fn: Callable[..., object]) -> object:
    """The return annotation, or Any."""
    func, _ = _unbound(fn, False)
    if inspect.isfunction(func):
        return _return_type(func)
    return _return_type.__wrapped__(func)


# Signatures and string annotations cost tens of microseconds to evaluate, and are asked for on
# every start, result and workflow task: they are read once per function (class attributes,
# so the cache holds what lives anyway).
def _unbound(fn: Callable[..., object], skip_self: bool) -> tuple[Callable[..., object], int]:
    if inspect.ismethod(fn):  # a bound method's signature has no self: skip it on the function
        return fn.__func__, 1 + skip_self
    return fn, int(skip_self)


@functools.lru_cache(maxsize=1024)
def _parameters(fn: Callable[..., object], skip: int) -> tuple[inspect.Parameter, ...]:
    return tuple(inspect.signature(fn).parameters.values())[skip:]


@functools.lru_cache(maxsize=1024)
def _param_types(fn: Callable[..., object], skip: int) -> tuple[object, ...]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    return tuple(hints.get(p.name, Any) for p in _parameters.__wrapped__(fn, skip))


@functools.lru_cache(maxsize=1024)
def _return_type(fn: Callable[..., object]) -> object:
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:
        return Any


@overload
def defn(cls: C) -> C: ...
@overload
def defn(*, name: str | None = None) -> Callable[[C], C]: ...
def defn(cls: C | None = None, *, name: str | None = None) -> C | Callable[[C], C]:
    """Declare a workflow class: exactly one `@workflow.run` method, optional handlers."""

    def decorate(target: C) -> C:
        if not inspect.isclass(target):
            raise WorkflowDefinitionError(f"@workflow.defn goes on a class, not {target!r}")
        runs = [n for n, v in inspect.getmembers(target) if getattr(v, _RUN, False)]
        if len(runs) != 1:
            raise WorkflowDefinitionError(
                f"workflow {target.__qualname__} needs exactly one @workflow.run method,"
                f" has {len(runs)}"
            )
        handlers: dict[str, dict[str, str]] = {"signal": {}, "query": {}, "update": {}}
        for attr, value in inspect.getmembers(target):
            spec = getattr(value, _HANDLER, None)
            if spec is None:
                continue
            kind, handler_name = spec
            if handler_name in handlers[kind]:
                raise WorkflowDefinitionError(
                    f"workflow {target.__qualname__} has two {kind} handlers named {handler_name!r}"
                )
            handlers[kind][handler_name] = attr
        validators = {
            handler_name: getattr(getattr(target, attr), _VALIDATOR)
            for handler_name, attr in handlers["update"].items()
            if hasattr(getattr(target, attr), _VALIDATOR)
        }
        definition = WorkflowDefinition(
            name=name or target.__name__,
            cls=target,
            run_method=runs[0],
            arg_types=param_types(getattr(target, runs[0]), skip_self=True),
            signals=handlers["signal"],
            queries=handlers["query"],
            updates=handlers["update"],
            validators=validators,
        )
        setattr(target, DEFINITION_ATTR, definition)
        run_fn = getattr(target, runs[0])
        # The run function names its workflow, so `Checkout.run` can be started as `Checkout`.
        others = [d for d in getattr(run_fn, _RUN_OF, ()) if d.cls is not target]
        setattr(run_fn, _RUN_OF, (*others, definition))
        return target

    return decorate if cls is None else decorate(cls)


def run(fn: AsyncF) -> AsyncF:
    """Mark the workflow's entry point (an `async def` method)."""
    is_async = inspect.iscoroutinefunction(fn)  # not in the `if`: it would narrow away AsyncF
    if not is_async:
        raise WorkflowDefinitionError(f"@workflow.run method {fn.__qualname__} must be async def")
    setattr(fn, _RUN, True)
    return fn


class _HandlerDecorator(Protocol):
    @overload
    def __call__(self, fn: F, /) -> F: ...
    @overload
    def __call__(self, *, name: str | None = None) -> Callable[[F], F]: ...


def _handler(kind: str) -> _HandlerDecorator:
    def decorator(fn: F | None = None, *, name: str | None = None) -> Any:
        def mark(target: F) -> F:
            if kind == "query" and inspect.iscoroutinefunction(target):
                raise WorkflowDefinitionError(
                    f"@workflow.query {target.__qualname__} must be a plain def:"
                    " queries cannot wait"
                )
            setattr(target, _HANDLER, (kind, name or target.__name__))
            return target

        return mark if fn is None else mark(fn)

    decorator.__doc__ = f"Mark a workflow {kind} handler (optionally `name=`)."
    return decorator  # overloads spelled by the Protocol


class _UpdateDecorator(Protocol):
    @overload
    def __call__(self, fn: F, /) -> F: ...
    @overload
    def __call__(
        self, *, name: str | None = None, validator: Callable[..., object] | None = None
    ) -> Callable[[F], F]: ...


def _update(
    fn: F | None = None,
    *,
    name: str | None = None,
    validator: Callable[..., object] | None = None,
) -> Any:
    """Mark a workflow update handler (optionally `name=`).

    `validator` (a plain def taking the workflow and the update's arguments) runs read-only
    against the run's state before the update is accepted: it raises, or returns False, to
    reject the update, and then nothing is written; the caller gets UpdateRejectedError.
    """
    if validator is not None and (
        not callable(validator) or inspect.iscoroutinefunction(validator)
    ):
        raise WorkflowDefinitionError(
            f"update validator {validator!r} must be a plain def: validators cannot wait"
        )

    def mark(target: F) -> F:
        setattr(target, _HANDLER, ("update", name or target.__name__))
        if validator is not None:
            setattr(target, _VALIDATOR, validator)
        return target

    return mark if fn is None else mark(fn)


signal = _handler("signal")
query = _handler("query")
update: _UpdateDecorator = _update


def get_definition(cls: type) -> WorkflowDefinition:
    """The definition attached by @workflow.defn."""
    definition = getattr(cls, DEFINITION_ATTR, None)
    if not isinstance(definition, WorkflowDefinition):
        raise WorkflowDefinitionError(f"{cls!r} is not decorated with @workflow.defn")
    return definition


def definition_of_run(fn: Callable[..., object]) -> WorkflowDefinition:
    """The definition whose `@workflow.run` method `fn` is (a function, or a bound method)."""
    found: tuple[WorkflowDefinition, ...] = getattr(fn, _RUN_OF, ())
    if len(found) == 1:
        return found[0]
    name = getattr(fn, "__qualname__", repr(fn))
    if found:
        classes = ", ".join(d.cls.__qualname__ for d in found)
        raise WorkflowDefinitionError(
            f"{name} is the run method of several workflows ({classes}); start one by its class"
        )
    raise WorkflowDefinitionError(
        f"{name} is not the @workflow.run method of a @workflow.defn class"
    )


def handler_name(fn: Callable[..., object], kind: str) -> str:
    """The registered name of a `@workflow.<kind>` handler method (kind: signal/query/update)."""
    spec = getattr(fn, _HANDLER, None)
    if spec is None or spec[0] != kind:
        name = getattr(fn, "__qualname__", repr(fn))
        raise WorkflowDefinitionError(f"{name} is not a @workflow.{kind} handler")
    return str(spec[1])
