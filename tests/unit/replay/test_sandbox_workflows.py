"""D1: the sandbox inside real activations: the typed error fails the task, logging passes.

Workflow code runs on a WorkflowInstance exactly as a worker runs it; names imported directly
into the workflow's module (`from time import monotonic`) are guarded like the module functions.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import types
import uuid
from datetime import UTC, datetime

import pytest

from burrow import codec, workflow
from burrow.errors import WorkflowSandboxError
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay import sandbox
from burrow.replay.instance import Activation, RunContext, WorkflowInstance
from burrow.workflow.definition import get_definition
from tests.apps import sandbox_flows


@workflow.defn
class HatchScope:
    """One task holds the escape hatch across an await; its sibling must stay guarded."""

    @workflow.run
    async def run(self) -> str:
        async def holder() -> None:
            with workflow.unsafe.sandbox_unrestricted():
                await asyncio.sleep(0)
                time.time()

        async def sibling() -> None:
            time.time()

        results = await asyncio.gather(holder(), sibling(), return_exceptions=True)
        return " ".join(type(r).__name__ for r in results)


@workflow.defn
class SideEffectClock:
    """Reads the wall clock the replay-safe way: once, recorded, inside side_effect."""

    @workflow.run
    async def run(self) -> float:
        return await workflow.side_effect(time.time)


def _activate(cls: type, *args: object) -> Activation:
    definition = get_definition(cls)
    run_id = str(uuid.uuid4())
    run = RunContext(
        run_id=run_id,
        workflow_id="wf-1",
        workflow_type=definition.name,
        namespace="default",
        task_queue="q",
        input=codec.encode(list(args)),
    )
    started = ev.WorkflowStarted(
        workflow_type=definition.name, workflow_instance_id="wf-1", workflow_run_id=run_id
    )
    at = datetime(2024, 1, 1, tzinfo=UTC)
    instance = WorkflowInstance(definition=definition, run=run)
    return instance.activate([HistoryEvent(run_id, 1, started, at, workflow_task_id="t-1")])


def _result(activation: Activation) -> object:
    assert activation.failure is None, activation.failure
    [complete] = activation.commands
    assert isinstance(complete, cmd.CompleteWorkflow)
    return codec.decode(complete.result)


@pytest.mark.parametrize("probe", sorted(sandbox_flows.PROBES))
def test_guarded_call_in_workflow_code_fails_the_workflow_task(probe: str) -> None:
    """D1: datetime.now() and names imported by name raise the typed error; nothing is emitted."""
    activation = _activate(sandbox_flows.Probe, probe)
    assert isinstance(activation.failure, WorkflowSandboxError), activation.failure
    assert "inside workflow code is not replay-safe" in str(activation.failure)
    assert activation.commands == []


def test_logging_metrics_and_the_escape_hatch_pass_in_workflow_code() -> None:
    """D1: logging, structlog, workflow.logger, prometheus and the hatch complete the run."""
    elapsed = _result(_activate(sandbox_flows.Instrumented))
    assert isinstance(elapsed, float) and elapsed >= 0
    assert sandbox_flows.REGISTRY.get_sample_value("sandbox_flow_steps_total") == 1.0


def test_escape_hatch_belongs_to_the_task_that_entered_it() -> None:
    """D1: a task awaiting inside the hatch does not lift the guard for its siblings."""
    assert _result(_activate(HatchScope)) == "NoneType WorkflowSandboxError"


def test_side_effect_functions_run_unguarded() -> None:
    """D1: `fn` of workflow.side_effect is where non-deterministic code is meant to run."""
    activation = _activate(SideEffectClock)
    assert activation.failure is None, activation.failure
    assert [c.type for c in activation.commands] == ["record_side_effect", "complete_workflow"]


def test_names_imported_before_the_guards_are_rebound_in_the_workflow_module() -> None:
    """D1: `from time import time` taken before any guard existed is guarded in workflow code."""
    Early = type("Early", (), {"__module__": "tests_sandbox_early"})
    module = types.ModuleType("tests_sandbox_early")
    sandbox.protect(Early)  # installs the guards; the module below imported before them
    module.__dict__.update(
        wall=time.time.__wrapped__,  # type: ignore[attr-defined]
        pick=random.choice.__wrapped__,  # type: ignore[attr-defined]
        answer=42,
        unhashable=[1],
    )
    sys.modules[module.__name__] = module
    try:
        sandbox.protect(Early)
    finally:
        del sys.modules[module.__name__]
    assert module.wall is time.time and module.pick is random.choice
    assert module.answer == 42 and module.unhashable == [1]
