"""Replay verification: does the current code still replay a recorded run (D1, D4)?

`verify_run` replays one recorded history with the ordinary replay engine, cold and without side
effects: no activity or local activity runs, a side effect history lacks is not evaluated, and
nothing is written anywhere. It reports OK or the first divergence: the step, what the code does
now (`expected`) and what history recorded.

A run may end on an activation whose workflow task has not completed (inputs in history, no
recorded decisions: the task is running, or failed and waits for a retry, or the run was
terminated meanwhile): what the code does next there is new work, not a divergence. Everywhere
else, a decision history lacks is a divergence, and so is a different close (the engine checks
steps as it replays; the close is compared here).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from burrow.errors import NondeterminismError
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import JsonObject
from burrow.replay.instance import (
    Activation,
    ReplayAborted,
    RunContext,
    WorkflowInstance,
    activations,
    describe_event,
)
from burrow.workflow.definition import WorkflowDefinition

NOTHING = "nothing"
"""What `recorded` says where history holds no decision."""

_CLOSE_OF_COMMAND = {
    cmd.CompleteWorkflow: ev.WorkflowCompleted,
    cmd.FailWorkflow: ev.WorkflowFailed,
    cmd.CancelWorkflow: ev.WorkflowCancelled,
    cmd.ContinueAsNew: ev.WorkflowContinuedAsNew,
}


class Verdict(enum.StrEnum):
    """The outcome for one run."""

    OK = "ok"
    DIVERGED = "diverged"
    ERROR = "error"  # could not be replayed at all: unknown type, bad file, a bug in the code


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """One run to verify: its context (with its start input), its history, where it came from."""

    run: RunContext
    events: Sequence[HistoryEvent]
    source: str


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place where the code no longer does what history recorded.

    `step` is the workflow step number (PROTOCOL.md 8.3); None when the decision is not a step:
    the run's close, a skipped signal, an update's answer or a timer cancellation.
    """

    step: int | None
    expected: str
    recorded: str

    @property
    def where(self) -> str:
        """`step N`, or `close` for a decision that is not a numbered step."""
        return "close" if self.step is None else f"step {self.step}"

    def describe(self) -> str:
        """One line: where, what the code does now, what history recorded."""
        return (
            f"{self.where}: the code now produces {self.expected}, history recorded {self.recorded}"
        )


@dataclass(frozen=True, slots=True)
class RunVerdict:
    """How one recorded run replayed."""

    source: str
    workflow_id: str
    run_id: str
    workflow_type: str
    verdict: Verdict
    divergence: Divergence | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        """The verdict as a JSON-ready dict."""
        divergence = self.divergence
        return {
            "source": self.source,
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "workflow_type": self.workflow_type,
            "verdict": self.verdict.value,
            "divergence": None
            if divergence is None
            else {
                "step": divergence.step,
                "expected": divergence.expected,
                "recorded": divergence.recorded,
            },
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdicts of every run verified; `ok` only when there was at least one and all passed."""

    runs: Sequence[RunVerdict]

    @property
    def ok(self) -> bool:
        """True when every run replayed without divergence or error (and there was one)."""
        return bool(self.runs) and all(r.verdict is Verdict.OK for r in self.runs)

    def count(self, verdict: Verdict) -> int:
        """How many runs got `verdict`."""
        return sum(1 for r in self.runs if r.verdict is verdict)

    def to_json(self) -> JsonObject:
        """`{ok, summary, runs}` as a JSON-ready dict."""
        return {
            "ok": self.ok,
            "summary": {v.value: self.count(v) for v in Verdict},
            "runs": [r.to_json() for r in self.runs],
        }


T = TypeVar("T")


class _ReplayError(Exception):
    """The code failed while replaying for a reason other than nondeterminism."""


class _UnrecordedSideEffect(ReplayAborted):
    """Unwinds the code at a side effect history does not hold: verifying never evaluates it."""


class VerifyingInstance(WorkflowInstance):
    """The replay engine, refusing to evaluate a side effect history lacks (no side effects)."""

    unrecorded_side_effect: int | None = None
    """The step of the first side effect the code asked for that history does not hold."""

    def side_effect(self, fn: Callable[[], T]) -> T:
        """Replay a recorded side effect; for any other, note its step and unwind instead."""
        step = self._next_step  # the step this side effect takes (the engine's counter)

        def refuse() -> T:
            if self.unrecorded_side_effect is None:
                self.unrecorded_side_effect = step
            raise _UnrecordedSideEffect()

        return super().side_effect(refuse)


def verify_run(recorded: RecordedRun, *, workflows: Mapping[str, WorkflowDefinition]) -> RunVerdict:
    """Replay one recorded run against `workflows` (the current code) and judge it."""
    run = recorded.run

    def verdict(kind: Verdict, **found: Any) -> RunVerdict:
        return RunVerdict(
            source=recorded.source,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            workflow_type=run.workflow_type,
            verdict=kind,
            **found,
        )

    definition = workflows.get(run.workflow_type)
    if definition is None:
        known = ", ".join(sorted(workflows)) or "none"
        return verdict(
            Verdict.ERROR,
            error=f"workflow type {run.workflow_type!r} is not in the app (it has: {known})",
        )
    # Registration is not what is verified: an unknown activity shows up as a new step.
    instance = VerifyingInstance(definition=definition, run=run, known_activities=None)
    history, close = split_close(recorded.events)
    activation = instance.activate(history)
    try:
        divergence = judge(instance, activation, recorded.events, close)
    except _ReplayError as exc:
        return verdict(Verdict.ERROR, error=str(exc))
    if divergence is None:
        return verdict(Verdict.OK)
    return verdict(Verdict.DIVERGED, divergence=divergence)


def split_close(events: Sequence[HistoryEvent]) -> tuple[list[HistoryEvent], ev.Event | None]:
    """History without the close the code itself recorded, and that close (or None).

    The engine ignores a close once history holds one; without it, the code's own close comes
    back as a command to compare. A close recorded outside workflow code (terminate, an
    immediate cancel) has no workflow task and stays.
    """
    for index, record in enumerate(events):
        if isinstance(record.event, ev.TERMINAL_EVENTS) and record.workflow_task_id:
            return [*events[:index], *events[index + 1 :]], record.event
    return list(events), None


def judge(
    instance: VerifyingInstance,
    activation: Activation,
    events: Sequence[HistoryEvent],
    close: ev.Event | None,
) -> Divergence | None:
    """The first divergence of a finished replay, or None; _ReplayError for any other failure."""
    steps = recorded_steps(events)
    open_tail = is_awaiting_decisions(events)
    side_effect = instance.unrecorded_side_effect
    if side_effect is not None:
        recorded = steps.get(side_effect)
        if recorded is None and open_tail and side_effect > max(steps, default=0):
            return None
        return Divergence(side_effect, "side effect", _described(recorded))
    failure = activation.failure
    if isinstance(failure, NondeterminismError):
        ids = failure.ids  # run_id, seq, expected, recorded (NondeterminismError's keywords)
        return Divergence(int(ids["seq"]), str(ids["expected"]), str(ids["recorded"]))
    if failure is not None:
        raise _ReplayError(f"{type(failure).__name__}: {failure}")
    for request in activation.local_activities:
        if not open_tail:
            return Divergence(request.seq, f"local activity {request.activity_type!r}", NOTHING)
    return _judge_commands(activation.commands, close, open_tail)


def _judge_commands(
    commands: Sequence[cmd.Command], close: ev.Event | None, open_tail: bool
) -> Divergence | None:
    closing = [c for c in commands if isinstance(c, cmd.TERMINAL_COMMANDS)]
    for command in commands:
        if isinstance(command, cmd.STEP_COMMANDS) and not open_tail:
            return Divergence(command.seq, cmd.describe_step(command), NOTHING)
        if not isinstance(command, cmd.TERMINAL_COMMANDS) and not open_tail:
            return Divergence(None, describe_command(command), NOTHING)
    if close is None:
        if closing and not open_tail:
            return Divergence(None, describe_command(closing[0]), NOTHING)
        return None
    if not closing:
        return Divergence(None, "no close (the code is waiting)", close.event_type)
    if _CLOSE_OF_COMMAND[type(closing[0])] is not type(close):
        return Divergence(None, describe_command(closing[0]), close.event_type)
    return None


def describe_command(command: cmd.Command) -> str:
    """A short human form of any command, for divergence reports."""
    if isinstance(command, cmd.STEP_COMMANDS):
        return cmd.describe_step(command)
    match command:
        case cmd.SkipSignal():
            return f"skip_signal {command.signal_name!r}"
        case cmd.CompleteUpdate() | cmd.FailUpdate():
            return f"{command.type} {command.update_id!r}"
        case cmd.CancelTimer():
            return f"cancel_timer of step {command.sequence}"
        case cmd.CancelChildWorkflow():
            return f"cancel_child_workflow of step {command.sequence}"
        case cmd.CancelActivity():
            return f"cancel_activity of step {command.sequence}"
        case cmd.ContinueAsNew():
            return f"continue_as_new as {command.workflow_type!r}"
        case cmd.FailWorkflow():
            return f"fail_workflow ({command.exception_type}: {command.message})"
    return command.type


def recorded_steps(events: Sequence[HistoryEvent]) -> dict[int, ev.StepEvent]:
    """The step events of a history, by step number."""
    found: dict[int, ev.StepEvent] = {}
    for record in events:
        if isinstance(record.event, ev.STEP_EVENTS):
            found.setdefault(record.event.sequence, record.event)
    return found


_DECISION_EVENTS = (
    *ev.STEP_EVENTS,
    ev.TimerCancelled,
    ev.UpdateCompleted,
    ev.SignalSkipped,
    ev.ChildCancelRequested,
    ev.ActivityCancelRequested,
)
"""Events a workflow task's commands record (besides a close and a local activity's events)."""


def is_decision(event: ev.Event) -> bool:
    """Whether workflow code decided the event (a step, a close...), rather than it being input."""
    return isinstance(event, (*_DECISION_EVENTS, *ev.TERMINAL_EVENTS)) or ev.is_local(event)


def is_awaiting_decisions(events: Sequence[HistoryEvent]) -> bool:
    """Whether the run's last workflow task has its inputs but no recorded decisions yet.

    Such a task was claimed and has not completed (or it failed and waits for a retry); the run
    may still be open, or have been closed from outside (terminated) meanwhile.
    """
    if any(isinstance(e.event, ev.TERMINAL_EVENTS) and e.workflow_task_id for e in events):
        return False  # the code closed the run: every task of it completed
    groups = activations(events)
    return not groups or not any(is_decision(e.event) for e in groups[-1])


def _described(event: ev.StepEvent | None) -> str:
    return NOTHING if event is None else describe_event(event)
