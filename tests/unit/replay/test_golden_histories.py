"""Golden histories replay cold and warm to the commands they recorded (S12, D1, D3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from burrow import App, activity, demo, workflow
from burrow.errors import NondeterminismError
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.store.models import HistoryEvent
from burrow.testing.helpers import history_from_json, replay_history
from tests.apps import child_flows, flows, poison_flows
from tests.support.history import recorded_per_activation, replay_each_activation

HISTORIES = Path(__file__).with_name("histories")
APPS = {
    "order_flow": flows.app,
    "countdown": flows.app,
    "demo_order": demo.app,
    "tally_skipped_signals": poison_flows.app,  # issue 13: four bad signals, skipped
    "child_family": child_flows.app,  # issue 28: a parent of five children, one failing
    "child_waiting_leaf": child_flows.app,  # issue 28: a child, signalled by its parent
}


def _load(name: str) -> tuple[RunContext, list[HistoryEvent]]:
    doc = json.loads((HISTORIES / f"{name}.json").read_text())
    run = RunContext(**doc["run"])
    return run, history_from_json(doc["events"], run.run_id)


class _Run:
    """RunInfo-shaped view of a golden run for the shared replay helpers."""

    def __init__(self, ctx: RunContext) -> None:
        self.__dict__.update(ctx.__dict__ if hasattr(ctx, "__dict__") else {})
        for field in ("run_id", "workflow_id", "workflow_type", "namespace", "task_queue", "input"):
            setattr(self, field, getattr(ctx, field))


@pytest.mark.parametrize("name", sorted(APPS))
@pytest.mark.parametrize("mode", ["cold", "sticky"])
def test_golden_history_replays_to_recorded_commands(name: str, mode: str) -> None:
    """S12: every activation's commands come back identical, replayed cold or resumed warm."""
    run, history = _load(name)
    produced = replay_each_activation(APPS[name], _Run(run), history, warm=mode == "sticky")  # type: ignore[arg-type]
    assert produced == recorded_per_activation(history)


@pytest.mark.parametrize("name", sorted(APPS))
def test_closed_history_replays_to_no_new_commands(name: str) -> None:
    """D3: replay never re-issues what history already recorded."""
    run, history = _load(name)
    assert replay_history(APPS[name], run, history) == []
    middle = history[len(history) // 2].sequence
    assert replay_history(APPS[name], run, history, split_at=[middle]) == []


@activity.defn(name="greet")
async def greet_renamed(name: str) -> str:
    return name


@activity.defn(name="wave")
async def wave(name: str) -> str:
    return name


@workflow.defn(name="OrderFlow")
class ChangedOrderFlow:
    """OrderFlow after an unguarded change: a new activity where `greet` used to be."""

    @workflow.run
    async def run(self, name: str) -> Any:
        await workflow.side_effect(lambda: "x")
        workflow.get_version("greet-twice", 1, 2)
        return await workflow.activity(wave, name)


def test_changed_workflow_code_raises_nondeterminism_naming_both_sides() -> None:
    """D1, runtime invariant 1: divergence names run, step and both commands."""
    run, history = _load("order_flow")
    app = App(
        task_queue=flows.TASK_QUEUE, workflows=[ChangedOrderFlow], activities=[wave, greet_renamed]
    )
    with pytest.raises(NondeterminismError) as caught:
        replay_history(app, run, history)
    error = caught.value
    assert error.run_id == run.run_id
    assert error.seq == 3
    assert "wave" in error.expected and "greet" in error.recorded
    assert run.run_id in str(error) and "step 3" in str(error)


@workflow.defn(name="OrderFlow")
class PatchedOrderFlow:
    """A guarded change: old runs keep the old branch, new ones take the new."""

    @workflow.run
    async def run(self, name: str) -> Any:
        await workflow.side_effect(lambda: "x")
        workflow.get_version("greet-twice", 1, 2)
        if workflow.get_version("wave-first", 1, 2) == 2:
            await workflow.activity(wave, name)
        return await workflow.activity(flows.greet, name)


def test_get_version_keeps_old_runs_on_the_old_branch() -> None:
    """D1: a get_version added later returns min_supported for histories without its marker."""
    run, history = _load("order_flow")
    early = [e for e in history if e.sequence <= 5]  # up to the first ActivityScheduled
    app = App(
        task_queue=flows.TASK_QUEUE, workflows=[PatchedOrderFlow], activities=[wave, flows.greet]
    )
    instance = WorkflowInstance(
        definition=app.workflows["OrderFlow"], run=run, known_activities=app.activities
    )
    activation = instance.activate(early)
    assert activation.failure is None, activation.failure
    assert activation.commands == []
