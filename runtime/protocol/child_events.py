"""Child workflow and workflow timeout history events (PROTOCOL.md 8.2).

Re-exported by `burrow.protocol.events`. A parent's history records the child it started as
`ChildWorkflowScheduled` then `ChildRunStarted` (both written by the task that started it), and
its close as one `ChildRun{Completed,Failed,Cancelled,Terminated}`, which joins the parent's
inbox when the child's last run closes and wakes the parent. `sequence` is the parent's step.

Burrow adds two events the catalogue lacks, for the commands it adds: `ChildSignalled` (a step:
the parent signalled its child) and `ChildCancelRequested` (the parent asked its child to
cancel, recorded once so replay does not ask again).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from burrow.protocol.event_base import Event
from burrow.protocol.shapes import ExceptionInfo, Omitted, RetrySpec, Timestamp, WireModel

ParentClosePolicyName = Literal["abandon", "request_cancel", "terminate"]
ChildCancellationPolicyName = Literal["try_cancel", "wait_cancellation_completed", "abandon"]


class TimeoutPolicy(WireModel):
    """A child's timeouts, as `ChildWorkflowScheduled` records them (seconds)."""

    execution_timeout_seconds: float | None = Omitted
    run_timeout_seconds: float | None = Omitted


class _Child(Event):
    """The parent's step and the child it names."""

    sequence: int
    child_workflow_instance_id: str
    child_workflow_run_id: str
    child_workflow_type: str
    parent_close_policy: ParentClosePolicyName = "abandon"
    cancellation_policy: ChildCancellationPolicyName = "abandon"


class ChildWorkflowScheduled(_Child):
    """A step started a child workflow (its first run's id is `child_workflow_run_id`)."""

    event_type: ClassVar[str] = "ChildWorkflowScheduled"
    retry_policy: RetrySpec | None = Omitted
    timeout_policy: TimeoutPolicy | None = Omitted
    workflow_task_id: str | None = Omitted


class ChildRunStarted(_Child):
    """The child's first run exists (informational: replay does not wait on it)."""

    event_type: ClassVar[str] = "ChildRunStarted"


class _ChildClosed(_Child):
    """The child's last run closed; `child_workflow_run_id` names that run."""

    child_status: str
    closed_reason: str
    closed_at: Timestamp | None = Omitted


class ChildRunCompleted(_ChildClosed):
    """The child returned; `output` is the raw blob, `payload_codec` its codec."""

    event_type: ClassVar[str] = "ChildRunCompleted"
    output: str
    payload_codec: str


class ChildRunFailed(_ChildClosed):
    """The child failed, timed out, or could not be started (`failure_category` says which)."""

    event_type: ClassVar[str] = "ChildRunFailed"
    failure_category: str = "application"
    exception_type: str | None = Omitted
    exception_class: str | None = Omitted
    message: str | None = Omitted
    non_retryable: bool | None = Omitted
    exception: ExceptionInfo | None = Omitted


class ChildRunCancelled(_ChildClosed):
    """The child let a cancellation through."""

    event_type: ClassVar[str] = "ChildRunCancelled"
    message: str | None = Omitted


class ChildRunTerminated(_ChildClosed):
    """The child was terminated (by an operator, or by its parent's close policy)."""

    event_type: ClassVar[str] = "ChildRunTerminated"
    message: str | None = Omitted


class ChildSignalled(Event):
    """A step signalled the child started at step `child_sequence` (a Burrow event)."""

    event_type: ClassVar[str] = "ChildSignalled"
    sequence: int
    child_sequence: int
    child_workflow_instance_id: str
    signal_name: str
    signal_id: str
    delivered: bool


class ChildCancelRequested(Event):
    """The parent asked the child of step `sequence` to cancel (a Burrow event)."""

    event_type: ClassVar[str] = "ChildCancelRequested"
    sequence: int
    child_workflow_instance_id: str
    delivered: bool


class WorkflowTimedOut(Event):
    """The run passed its run deadline or its chain's execution deadline; the run is closed."""

    event_type: ClassVar[str] = "WorkflowTimedOut"
    timeout_kind: Literal["execution", "run"]
    failure_category: str = "timeout"
    message: str
    exception_class: str = "WorkflowTimedOut"
    execution_deadline_at: Timestamp | None = Omitted
    run_deadline_at: Timestamp | None = Omitted


ChildClosed = ChildRunCompleted | ChildRunFailed | ChildRunCancelled | ChildRunTerminated
CHILD_CLOSED_EVENTS = (ChildRunCompleted, ChildRunFailed, ChildRunCancelled, ChildRunTerminated)
