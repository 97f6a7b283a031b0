"""The workflow sandbox: guarded calls fail loudly inside workflow code (D1).

`sandboxed()` arms the guards on this thread while an activation runs; what is guarded lives in
sandbox_guards.py, and when a guarded call raises in sandbox_policy.py. Only the thread running
an activation is affected: activities running in other threads at the same moment, and the
worker's own loop between activations, keep the real functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from burrow.replay import sandbox_guards, sandbox_policy
from burrow.workflow import unsafe

_rebound: set[str] = set()


def protect(workflow_class: type) -> None:
    """Install the guards and rebind guarded names imported into the workflow's module."""
    sandbox_guards.install()
    module = workflow_class.__module__
    if module not in _rebound and sandbox_guards.rebind(module):
        _rebound.add(module)


@contextlib.contextmanager
def sandboxed() -> Iterator[None]:
    """Within this block, on this thread, the guarded calls raise WorkflowSandboxError."""
    sandbox_guards.install()
    previous = sandbox_policy.set_active(True)
    try:
        yield
    finally:
        sandbox_policy.set_active(previous)


def unguarded() -> contextlib.AbstractContextManager[None]:
    """Lift the guards for engine-internal code running inside an activation (side effects)."""
    return unsafe.sandbox_unrestricted()
