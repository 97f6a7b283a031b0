"""A paged cold replay gives a whole replay's commands, or says it cannot (issue 32, S12).

Pages may end anywhere, even inside a workflow task: a task's events are activated together.
Code that takes a step before a block point where history recorded none (a `get_version` added
since) would make a new step in a paged replay, which a whole replay, knowing the later steps,
matches to the old branch: the paged replay reports that it diverged instead of answering.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from burrow import codec, workflow
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import RunContext, WorkflowInstance
from burrow.replay.paged import PagedReplay
from burrow.workflow.definition import WorkflowDefinition, get_definition

AT = datetime(2024, 1, 1, tzinfo=UTC)


def _zero() -> int:
    return 0


@workflow.defn(name="Gate")
class Gate:
    """A side effect, a wait for a signal, a side effect."""

    def __init__(self) -> None:
        self.open = False

    @workflow.signal
    def release(self) -> None:
        self.open = True

    @workflow.run
    async def run(self) -> int:
        await workflow.side_effect(_zero)
        await workflow.wait_condition(lambda: self.open)
        await workflow.side_effect(_zero)
        return 1


@workflow.defn(name="Gate")
class PatchedGate(Gate):
    """Gate with a version marker added just before it blocks (after its history was made)."""

    @workflow.run
    async def run(self) -> int:
        await workflow.side_effect(_zero)
        workflow.get_version("gate", 1, 2)
        await workflow.wait_condition(lambda: self.open)
        await workflow.side_effect(_zero)
        return 1


RUN_ID = str(uuid.uuid4())


def _history() -> list[HistoryEvent]:
    """Gate's recorded history: two workflow tasks, the second one with the signal."""
    zero = codec.encode(0)
    mark = {"result": str(zero["blob"]), "payload_codec": str(zero["codec"])}
    run = {"workflow_instance_id": "gate-1", "workflow_run_id": RUN_ID}
    args = codec.as_object(codec.encode([]))
    events: list[tuple[ev.Event, str]] = [
        (ev.WorkflowStarted(workflow_type="Gate", **run), "task-1"),
        (ev.SideEffectRecorded(sequence=1, **mark), "task-1"),
        (ev.SignalReceived(signal_id="s1", signal_name="release", **run, arguments=args), "task-2"),
        (ev.SideEffectRecorded(sequence=2, **mark), "task-2"),
        (ev.WorkflowCompleted(output=str(codec.encode(1)["blob"]), payload_codec="avro"), "task-2"),
    ]
    return [HistoryEvent(RUN_ID, n, e, AT, task) for n, (e, task) in enumerate(events, 1)]


def _instance(definition: WorkflowDefinition) -> WorkflowInstance:
    run = RunContext(
        run_id=RUN_ID,
        workflow_id="gate-1",
        workflow_type="Gate",
        namespace="default",
        task_queue="q",
        input=codec.encode([]),
    )
    return WorkflowInstance(definition=definition, run=run)


def _paged(definition: WorkflowDefinition, events: list[HistoryEvent], size: int) -> PagedReplay:
    paged = PagedReplay(_instance(definition))
    for start in range(0, len(events), size):
        paged.feed(events[start : start + size])
    return paged


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_pages_of_any_size_give_the_whole_replay(size: int) -> None:
    """Cut inside a task or between tasks, the same commands and the same state come out."""
    events = _history()
    for end in range(1, len(events) + 1):
        whole_instance = _instance(get_definition(Gate))
        whole = whole_instance.activate(events[:end])
        paged = _paged(get_definition(Gate), events[:end], size)
        assert paged.diverged is None
        activation = paged.finish()
        assert activation.failure is None and whole.failure is None
        assert [c.type for c in activation.commands] == [c.type for c in whole.commands]
        assert paged.instance.closed == whole_instance.closed
        assert paged.instance.recorded_steps == whole_instance.recorded_steps == 0


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_a_step_added_before_a_block_point_makes_the_pages_diverge(size: int) -> None:
    """The whole replay takes the old branch; the paged one would record a marker: refused."""
    events = _history()
    whole = _instance(get_definition(PatchedGate)).activate(events)
    assert whole.failure is None and whole.commands == []  # old branch, as recorded

    paged = _paged(get_definition(PatchedGate), events, size)

    assert paged.diverged == "the code made new steps before history's last workflow task"


def test_a_step_recorded_out_of_order_makes_the_pages_diverge() -> None:
    """A step recorded after a later one could have been looked up too early: refused."""
    events = _history()
    first, second = events[1].event, events[3].event
    assert isinstance(first, ev.SideEffectRecorded) and isinstance(second, ev.SideEffectRecorded)
    swapped = [
        events[0],
        HistoryEvent(RUN_ID, 2, second, AT, "task-1"),
        events[2],
        HistoryEvent(RUN_ID, 4, first, AT, "task-2"),
        events[4],
    ]

    paged = _paged(get_definition(Gate), swapped, 2)

    assert paged.diverged is not None


def test_a_new_command_in_the_last_task_is_the_answer() -> None:
    """Only the last task may make new steps: they are what the worker records."""
    events = _history()[:3]  # the second task's signal, not yet its commands

    activation = _paged(get_definition(Gate), events, 1).finish()

    assert [type(c) for c in activation.commands] == [cmd.RecordSideEffect, cmd.CompleteWorkflow]
