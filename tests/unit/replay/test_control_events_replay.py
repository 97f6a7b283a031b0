"""Replay passes over what an operator's repair, archive or redrive recorded (D1, D3).

The control plane's command events (`burrow.protocol.control_events`) have no workflow task:
a golden history with them added replays, cold and warm, to what it replays to without them, and
`replay verify` finds it unchanged.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from burrow.protocol import events as ev
from burrow.replay.activation import is_input
from burrow.replay.instance import RunContext
from burrow.replay.verify import RecordedRun, Verdict, is_decision, verify_run
from burrow.store.models import HistoryEvent
from burrow.testing.helpers import history_from_json, replay_history
from tests.apps import flows

GOLDEN = Path(__file__).with_name("histories") / "order_flow.json"


def _golden() -> tuple[RunContext, list[HistoryEvent]]:
    doc = json.loads(GOLDEN.read_text())
    run = RunContext(**doc["run"])
    return run, history_from_json(doc["events"], run.run_id)


def _with_control_events(
    run: RunContext, history: list[HistoryEvent], *, after: int
) -> list[HistoryEvent]:
    """The history with a repair recorded after sequence `after` and an archive at its end."""
    ids = {
        "workflow_instance_id": run.workflow_id,
        "workflow_run_id": run.run_id,
    }
    repair = ev.RepairRequested(
        workflow_command_id="c-repair", **ids, outcome="repair_not_needed", wait_kind="activity"
    )
    archive = [
        ev.ArchiveRequested(workflow_command_id="c-archive", **ids, outcome="archived"),
        ev.WorkflowArchived(
            workflow_command_id="c-archive", **ids, archive_command_id="c-archive", reason="kept"
        ),
    ]
    at = history[after - 1].recorded_at

    def control(event: ev.Event) -> HistoryEvent:
        return HistoryEvent(run_id=run.run_id, sequence=0, event=event, recorded_at=at)

    merged = [*history[:after], control(repair), *history[after:], *map(control, archive)]
    return [replace(e, sequence=n) for n, e in enumerate(merged, start=1)]


def test_a_history_with_repair_and_archive_events_replays_as_without_them() -> None:
    """D1, D3: cold and warm replay of the run give no new command, with the events or not;
    cut before its close, both ask for the same next commands."""
    run, history = _golden()
    marked = _with_control_events(run, history, after=4)
    assert [e.event_type for e in marked].count("RepairRequested") == 1
    assert replay_history(flows.app, run, marked) == []
    assert replay_history(flows.app, run, marked, split_at=[5, 10]) == []
    # Before the signal and the close: the code waits where it waited without the events.
    open_part = [e for e in marked if e.event_type not in ("SignalReceived", "WorkflowCompleted")]
    cut = [e for e in history if e.event_type not in ("SignalReceived", "WorkflowCompleted")]
    assert replay_history(flows.app, run, open_part) == replay_history(flows.app, run, cut)
    verdict = verify_run(RecordedRun(run, marked, "marked"), workflows=flows.app.workflows)
    assert verdict.verdict is Verdict.OK, verdict


def test_control_events_are_neither_input_nor_decisions() -> None:
    """D3: the command events are recorded beside the run's own, never fed to its code."""
    when = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    for model in ev.CONTROL_EVENTS:
        assert model.event_type in ev.EVENT_TYPES
        fields = {
            "workflow_command_id": "c",
            "workflow_instance_id": "wf",
            "workflow_run_id": "run",
        }
        extra: dict[str, object] = {
            ev.RepairRequested: {"outcome": "repair_dispatched"},
            ev.ArchiveRequested: {"outcome": "archived"},
            ev.WorkflowArchived: {"archive_command_id": "c"},
            ev.RedriveRequested: {"continued_to_run_id": "run-2", "resume_step_sequence": 2},
        }[model]
        event = model.model_validate({**fields, **extra})
        record = HistoryEvent(run_id="run", sequence=2, event=event, recorded_at=when)
        assert not is_input(record) and not is_decision(event)
