"""`workflow.unsafe`: escape hatches that give up a replay guarantee on purpose.

`sandbox_unrestricted()` lifts the workflow sandbox (D1) for the code inside the block, so workflow
code can read a clock for a log line or a metric. Whatever it computes there is not replayed: keep
it out of the workflow's decisions, results and commands.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

# A context variable, not a thread flag: a workflow task that awaits inside the block keeps it,
# while the run's other tasks, stepped in between on the same thread, stay guarded.
_lifted: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "burrow_sandbox_lifted", default=False
)


@contextlib.contextmanager
def sandbox_unrestricted() -> Iterator[None]:
    """Within this block the sandbox's guarded calls run normally (for logging and metrics).

    Tasks created inside the block inherit it, as they inherit any context variable. Outside
    workflow code nothing is guarded, so the block changes nothing there.
    """
    token = _lifted.set(True)
    try:
        yield
    finally:
        _lifted.reset(token)


def sandbox_lifted() -> bool:
    """Whether the current code runs inside `sandbox_unrestricted()`."""
    return _lifted.get()
