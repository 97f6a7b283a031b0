"""Cooperative cancellation history events (PROTOCOL.md 6.5, 8.2; protocol 1.20).

Re-exported by `burrow.protocol.events`. A client's `request-cancellation` records
`CooperativeCancellationRequested` once per run (its `workflow_command_id` is the request id,
kept for every repeated request); the worker holding the run's workflow task then names the
authored call the cancellation interrupts, and `deliver-cancellation` records
`CooperativeCancellationDelivered` there, once. The workflow's cleanup code runs after it, until
`cleanup_deadline_at`.

Burrow adds `ActivityCancelRequested`: workflow code cancelled the code awaiting a queued
activity whose policy waits for it (`wait_cancellation_completed`), so the activity was asked to
stop; recorded once so replay does not ask again, the activity's own close resolves the step.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from burrow.protocol.event_base import Event
from burrow.protocol.shapes import Omitted, Timestamp

CallKind = Literal[
    "activity",
    "local_activity",
    "timer",
    "condition",
    "signal",
    "child",
    "parallel",
    "selection_handle",
    "service_operation",
]
"""The authored calls a cooperative cancellation can be delivered at (the SDK's list)."""


class CooperativeCancellationRequested(Event):
    """A client asked the run to cancel with bounded cleanup (`request-cancellation`)."""

    event_type: ClassVar[str] = "CooperativeCancellationRequested"
    workflow_command_id: str
    workflow_instance_id: str
    workflow_run_id: str
    requested_at: Timestamp
    cleanup_deadline_at: Timestamp
    cleanup_timeout_seconds: int
    reason: str | None = Omitted


class CooperativeCancellationDelivered(Event):
    """The request reached workflow code at one authored call (`sequence`, `call_kind`)."""

    event_type: ClassVar[str] = "CooperativeCancellationDelivered"
    workflow_command_id: str
    workflow_instance_id: str
    workflow_run_id: str
    sequence: int
    call_kind: CallKind
    sequence_span: int = 1
    operation_sequence: int | None = Omitted
    operation_sequence_span: int | None = Omitted


class ActivityCancelRequested(Event):
    """Workflow code asked the activity of step `sequence` to stop and waits for it to end."""

    event_type: ClassVar[str] = "ActivityCancelRequested"
    sequence: int
    activity_execution_id: str
