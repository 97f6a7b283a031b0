"""Burrow's exception tree.

Every error Burrow raises derives from :class:`BurrowError`; ids travel as keyword attributes and
appear in the message, so a log line or a traceback names the run, task or step at fault::

    BurrowError
    ├── ConfigurationError
    ├── PayloadError                  malformed, undecodable or unknown-codec payloads
    │   └── PayloadTooLarge           over the size limit; raised before anything is written
    ├── StoreError                    (burrow.store.errors)
    │   ├── StoreUnavailable          connection lost / timeout; retriable
    │   ├── StaleLease                token no longer current; nothing changed (W7, M6)
    │   ├── NotFound                  RunNotFound, TaskNotFound
    │   ├── Conflict                  WorkflowAlreadyStarted, RunNotRunning
    │   └── InvalidCommands           a workflow task completion the store refuses
    ├── BrokerError                   (burrow.broker.errors)
    ├── WorkflowDefinitionError       decorator misuse, raised at import/registration
    ├── UnknownWorkflowType           no definition (or no live worker) for a workflow type
    ├── UnknownActivityType           no definition for an activity type on this queue
    ├── NondeterminismError           fails the workflow task, not the workflow
    ├── NotInWorkflowError            authoring call outside the replay loop
    ├── NotInActivityError            activity.context() outside an activity
    ├── WorkflowSandboxError          I/O or wall-clock use inside workflow code
    ├── WorkflowFailureError          what Client.result() raises for a failed/cancelled run
    └── ApplicationError              user-raised; type/message/details/non_retryable recorded
        ├── ActivityError             what workflow code sees when an activity fails
        │   └── ActivityTimedOut
        └── WorkflowCancelled

This module is a leaf: it imports nothing from burrow, so store and broker may depend on it.
"""

from __future__ import annotations

from typing import Any


class BurrowError(Exception):
    """Base class of every error Burrow raises."""

    def __init__(self, message: str, **ids: Any) -> None:
        self.ids = ids
        for key, value in ids.items():
            setattr(self, key, value)
        super().__init__(message)


class ConfigurationError(BurrowError):
    """Settings or arguments that cannot work."""


class PayloadError(BurrowError):
    """A payload could not be encoded or decoded."""


class PayloadTooLarge(PayloadError):
    """A payload exceeds the configured size limit; nothing was written."""

    def __init__(self, *, size: int, limit: int, what: str = "payload") -> None:
        super().__init__(
            f"{what} is {size} bytes encoded, over the {limit} byte limit; nothing was written",
            size=size,
            limit=limit,
            what=what,
        )


class WorkflowDefinitionError(BurrowError):
    """A workflow or activity definition is malformed."""


class UnknownWorkflowType(BurrowError):
    """No workflow definition is known for a type."""

    def __init__(self, *, workflow_type: str, task_queue: str = "", detail: str = "") -> None:
        message = f"unknown workflow type {workflow_type!r}"
        if task_queue:
            message += f" on task queue {task_queue!r}"
        if detail:
            message += f": {detail}"
        super().__init__(message, workflow_type=workflow_type, task_queue=task_queue)


class UnknownActivityType(BurrowError):
    """No activity definition is known for a type on the queue that would run it."""

    def __init__(self, *, activity_type: str, task_queue: str) -> None:
        super().__init__(
            f"unknown activity type {activity_type!r} on task queue {task_queue!r}: no activity"
            " with that name is registered with this app",
            activity_type=activity_type,
            task_queue=task_queue,
        )


class NondeterminismError(BurrowError):
    """Workflow code produced a different step than the one recorded in history."""

    def __init__(self, *, run_id: str, seq: int, expected: str, recorded: str) -> None:
        super().__init__(
            f"non-deterministic workflow in run {run_id} at step {seq}: the code now produces"
            f" {expected} but history recorded {recorded}; the workflow changed without"
            " `workflow.get_version()` guarding the change",
            run_id=run_id,
            seq=seq,
            expected=expected,
            recorded=recorded,
        )


class NotInWorkflowError(BurrowError):
    """A workflow authoring call was made outside workflow code."""


class NotInActivityError(BurrowError):
    """activity.context() was called outside a running activity."""


class WorkflowSandboxError(BurrowError):
    """Workflow code tried something that cannot replay deterministically."""


class WorkflowFailureError(BurrowError):
    """A workflow run ended without a result (failed, cancelled, terminated or timed out)."""

    def __init__(
        self, *, run_id: str, workflow_id: str, status: str, message: str, failure: Any = None
    ) -> None:
        super().__init__(
            f"workflow {workflow_id} (run {run_id}) {status}: {message}",
            run_id=run_id,
            workflow_id=workflow_id,
            status=status,
            failure=failure,
        )


class ApplicationError(BurrowError):
    """An error raised by user code; its type, message and details are recorded in history."""

    def __init__(
        self,
        message: str,
        *details: Any,
        type: str | None = None,
        non_retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = list(details)
        self.type = type or self.__class__.__name__
        self.non_retryable = non_retryable


class ActivityError(ApplicationError):
    """An activity failed for good; raised inside workflow code at the awaiting call."""

    def __init__(
        self,
        message: str,
        *details: Any,
        type: str | None = None,
        non_retryable: bool = False,
        activity_type: str = "",
        activity_execution_id: str = "",
        attempt_number: int = 0,
    ) -> None:
        super().__init__(message, *details, type=type, non_retryable=non_retryable)
        self.activity_type = activity_type
        self.activity_execution_id = activity_execution_id
        self.attempt_number = attempt_number


class ActivityTimedOut(ActivityError):
    """An activity exceeded one of its timeouts for good."""


class WorkflowCancelled(ApplicationError):
    """The workflow was cancelled."""
