"""Burrow's exception tree.

Every error Burrow raises derives from :class:`BurrowError`; ids travel as keyword attributes and
appear in the message, so a log line or a traceback names the run, task or step at fault::

    BurrowError
    ├── ConfigurationError
    │   └── CredentialsRejected       (burrow.store.errors) the database refused the login; not
    │                                 retriable, also a StoreError
    ├── PayloadError                  malformed, undecodable or unknown-codec payloads
    │   ├── PayloadTooLarge           over the size limit; raised before anything is written
    │   └── InvalidArgumentsError     arguments that do not bind to a handler's signature
    ├── StoreError                    raised by burrow.store (more in burrow.store.errors)
    │   ├── StoreUnavailable          connection lost / timeout; retriable
    │   ├── StaleLease                token no longer current; nothing changed (W7, M6)
    │   ├── NotFound
    │   │   ├── WorkflowNotFoundError no run with that workflow id / run id in the namespace
    │   │   └── TaskNotFound
    │   ├── Conflict
    │   │   ├── WorkflowAlreadyStartedError  a run of that workflow id refuses the start (its
    │   │   │                         id-reuse policy)
    │   │   ├── WorkflowNotRunningError      the run is closed: no signals, updates or cancel
    │   │   └── WorkerIdTaken         the worker id is registered in another namespace
    │   ├── InvalidCommands           a workflow task completion the store refuses
    │   │   └── InvalidCommandReference  names an update, signal or timer the run does not
    │   │                             hold open
    │   └── UnstorableText            a NUL character in an id, name or reason; nothing written
    ├── BrokerError                   (burrow.broker.errors)
    ├── WorkflowDefinitionError       decorator misuse, raised at import/registration
    ├── UnknownWorkflowType           no definition (or no live worker) for a workflow type
    ├── UnknownActivityType           no definition for an activity type on this queue
    ├── NondeterminismError           fails the workflow task, not the workflow
    ├── NotInWorkflowError            authoring call outside the replay loop
    ├── NotInActivityError            activity.context() outside an activity
    ├── WorkflowSandboxError          I/O or wall-clock use inside workflow code
    ├── WorkflowFailureError          what handle.result() raises for a run without a result;
    │   │                             `cause` is the failure rebuilt (e.g. an ActivityError)
    │   ├── WorkflowCancelledError    the run was cancelled
    │   ├── WorkflowTerminatedError   the run was terminated
    │   └── WorkflowTimedOutError     the run passed its run or execution timeout
    ├── QueryFailedError              a query handler raised; `cause` is its ApplicationError
    ├── UpdateFailedError             an update handler raised; `cause` is its ApplicationError
    ├── UpdateRejectedError           an update's validator refused it; nothing was written
    └── ApplicationError              user-raised; type/message/details/non_retryable recorded
        └── ActivityError             what workflow code sees when an activity fails; its
            │                         `__cause__` is the activity's ApplicationError
            └── ActivityTimedOut

A run failed by an activity failure therefore reads, from the client::

    WorkflowFailureError -> ActivityError -> ApplicationError(type, message, details)

The store's errors derive from the structural classes defined here (StoreError, NotFound,
Conflict), so the classes a client catches are the very classes the store raises.

This module is a leaf: it imports nothing from burrow, so store and broker may depend on it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


_URL_PASSWORD = re.compile(r"(://[^/@:\s]*):[^/@\s]*@")


def redact_passwords(value: object) -> object:
    """`value` with any URL password masked: error messages end up in logs and terminals."""
    return _URL_PASSWORD.sub(r"\1:***@", value) if isinstance(value, str) else value


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


class InvalidArgumentsError(PayloadError):
    """Arguments that cannot decode into, or bind to, a handler's parameters.

    Raised by the client before anything is written when it knows the handler (a typed call);
    a worker meeting such arguments skips the signal, fails the update, or fails the run with
    an `InvalidWorkflowInput` ApplicationError instead. `parameter` names the parameter at
    fault when one is ("" for too many arguments).
    """

    handler: str
    parameter: str
    reason: str

    def __init__(self, *, handler: str, reason: str, parameter: str = "") -> None:
        super().__init__(
            f"arguments for {handler} do not fit its signature: {reason}",
            handler=handler,
            parameter=parameter,
            reason=reason,
        )


class InvalidListQuery(BurrowError):
    """A list query that does not parse or does not fit its attributes' types; nothing ran.

    `offset` is the 0-based character where the problem is (the query's length when it ends early).
    """

    offset: int
    reason: str

    def __init__(self, reason: str, offset: int) -> None:
        super().__init__(
            f"invalid list query at character {offset + 1}: {reason}", offset=offset, reason=reason
        )


class InvalidSearchAttribute(BurrowError):
    """A search attribute name or type that cannot be registered; nothing was written."""

    name: str
    reason: str

    def __init__(self, *, name: str, reason: str) -> None:
        super().__init__(f"search attribute {name!r}: {reason}", name=name, reason=reason)


class SearchAttributeLimitReached(BurrowError):
    """The namespace holds as many custom search attributes as it may; nothing was written."""

    namespace: str
    limit: int

    def __init__(self, *, namespace: str, limit: int) -> None:
        super().__init__(
            f"namespace {namespace!r} has reached the maximum of {limit} custom search"
            " attributes; delete one first",
            namespace=namespace,
            limit=limit,
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


class StoreError(BurrowError):
    """Base class of errors raised by the store (burrow.store.errors holds the rest)."""


class NotFound(StoreError):
    """A row that was named does not exist (in this namespace)."""


class Conflict(StoreError):
    """The request conflicts with the current durable state."""


class UnstorableText(StoreError):
    r"""An id, name or reason holds text the database cannot store (a NUL character, `\x00`).

    Raised for the whole call, before or instead of its write: nothing was written.
    """


class WorkflowNotFoundError(NotFound):
    """No run matches the workflow id / run id in this namespace."""

    namespace: str
    workflow_id: str
    run_id: str

    def __init__(self, *, namespace: str, workflow_id: str = "", run_id: str = "") -> None:
        super().__init__(
            f"no workflow run {workflow_id or run_id!r} in namespace {namespace!r}",
            namespace=namespace,
            workflow_id=workflow_id,
            run_id=run_id,
        )


class WorkflowAlreadyStartedError(Conflict):
    """The workflow id has a run its id-reuse policy does not start another beside.

    `run_id` and `status` name that run ("" and "running" when the start met a run created
    concurrently, which is running).
    """

    namespace: str
    workflow_id: str
    run_id: str
    status: str

    def __init__(
        self, *, namespace: str, workflow_id: str, run_id: str = "", status: str = "running"
    ) -> None:
        run = f" (run {run_id})" if run_id else ""
        if status == "running":
            what = f"is already running{run}"
        else:
            what = f"already has a {status} run{run} and its id-reuse policy starts no other"
        super().__init__(
            f"workflow {workflow_id!r} {what} in namespace {namespace!r}",
            namespace=namespace,
            workflow_id=workflow_id,
            run_id=run_id,
            status=status,
        )


class WorkflowNotRunningError(Conflict):
    """The run is closed, so it takes no more signals, updates or cancellation."""

    run_id: str
    status: str

    def __init__(self, *, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} is {status}, not running", run_id=run_id, status=status)


class WorkflowFailureError(BurrowError):
    """A workflow run ended without a result (failed, cancelled, terminated or timed out).

    `failure` is the recorded failure record; `cause` (also `__cause__`) is the exception it
    describes, rebuilt: for a run failed by an activity, an ActivityError whose own cause is the
    activity's ApplicationError with its type, message, details and non_retryable flag.
    """

    run_id: str
    workflow_id: str
    status: str
    failure: Mapping[str, object] | None

    def __init__(
        self,
        *,
        run_id: str,
        workflow_id: str,
        status: str,
        message: str,
        failure: Mapping[str, object] | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(
            f"workflow {workflow_id} (run {run_id}) {status}: {message}",
            run_id=run_id,
            workflow_id=workflow_id,
            status=status,
            failure=failure,
        )
        self.cause = cause
        self.__cause__ = cause


class WorkflowCancelledError(WorkflowFailureError):
    """The run was cancelled: it ended without a result, as a failed run does.

    It subclasses WorkflowFailureError (as Temporal reports cancellation as a failure whose
    cause is a cancellation) so that `except WorkflowFailureError`, the one catch for "this run
    produced no result", keeps covering cancelled runs, while a caller that expects
    cancellation can catch this narrower class first.
    """

    def __init__(
        self,
        *,
        run_id: str,
        workflow_id: str,
        message: str = "workflow cancelled",
        failure: Mapping[str, object] | None = None,
        cause: BaseException | None = None,
        status: str = "cancelled",
    ) -> None:
        super().__init__(
            run_id=run_id,
            workflow_id=workflow_id,
            status=status,
            message=message,
            failure=failure,
            cause=cause,
        )


class WorkflowTerminatedError(WorkflowFailureError):
    """The run was terminated: closed at once, without its code running again."""


class WorkflowTimedOutError(WorkflowFailureError):
    """The run passed its run timeout or its chain's execution timeout and was closed.

    `timeout_kind` says which: "run" or "execution".
    """

    @property
    def timeout_kind(self) -> str | None:
        """Which timeout closed the run ("run" or "execution"), as recorded."""
        kind = (self.failure or {}).get("timeout_kind")
        return None if kind is None else str(kind)


class QueryFailedError(BurrowError):
    """A query handler raised; `cause` (also `__cause__`) is its failure as an ApplicationError."""

    workflow_id: str
    query_name: str

    def __init__(self, *, workflow_id: str, query_name: str, cause: ApplicationError) -> None:
        super().__init__(
            f"query {query_name!r} on workflow {workflow_id} failed: {cause.message}",
            workflow_id=workflow_id,
            query_name=query_name,
        )
        self.cause = cause
        self.__cause__ = cause


class UpdateFailedError(BurrowError):
    """An update handler raised; `cause` (also `__cause__`) is its failure as an ApplicationError.

    The failure is durable: the same update id returns the same failure again.
    """

    workflow_id: str
    update_name: str
    update_id: str

    def __init__(
        self, *, workflow_id: str, update_name: str, update_id: str, cause: ApplicationError
    ) -> None:
        super().__init__(
            f"update {update_name!r} ({update_id}) on workflow {workflow_id} failed:"
            f" {cause.message}",
            workflow_id=workflow_id,
            update_name=update_name,
            update_id=update_id,
        )
        self.cause = cause
        self.__cause__ = cause


class UpdateRejectedError(BurrowError):
    """An update's validator refused it before it was accepted: nothing was written.

    `cause` (also `__cause__`) is what the validator raised, as an ApplicationError. Unlike a
    failed update, a rejection is not durable: the same update id may be sent again.
    """

    workflow_id: str
    update_name: str
    update_id: str

    def __init__(
        self, *, workflow_id: str, update_name: str, update_id: str, cause: ApplicationError
    ) -> None:
        super().__init__(
            f"update {update_name!r} ({update_id}) on workflow {workflow_id} was rejected by"
            f" its validator: {cause.message}",
            workflow_id=workflow_id,
            update_name=update_name,
            update_id=update_id,
        )
        self.cause = cause
        self.__cause__ = cause


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
    """An activity failed for good; raised inside workflow code at the awaiting call.

    Its type, message, details and non_retryable flag are the activity's; `cause` (the
    `__cause__`) is the activity's own ApplicationError, as in Temporal's failure chain.
    """

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

    @property
    def cause(self) -> BaseException | None:
        """The activity's own error (the ApplicationError it raised), when known."""
        return self.__cause__


class ActivityTimedOut(ActivityError):
    """An activity exceeded one of its timeouts for good."""


class ChildWorkflowError(ApplicationError):
    """A child workflow ended without a result; raised in its parent at the awaiting call.

    `cause` (the `__cause__`) is the child's own failure rebuilt, as `WorkflowFailureError`'s
    is: for a child failed by an activity, an ActivityError chained to the activity's error; for
    a cancelled, terminated or timed-out child an ApplicationError of type `WorkflowCancelled`,
    `WorkflowTerminated` or `WorkflowTimedOut`.
    """

    def __init__(
        self,
        message: str,
        *details: Any,
        type: str | None = None,
        non_retryable: bool = False,
        workflow_id: str = "",
        run_id: str = "",
        workflow_type: str = "",
        status: str = "",
    ) -> None:
        super().__init__(
            message, *details, type=type or "ChildWorkflowError", non_retryable=non_retryable
        )
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = workflow_type
        self.status = status
        """How the child closed: failed, cancelled, terminated, timed_out or start_failed."""

    @property
    def cause(self) -> BaseException | None:
        """The child's own failure, rebuilt, when known."""
        return self.__cause__


class ChildWorkflowAlreadyStartedError(ChildWorkflowError):
    """The child's workflow id already had a running run: no child was started."""


# Deprecated alias, kept for one release: use WorkflowCancelledError.
WorkflowCancelled = WorkflowCancelledError


class SearchAttributeConflict(Conflict):
    """A search attribute name that is taken; nothing was written.

    `reason`: a built-in's name (`name_reserved`; `system_attribute` when removing one), or a
    custom attribute the namespace already has (`attribute_already_exists`, with its `type`).
    """

    name: str
    reason: str
    type: str | None

    def __init__(self, *, name: str, reason: str, message: str, type: str | None = None) -> None:
        super().__init__(message, name=name, reason=reason, type=type)


class SearchAttributeNotFoundError(NotFound):
    """No custom search attribute of that name in the namespace."""

    name: str
    namespace: str

    def __init__(self, *, name: str, namespace: str) -> None:
        super().__init__(
            f"custom search attribute {name!r} not found in namespace {namespace!r}",
            name=name,
            namespace=namespace,
        )


class InvalidScheduleSpec(BurrowError):
    """A schedule's spec, action or policies cannot work (issue 30); nothing was written.

    `field` names the part refused (`spec.cron_expressions[0]`, `spec.timezone`, ...). Not a
    ValueError, so pydantic validators raise it as it is instead of wrapping it.
    """

    field: str
    reason: str

    def __init__(self, *, field: str, reason: str) -> None:
        super().__init__(f"invalid schedule {field}: {reason}", field=field, reason=reason)


class ScheduleNotFound(NotFound):
    """No schedule has this id in the namespace (issue 30)."""

    namespace: str
    schedule_id: str

    def __init__(self, *, namespace: str, schedule_id: str) -> None:
        super().__init__(
            f"no schedule {schedule_id!r} in namespace {namespace!r}",
            namespace=namespace,
            schedule_id=schedule_id,
        )


class ScheduleAlreadyExists(Conflict):
    """A schedule with this id exists in the namespace already (issue 30); nothing was written."""

    namespace: str
    schedule_id: str

    def __init__(self, *, namespace: str, schedule_id: str) -> None:
        super().__init__(
            f"schedule {schedule_id!r} already exists in namespace {namespace!r}",
            namespace=namespace,
            schedule_id=schedule_id,
        )
