"""The command table of store/completion/plan.py: every command has one entry, which says truly
what its planner writes and whether it folds into the one-statement completions."""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from typing import Any

import pytest

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol.events import Event
from burrow.store.children import StartedChild
from burrow.store.completion import plan as planning
from burrow.store.completion.effects import NotAtPosition, Plan
from burrow.store.models import RunRow, RunStatus
from burrow.store.ready import Change, ReadyTask, RunChanged
from burrow.store.references import FinishedUpdate
from burrow.store.transactions import Txn
from tests.support.store import schedule

W = planning.Writes
NOW = datetime(2026, 1, 1, tzinfo=UTC)
ONE = dict(codec.encode(1))

WIRE: dict[type[cmd.Command], dict[str, Any]] = {
    cmd.ScheduleActivity: schedule(1),
    cmd.RecordLocalActivity: {
        "type": "record_local_activity",
        "activity_type": "nap",
        "arguments": ONE,
        "outcome": "completed",
        "result": ONE,
        "attempts": [
            {"attempt_id": "a", "attempt_number": 1, "outcome": "completed", "duration_ms": 1}
        ],
    },
    cmd.StartTimer: {"type": "start_timer", "delay_seconds": 30.0},
    cmd.CancelTimer: {"type": "cancel_timer", "sequence": 1},
    cmd.RecordSideEffect: {"type": "record_side_effect", "result": ONE},
    cmd.UpsertMemo: {"type": "upsert_memo", "entries": dict(codec.encode({"stage": "paid"}))},
    cmd.UpsertSearchAttributes: {
        "type": "upsert_search_attributes",
        "attributes": {"CustomerId": "c-17"},
    },
    cmd.RecordVersionMarker: {
        "type": "record_version_marker",
        "change_id": "c",
        "version": 1,
        "min_supported": 0,
        "max_supported": 1,
    },
    cmd.CompleteUpdate: {"type": "complete_update", "update_id": "u", "result": ONE},
    cmd.FailUpdate: {"type": "fail_update", "update_id": "u", "message": "no"},
    cmd.SkipSignal: {"type": "skip_signal", "signal_id": "s", "signal_name": "n", "reason": "r"},
    cmd.CompleteWorkflow: {"type": "complete_workflow", "result": ONE},
    cmd.FailWorkflow: {"type": "fail_workflow", "message": "boom", "exception_type": "E"},
    cmd.CancelWorkflow: {"type": "cancel_workflow", "message": "stop"},
    cmd.ContinueAsNew: {
        "type": "continue_as_new",
        "arguments": ONE,
        "workflow_type": "Next",
        "queue": "q",
    },
    cmd.StartChildWorkflow: {
        "type": "start_child_workflow",
        "workflow_type": "Child",
        "queue": "q",
        "arguments": ONE,
        "parent_close_policy": "terminate",
    },
    cmd.SignalChildWorkflow: {
        "type": "signal_child_workflow",
        "child_sequence": 1,
        "signal_name": "approve",
        "arguments": ONE,
    },
    cmd.CancelChildWorkflow: {"type": "cancel_child_workflow", "sequence": 1},
    cmd.CancelActivity: {"type": "cancel_activity", "sequence": 1},
    cmd.OpenConditionWait: {"type": "open_condition_wait", "timeout_seconds": 30, "supersedes": 1},
    cmd.OpenSelection: {
        "type": "open_selection",
        "selection_group_id": "select-calls:1:2",
        "group_kind": "mixed",
        "base_sequence": 1,
        "size": 2,
        "members": [{"key": "a", "index": 0, "base_sequence": 1, "size": 1, "kind": "timer"}],
    },
    cmd.CancelSelectionOperation: {
        "type": "cancel_selection_operation",
        "selection_group_id": "select-calls:1:2",
        "member_key": "a",
        "member_index": 0,
        "member_base_sequence": 1,
        "member_size": 1,
        "operation_kind": "timer",
        "operation_identity": "run:1",
    },
    cmd.SatisfyConditionWait: {
        "type": "satisfy_condition_wait",
        "sequence": 1,
        "timeout_seconds": 30,
    },
}


def _run() -> RunRow:
    return RunRow(
        run_id="00000000-0000-0000-0000-000000000001",
        namespace="default",
        workflow_id="wf",
        workflow_type="Flow",
        task_queue="q",
        connection="c",
        build_id=None,
        status=RunStatus.RUNNING,
        input=ONE,
        result=None,
        failure=None,
        last_event_seq=3,
        cancel_requested=False,
        continued_to_run_id=None,
        created_at=NOW,
        closed_at=None,
        last_step_seq=0,
        continued_from_run_id=None,
    )


def _plan() -> Plan:
    return Plan(run=_run(), task_id="t", now=NOW, txn=Txn(object()), update_task=True)


class _Recorded:
    """An `InTransaction` that records which of its statements a planner ran."""

    def __init__(self) -> None:
        self.ran: set[planning.Writes] = set()

    async def cancel_timer(self, plan: Plan, seq: int) -> float | None:
        self.ran.add(W.TIMER_CANCEL)
        return 30.0

    async def check_signal(self, plan: Plan, command: cmd.SkipSignal, skipped_key: str) -> None:
        self.ran.add(W.SIGNAL_CHECK)

    async def finish_update(
        self, plan: Plan, command: cmd.CompleteUpdate | cmd.FailUpdate
    ) -> FinishedUpdate:
        self.ran.add(W.UPDATE_OUTCOME)
        return FinishedUpdate(update_name="set", arguments=ONE)

    async def continue_run(self, plan: Plan, command: cmd.ContinueAsNew) -> str:
        self.ran.add(W.NEW_RUN)
        return "00000000-0000-0000-0000-000000000002"

    async def start_child(
        self, plan: Plan, command: cmd.StartChildWorkflow, step: int
    ) -> StartedChild:
        self.ran.add(W.CHILD_RUN)
        return StartedChild("child", "00000000-0000-0000-0000-000000000003", command, step)

    async def signal_child(
        self, plan: Plan, command: cmd.SignalChildWorkflow, signal_id: str
    ) -> tuple[str, bool]:
        self.ran.add(W.CHILD_REQUEST)
        return "child", True

    async def cancel_child(self, plan: Plan, step: int) -> tuple[str, bool]:
        self.ran.add(W.CHILD_REQUEST)
        return "child", True

    async def queue_event(self, plan: Plan, event: Event, key: str) -> None:
        self.ran.add(W.EVENT)

    async def stop_activity(self, plan: Plan, step: int) -> bool:
        self.ran.add(W.ACTIVITY_STOP)
        return True

    async def move_condition_timer(self, plan: Plan, old_step: int, new_step: int) -> bool:
        self.ran.add(W.TIMER_CANCEL)
        return False  # no timer left to move: the re-open starts its own

    async def satisfy_condition_wait(self, plan: Plan, step: int) -> None:
        self.ran.add(W.TIMER_CANCEL)

    async def upsert_memo(self, plan: Plan, command: cmd.UpsertMemo) -> codec.Payload:
        self.ran.add(W.VISIBILITY)
        return command.entries

    async def upsert_search_attributes(
        self, plan: Plan, command: cmd.UpsertSearchAttributes
    ) -> tuple[dict[str, Any], dict[str, str]]:
        self.ran.add(W.VISIBILITY)
        return {"CustomerId": "c-17"}, {"CustomerId": "keyword"}


def _observed(plan: Plan, db: _Recorded) -> planning.Writes:
    seen = W(0)
    for flag, done in [
        (W.EVENT, plan.events),
        (W.ACTIVITY_ROW, plan.activity_rows),
        (W.TIMER_ROW, plan.timer_rows),
        (W.CLOSES_RUN, plan.closed),
    ]:
        if done:
            seen |= flag
    for flag in db.ran:
        seen |= flag
    return seen


def test_every_command_has_exactly_one_entry() -> None:
    assert set(planning.RULES) == set(typing.get_args(cmd.Command))
    assert set(WIRE) == set(planning.RULES)
    for rule in planning.RULES.values():
        assert (rule.plan is None) != (rule.apply is None), rule.command


@pytest.mark.parametrize("kind", list(WIRE), ids=lambda kind: kind.__name__)
async def test_each_entry_declares_what_its_planner_writes(kind: type[cmd.Command]) -> None:
    command = cmd.parse_command(WIRE[kind])
    plan, db = _plan(), _Recorded()
    await planning.plan_in_transaction(plan, [command], db)
    assert _observed(plan, db) == planning.RULES[kind].writes


@pytest.mark.parametrize("kind", list(WIRE), ids=lambda kind: kind.__name__)
def test_a_command_folds_exactly_when_its_entry_needs_no_statement_of_its_own(
    kind: type[cmd.Command],
) -> None:
    command = cmd.parse_command(WIRE[kind])
    folds = planning.RULES[kind].plan is not None
    assert planning.foldable([command]) == folds
    plan = _plan()
    if folds:
        planning.plan_in_statement(plan, [command])
    else:
        with pytest.raises(NotAtPosition):
            planning.plan_in_statement(plan, [command])


def test_planning_records_its_notices_on_the_transaction() -> None:
    plan = _plan()
    commands = [cmd.parse_command(WIRE[kind]) for kind in (cmd.ScheduleActivity, cmd.FailWorkflow)]
    with pytest.raises(NotAtPosition):  # work started by a closing task needs the transaction
        planning.plan_in_statement(plan, commands)
    kinds = [type(n) for n in plan.txn.notices]
    assert kinds == [ReadyTask, RunChanged]
    closed = plan.txn.notices[1]
    assert isinstance(closed, RunChanged) and closed.change == Change.CLOSED
