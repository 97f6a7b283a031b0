"""History checks shared by tests: contiguity, once-only steps, and replay equivalence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from burrow.app import App
from burrow.protocol.commands import Command
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import WorkflowInstance, activations, is_input
from burrow.store.models import RunInfo
from burrow.worker.workflow_tasks import run_context

ONCE_PER_STEP = {
    "ActivityScheduled",
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityTimedOut",
    "TimerScheduled",
    "TimerFired",
    "SideEffectRecorded",
    "VersionMarkerRecorded",
    "ChildWorkflowScheduled",
    "ChildRunStarted",
    "ChildRunCompleted",
    "ChildRunFailed",
    "ChildRunCancelled",
    "ChildRunTerminated",
}

_COMMAND_EVENT = {
    "schedule_activity": "ActivityScheduled",
    "record_local_activity": "ActivityScheduled",
    "start_timer": "TimerScheduled",
    "cancel_timer": "TimerCancelled",
    "record_side_effect": "SideEffectRecorded",
    "record_version_marker": "VersionMarkerRecorded",
    "complete_workflow": "WorkflowCompleted",
    "fail_workflow": "WorkflowFailed",
    "cancel_workflow": "WorkflowCancelled",
    "continue_as_new": "WorkflowContinuedAsNew",
    "complete_update": "UpdateCompleted",
    "fail_update": "UpdateCompleted",
    "skip_signal": "SignalSkipped",
    "start_child_workflow": "ChildWorkflowScheduled",
    "signal_child_workflow": "ChildSignalled",
    "cancel_child_workflow": "ChildCancelRequested",
    "upsert_memo": "MemoUpserted",
    "upsert_search_attributes": "SearchAttributesUpserted",
}


def assert_well_formed(history: Sequence[HistoryEvent]) -> None:
    """Sequences 1..N, WorkflowStarted first, each durable step recorded once (D3)."""
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    assert history[0].event_type == "WorkflowStarted"
    steps = Counter(
        (e.event_type, e.payload.get("sequence")) for e in history if e.event_type in ONCE_PER_STEP
    )
    duplicates = {key: n for key, n in steps.items() if n > 1}
    assert not duplicates, f"duplicate events: {duplicates}"
    signals = Counter(e.payload["signal_id"] for e in history if e.event_type == "SignalReceived")
    assert all(n == 1 for n in signals.values()), signals


def _shape(commands: Sequence[Command]) -> list[tuple[str, Any]]:
    shapes = []
    for command in commands:
        key = getattr(command, "seq", getattr(command, "sequence", None))
        key = key or getattr(command, "update_id", getattr(command, "signal_id", None))
        shapes.append((_COMMAND_EVENT[command.type], key))
    return shapes


def _recorded_shape(group: Sequence[HistoryEvent]) -> list[tuple[str, Any]]:
    shapes = []
    for event in group:
        if event.event_type not in _COMMAND_EVENT.values():
            continue  # inputs and informational events (ActivityStarted, retries)
        key = event.payload.get("sequence") or event.payload.get(
            "update_id", event.payload.get("signal_id")
        )
        shapes.append((event.event_type, key))
    return shapes


def replay_each_activation(
    app: App, run: RunInfo, history: Sequence[HistoryEvent], *, warm: bool
) -> list[list[tuple[str, Any]]]:
    """Re-derive every activation's commands from history alone; returns them per activation.

    Cold: a fresh instance replays everything before the activation's own commands. Warm: one
    instance is resumed with each activation's inputs only, as a sticky cache would be (S12).
    """
    groups = activations(history)
    produced: list[list[tuple[str, Any]]] = []
    warm_instance = replay_instance(app, run)
    previous_commands: list[HistoryEvent] = []
    for index, group in enumerate(groups):
        inputs = [e for e in group if is_input(e)]
        if warm:
            # A cached instance sees only what is new: last task's recorded commands + inputs.
            activation = warm_instance.activate([*previous_commands, *inputs])
            previous_commands = [e for e in group if not is_input(e)]
        else:
            before = [e for g in groups[:index] for e in g] + inputs
            activation = replay_instance(app, run).activate(before)
        assert activation.failure is None, activation.failure
        produced.append(_shape(activation.commands))
    return produced


def recorded_per_activation(history: Sequence[HistoryEvent]) -> list[list[tuple[str, Any]]]:
    """What history recorded as each activation's commands."""
    return [_recorded_shape(group) for group in activations(history)]


def replay_instance(app: App, run: RunInfo) -> WorkflowInstance:
    """A fresh instance of the run's workflow from `app`, as a worker would build it."""
    return WorkflowInstance(
        definition=app.workflows[run.workflow_type],
        run=run_context(run),
        known_activities=app.activities.keys(),
    )
