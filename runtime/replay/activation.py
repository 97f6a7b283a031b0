"""What one activation is made of and gives back: its events, its outcome, its local requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from burrow.codec import Payload
from burrow.errors import BurrowError
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import LocalActivitySpec

INVALID_WORKFLOW_INPUT = "InvalidWorkflowInput"
"""The ApplicationError type that fails a run whose start input does not fit its run method."""

INVALID_UPDATE_ARGUMENTS = "InvalidUpdateArguments"
"""The failure type an update caller gets when its arguments do not fit the handler."""

INPUT_EVENTS = (
    ev.WorkflowStarted,
    ev.ActivityCompleted,
    ev.ActivityFailed,
    ev.ActivityTimedOut,
    ev.ActivityCancelled,
    ev.TimerFired,
    ev.SignalReceived,
    ev.UpdateAccepted,
    ev.CancelRequested,
    # A client's request with bounded cleanup reaches Burrow code as any cancellation does.
    ev.CooperativeCancellationRequested,
    *ev.CHILD_CLOSED_EVENTS,
)
"""Events that feed workflow code; every other event records what the code itself did."""


def is_input(event: HistoryEvent) -> bool:
    """Whether the event is an input to workflow code (a result, timer, signal, update...).

    A local activity's outcome is not: its own workflow task recorded it, and replay hands it
    to the code where the code awaited it, not at the start of the activation (A3).
    """
    return isinstance(event.event, INPUT_EVENTS) and not ev.is_local(event.event)


def describe_event(event: ev.Event) -> str:
    """The short form `describe_step` gives a command, for a recorded step event."""
    match event:
        case ev.ActivityScheduled() if event.execution_mode == "local":
            return f"local activity {event.activity_type!r}"
        case ev.ActivityScheduled():
            return f"activity {event.activity_type!r}"
        case ev.TimerScheduled():
            return f"timer {event.delay_seconds:g}s"
        case ev.SideEffectRecorded():
            return "side effect"
        case ev.VersionMarkerRecorded():
            return f"version marker {event.change_id!r}"
        case ev.ChildWorkflowScheduled():
            return f"child workflow {event.child_workflow_type!r}"
        case ev.ChildSignalled():
            return f"signal {event.signal_name!r} to child {event.child_sequence}"
        case ev.MemoUpserted():
            return "memo upsert"
        case ev.SearchAttributesUpserted():
            return "search attributes upsert"
    return event.event_type


class ReplayStateError(BurrowError):
    """The engine was driven against its own state (an engine bug): fails the workflow task."""


class ReplayAborted(BaseException):
    """Unwinds workflow code after a replay failure.

    A BaseException, so a user's `except Exception` cannot swallow it.
    """


@dataclass(frozen=True, slots=True)
class RunContext:
    """The run an instance belongs to."""

    run_id: str
    workflow_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    input: Payload | Mapping[str, object]


@dataclass(frozen=True, slots=True)
class LocalActivityRequest:
    """A local activity the code awaits that history does not hold yet: the worker runs it (A3).

    `options` is the snapshot ActivityScheduled will record (retry policy and timeouts).
    """

    seq: int
    activity_type: str
    activity_execution_id: str
    options: LocalActivitySpec

    def cancelled(self, message: str) -> cmd.RecordLocalActivity:
        """The record of this execution ended before any attempt ran."""
        return self.record(outcome="cancelled", attempts=[], message=message)

    def record(self, **outcome: Any) -> cmd.RecordLocalActivity:
        """The `record_local_activity` command for this execution with its outcome fields."""
        options = self.options
        return cmd.RecordLocalActivity(
            seq=self.seq,
            activity_type=self.activity_type,
            arguments=options.arguments,
            retry_policy=options.retry_policy,
            start_to_close_timeout=options.start_to_close_timeout,
            schedule_to_close_timeout=options.schedule_to_close_timeout,
            heartbeat_timeout=options.heartbeat_timeout,
            **outcome,
        )


@dataclass(slots=True)
class Activation:
    """The outcome of one activation: commands to persist, or why the task failed.

    While `local_activities` is not empty the activation is unfinished: the worker runs them and
    hands their records to `WorkflowInstance.resolve_local_activities`, which goes on (A3).
    """

    commands: list[cmd.Command] = field(default_factory=list)
    failure: BaseException | None = None
    local_activities: list[LocalActivityRequest] = field(default_factory=list)


def activations(events: Sequence[HistoryEvent]) -> list[list[HistoryEvent]]:
    """Split events into activations: consecutive events of one workflow task."""
    groups: list[list[HistoryEvent]] = []
    for event in events:
        if event.workflow_task_id is None:
            continue
        if groups and groups[-1][-1].workflow_task_id == event.workflow_task_id:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups
