"""Signals and start input that do not fit their handler never fail a workflow task (issue 13).

The golden history `tally_skipped_signals.json` was recorded from real workers: four bad signals
(arity, type, undecodable payload, unknown name), each skipped in its own workflow task, around
good ones that complete the run. D1, D3, issue 13 items 1 and 2.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store.models import HistoryEvent
from burrow.testing.helpers import history_from_json, replay_history
from tests.apps import poison_flows

HISTORY = Path(__file__).with_name("histories") / "tally_skipped_signals.json"
SKIPPED = ["bad-arity", "bad-type", "undecodable", "unknown-name"]


def _load() -> tuple[RunContext, list[HistoryEvent]]:
    doc = json.loads(HISTORY.read_text())
    run = RunContext(**doc["run"])
    return run, history_from_json(doc["events"], run.run_id)


def _instance(run: RunContext) -> WorkflowInstance:
    return WorkflowInstance(definition=poison_flows.app.workflows["TallyFlow"], run=run)


def _until(history: list[HistoryEvent], seq: int) -> list[HistoryEvent]:
    return [e for e in history if e.sequence <= seq]


def _skip_seqs(history: list[HistoryEvent]) -> list[int]:
    return [e.sequence for e in history if e.event_type == "SignalSkipped"]


def test_a_bad_signal_yields_one_skip_command_naming_the_reason() -> None:
    """Issue 13 item 1: the signal is skipped, not applied; the task does not fail."""
    run, history = _load()
    activation = _instance(run).activate(_until(history, 2))  # started + the bad-arity signal
    assert activation.failure is None
    assert activation.commands == [
        cmd.SkipSignal(
            signal_id="bad-arity", signal_name="bump", reason="takes 0 argument(s) (none), got 2"
        )
    ]


@pytest.mark.parametrize("skip_seq", range(4))
def test_cold_and_warm_agree_when_a_skipped_signal_sits_in_history(skip_seq: int) -> None:
    """D1: resumed right after a recorded skip, or replayed cold, the run ends the same way."""
    run, history = _load()
    split = _skip_seqs(history)[skip_seq]
    cold = replay_history(poison_flows.app, run, history[:-1])
    warm = replay_history(poison_flows.app, run, history[:-1], split_at=[split])
    assert cold == warm
    assert [c.type for c in cold] == ["complete_workflow"]
    assert isinstance(cold[0], cmd.CompleteWorkflow)
    assert codec.decode(cold[0].result) == {"total": 13, "bumps": 1}


def test_a_recorded_skip_is_not_decided_or_logged_again() -> None:
    """D3: replay finds the SignalSkipped event and neither re-emits nor re-logs the decision."""
    run, history = _load()
    last_skip = _skip_seqs(history)[-1]
    with capture_logs() as logs:
        activation = _instance(run).activate(_until(history, last_skip))
    assert activation.failure is None
    assert activation.commands == []
    assert [entry for entry in logs if entry["event"] == "signal_skipped"] == []


def test_a_skip_is_logged_once_with_run_signal_and_reason() -> None:
    """Issue 13 item 1: a warning names the run, the signal name and id, and the reason."""
    run, history = _load()
    undecodable = next(e.sequence for e in history if e.payload.get("signal_id") == "undecodable")
    with capture_logs() as logs:
        _instance(run).activate(_until(history, undecodable))
    warnings = [entry for entry in logs if entry["event"] == "signal_skipped"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"
    assert warnings[0]["run_id"] == run.run_id
    assert warnings[0]["signal_name"] == "add"
    assert warnings[0]["signal_id"] == "undecodable"
    assert "undecodable payload" in warnings[0]["reason"]


@pytest.mark.parametrize(
    ("args", "parameter"), [(["x"], "parameter 'start' expects int"), ([1, 2, 3], "got 3")]
)
def test_start_input_that_does_not_bind_fails_the_run_once(
    args: list[object], parameter: str
) -> None:
    """Issue 13 item 2: a non-retryable InvalidWorkflowInput failure, not a task failure."""
    run, history = _load()
    bad = dataclasses.replace(run, input=dict(codec.encode(args)))
    instance = _instance(bad)
    activation = instance.activate(_until(history, 1))
    assert activation.failure is None
    [command] = activation.commands
    assert isinstance(command, cmd.FailWorkflow)
    assert command.exception_type == "InvalidWorkflowInput"
    assert command.non_retryable
    assert command.message is not None and parameter in command.message
    assert instance.closed
