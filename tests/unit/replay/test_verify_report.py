"""The replay verifier's verdicts on golden histories: OK, or the first divergence (D1, D4).

Each changed OrderFlow below is the golden `order_flow` workflow edited without a version guard;
the verifier must name the step, what the code does now and what history recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burrow import ApplicationError, demo, workflow
from burrow.cli.replay import print_report
from burrow.replay.instance import RunContext
from burrow.replay.verify import (
    Divergence,
    RecordedRun,
    RunVerdict,
    Verdict,
    VerifyReport,
    verify_run,
)
from burrow.testing.helpers import history_from_json
from burrow.workflow.definition import WorkflowDefinition, get_definition
from tests.apps import flows, poison_flows

HISTORIES = Path(__file__).with_name("histories")
APPS = {
    "order_flow": flows.app,
    "countdown": flows.app,
    "demo_order": demo.app,
    "tally_skipped_signals": poison_flows.app,
}
evaluated: list[str] = []  # side effects a verifier must never evaluate land here


def recorded(name: str, *, up_to: int | None = None) -> RecordedRun:
    doc = json.loads((HISTORIES / f"{name}.json").read_text())
    run = RunContext(**doc["run"])
    events = history_from_json(doc["events"], run.run_id)
    if up_to is not None:
        events = [e for e in events if e.sequence <= up_to]
    return RecordedRun(run=run, events=events, source=name)


def order_flow(change: str) -> dict[str, WorkflowDefinition]:
    """OrderFlow with one edit, registered under its recorded name."""

    @workflow.defn(name="OrderFlow")
    class ChangedOrderFlow:
        def __init__(self) -> None:
            self.approved_by: str | None = None

        @workflow.signal
        def approve(self, who: str) -> None:
            self.approved_by = who

        @workflow.run
        async def run(self, name: str) -> dict[str, object]:
            await workflow.side_effect(lambda: "token")
            workflow.get_version("greet-twice", 1, 2)
            first = flows.flaky if change == "swap step 3" else flows.greet
            await workflow.activity(first, name, start_to_close_timeout=10)
            await workflow.activity(flows.flaky, name, start_to_close_timeout=10)
            await workflow.activity(flows.blocking_add, 2, 3, start_to_close_timeout=10)
            await workflow.sleep(0.3)
            await workflow.wait_condition(lambda: self.approved_by is not None)
            if change == "bug":
                raise KeyError("missing")
            if change == "extra activity":
                await workflow.activity(flows.greet, "again", start_to_close_timeout=10)
            if change == "extra side effect":
                await workflow.side_effect(lambda: evaluated.append("side effect"))
            if change == "fail instead":
                raise ApplicationError("refused", type="Refused")
            return {}

    return {"OrderFlow": get_definition(ChangedOrderFlow)}


@pytest.mark.parametrize("name", sorted(APPS))
def test_unchanged_code_replays_every_golden_history(name: str) -> None:
    """D1: the code that recorded a history replays it: OK, no divergence."""
    verdict = verify_run(recorded(name), workflows=APPS[name].workflows)
    assert verdict == RunVerdict(
        source=name,
        workflow_id=verdict.workflow_id,
        run_id=recorded(name).run.run_id,
        workflow_type=recorded(name).run.workflow_type,
        verdict=Verdict.OK,
    )


@pytest.mark.parametrize(
    ("change", "divergence"),
    [
        ("swap step 3", Divergence(3, "activity 'flaky'", "activity 'greet'")),
        ("extra activity", Divergence(7, "activity 'greet'", "nothing")),
        ("extra side effect", Divergence(7, "side effect", "nothing")),
        ("fail instead", Divergence(None, "fail_workflow (Refused: refused)", "WorkflowCompleted")),
    ],
)
def test_changed_code_reports_the_first_divergence(change: str, divergence: Divergence) -> None:
    """D4: an unguarded change is caught where it happens, with both sides named."""
    verdict = verify_run(recorded("order_flow"), workflows=order_flow(change))
    assert verdict.verdict is Verdict.DIVERGED
    assert verdict.divergence == divergence
    assert verdict.error is None
    assert evaluated == []  # a side effect history lacks is reported, never evaluated


def test_a_bug_in_the_code_is_an_error_not_a_divergence() -> None:
    verdict = verify_run(recorded("order_flow"), workflows=order_flow("bug"))
    assert verdict.verdict is Verdict.ERROR
    assert verdict.divergence is None
    assert verdict.error == "KeyError: 'missing'"


def test_unknown_workflow_type_is_an_error_naming_what_the_app_has() -> None:
    verdict = verify_run(recorded("order_flow"), workflows=demo.app.workflows)
    assert verdict.verdict is Verdict.ERROR
    assert verdict.error == (
        "workflow type 'OrderFlow' is not in the app (it has: OrderWorkflow, ShipmentWorkflow)"
    )


def test_a_task_awaiting_its_decisions_is_new_work_not_a_divergence() -> None:
    """History cut where a workflow task was claimed: its inputs are in, its decisions are not.

    Events 5-6 (greet started and completed) belong to the task that then scheduled flaky
    (event 7): replaying up to 6, the code's new step 4 is the task's work still to come.
    """
    verdict = verify_run(recorded("order_flow", up_to=6), workflows=flows.app.workflows)
    assert verdict.verdict is Verdict.OK
    after_decision = verify_run(
        recorded("order_flow", up_to=7), workflows=order_flow("extra activity")
    )
    assert after_decision.verdict is Verdict.OK  # history has not reached the change yet
    swapped = verify_run(recorded("order_flow", up_to=6), workflows=order_flow("swap step 3"))
    assert swapped.divergence == Divergence(3, "activity 'flaky'", "activity 'greet'")


def test_report_is_ok_only_when_every_run_passed_and_there_was_one() -> None:
    ok = verify_run(recorded("order_flow"), workflows=flows.app.workflows)
    diverged = verify_run(recorded("order_flow"), workflows=order_flow("swap step 3"))
    assert VerifyReport(runs=[ok]).ok
    assert not VerifyReport(runs=[]).ok
    report = VerifyReport(runs=[ok, diverged])
    assert not report.ok
    assert report.to_json() == {
        "ok": False,
        "summary": {"ok": 1, "diverged": 1, "error": 0},
        "runs": [
            {
                "source": "order_flow",
                "workflow_id": "golden-order",
                "run_id": ok.run_id,
                "workflow_type": "OrderFlow",
                "verdict": "ok",
                "divergence": None,
                "error": None,
            },
            {
                "source": "order_flow",
                "workflow_id": "golden-order",
                "run_id": ok.run_id,
                "workflow_type": "OrderFlow",
                "verdict": "diverged",
                "divergence": {
                    "step": 3,
                    "expected": "activity 'flaky'",
                    "recorded": "activity 'greet'",
                },
                "error": None,
            },
        ],
    }


def test_printed_report_names_the_step_and_both_sides(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    runs = [verify_run(recorded("order_flow"), workflows=order_flow(change))
            for change in ("swap step 3", "fail instead")]  # fmt: skip
    print_report(VerifyReport(runs=runs))
    out = capsys.readouterr().out
    assert (
        "step 3: the code now produces activity 'flaky', history recorded activity 'greet'" in out
    )
    assert "close: the code now produces fail_workflow (Refused: refused), history recorded" in out
    assert "2 run(s): 0 ok, 2 diverged, 0 error" in out
