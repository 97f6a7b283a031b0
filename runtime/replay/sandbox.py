"""Guards that make common non-deterministic calls fail loudly inside workflow code (D1).

Only the thread running an activation is affected: activities running in other threads at the
same moment keep the real functions.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType

from burrow.errors import WorkflowSandboxError

_state = threading.local()

_GUARDED: list[tuple[ModuleType, str, str]] = [
    (random, "random", "workflow.random()"),
    (random, "randint", "workflow.random()"),
    (random, "choice", "workflow.random()"),
    (random, "shuffle", "workflow.random()"),
    (random, "uniform", "workflow.random()"),
    (random, "randrange", "workflow.random()"),
    (uuid, "uuid1", "workflow.uuid4()"),
    (uuid, "uuid4", "workflow.uuid4()"),
    (time, "sleep", "await workflow.sleep()"),
]


def _guard(
    module: ModuleType, name: str, instead: str, original: Callable[..., object]
) -> Callable[..., object]:
    def guarded(*args: object, **kwargs: object) -> object:
        if getattr(_state, "active", False):
            raise WorkflowSandboxError(
                f"{module.__name__}.{name}() inside workflow code is not replay-safe: use {instead}"
            )
        return original(*args, **kwargs)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    return guarded


def _install() -> None:
    for module, name, instead in _GUARDED:
        current = getattr(module, name)
        if not hasattr(current, "__wrapped__"):
            setattr(module, name, _guard(module, name, instead, current))


@contextlib.contextmanager
def sandboxed() -> Iterator[None]:
    """Within this block, on this thread, the guarded calls raise WorkflowSandboxError."""
    _install()
    previous = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = previous


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """Lift the guards for engine-internal code running inside an activation."""
    previous = getattr(_state, "active", False)
    _state.active = False
    try:
        yield
    finally:
        _state.active = previous
