"""When a guarded call raises: inside an activation, unless lifted or made by logging/metrics (D1).

The guards themselves (sandbox_guards.py) are installed once for the whole process and ask
`check` whenever an activation runs on their thread. Only that thread is affected, and on it only
code that is not itself logging or metrics: the worker, the store, the broker and activities
running on other threads keep the real functions.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

from burrow.errors import WorkflowSandboxError
from burrow.workflow import unsafe

# Libraries that read clocks to stamp log records and time metrics. A guarded call made while one
# of them is on the stack is theirs, not the workflow's, and has no effect on its decisions.
ALLOWED_CALLERS = frozenset({"logging", "structlog", "prometheus_client"})


class _State(threading.local):
    active = False  # whether an activation runs on this thread (the guards are armed)


# Read by every guarded call in the process, so the wrappers test `state.active` inline first:
# outside activations a guard costs one attribute read more than the real function.
state = _State()


def active() -> bool:
    """Whether an activation runs on this thread (the guards are armed)."""
    return state.active


def set_active(value: bool) -> bool:
    """Arm or disarm the guards on this thread; returns the previous setting."""
    previous = state.active
    state.active = value
    return previous


def called_by_allowed_library() -> bool:
    """Whether a frame of logging, structlog or prometheus_client is on the current stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str) and module.partition(".")[0] in ALLOWED_CALLERS:
            return True
        frame = frame.f_back
    return False


def check(call: str, instead: str) -> None:
    """Raise WorkflowSandboxError for `call` when workflow code makes it inside an activation."""
    if not state.active or unsafe.sandbox_lifted() or called_by_allowed_library():
        return
    raise WorkflowSandboxError(f"{call} inside workflow code is not replay-safe: {instead}")
