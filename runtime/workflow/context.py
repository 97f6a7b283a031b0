"""How authoring functions find the running workflow instance: through the running loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from burrow.errors import NotInWorkflowError

if TYPE_CHECKING:
    from burrow.replay.instance import WorkflowInstance


def current() -> WorkflowInstance:
    """The instance whose deterministic loop is running, or NotInWorkflowError."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    instance = getattr(loop, "instance", None)
    if instance is None:
        raise NotInWorkflowError(
            "this call only works inside workflow code (a @workflow.run method or its handlers)"
        )
    return instance  # type: ignore[no-any-return]


def in_workflow() -> bool:
    """Whether the caller runs inside workflow code."""
    try:
        current()
    except NotInWorkflowError:
        return False
    return True
