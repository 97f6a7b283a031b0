"""Planners of the steps that wait without a worker: timers' rows, condition waits, selections.

Entries of `plan.RULES` (see its docstring); pure or asking `InTransaction`, as there.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.store import condition_waits
from burrow.store.completion.effects import InTransaction, Plan


def timer_row(plan: Plan, step: int, delay_seconds: float) -> datetime:
    """Queue the timer row of `step`, due after `delay_seconds`: its fire time."""
    fire_at = plan.now + timedelta(seconds=delay_seconds)
    plan.timer_rows.append(
        {
            "run_id": plan.run.run_id,
            "step_seq": step,
            "namespace": plan.run.namespace,
            "fire_at": fire_at,
            "delay_seconds": delay_seconds,
        }
    )
    plan.outcome.timers_started.append(fire_at)
    return fire_at


async def open_condition_wait(
    plan: Plan, command: cmd.OpenConditionWait, step: int, db: InTransaction
) -> None:
    """The wait's step, and its timeout as a timer of that step (a re-open keeps its timer)."""
    plan.last_step = step
    moved = command.supersedes is not None and await db.move_condition_timer(
        plan, command.supersedes, step
    )
    if command.timeout_seconds is not None and not moved:
        timer_row(plan, step, command.timeout_seconds)
    opened = events.ConditionWaitOpened(
        condition_wait_id=condition_waits.wait_id(plan.run.run_id, step),
        sequence=step,
        condition_key=command.condition_key,
        condition_definition_fingerprint=command.condition_definition_fingerprint,
        timeout_seconds=command.timeout_seconds,
    )
    plan.record(opened, condition_waits.opened_key(step))


async def satisfy_condition_wait(
    plan: Plan, command: cmd.SatisfyConditionWait, step: int, db: InTransaction
) -> None:
    """The wait's satisfaction, its timeout's timer cancelled (or its unseen firing dropped)."""
    seq = command.sequence
    timer_id = None
    if command.timeout_seconds is not None:
        await db.satisfy_condition_wait(plan, seq)
        timer_id = condition_waits.wait_id(plan.run.run_id, seq)
    satisfied = events.ConditionWaitSatisfied(
        condition_wait_id=condition_waits.wait_id(plan.run.run_id, seq),
        sequence=seq,
        condition_key=command.condition_key,
        condition_definition_fingerprint=command.condition_definition_fingerprint,
        timeout_seconds=command.timeout_seconds,
        timer_id=timer_id,
        workflow_signal_id=command.workflow_signal_id,
        signal_name=command.signal_name,
    )
    plan.record(satisfied, condition_waits.satisfied_key(seq))


def open_selection(plan: Plan, command: cmd.OpenSelection, step: int) -> None:
    """Record a select group, so its members' paths can be shown again."""
    opened = events.SelectionGroupOpened(
        selection_group_id=command.selection_group_id,
        parallel_group_kind=command.group_kind,
        base_sequence=command.base_sequence,
        size=command.size,
        members=command.members,
    )
    plan.record(opened, f"selection:{command.selection_group_id}:opened")


def cancel_selection_operation(
    plan: Plan, command: cmd.CancelSelectionOperation, step: int
) -> None:
    """Record the cancel of a select member that has not closed."""
    cancelled = events.SelectionOperationCancelled(
        **command.model_dump(exclude={"type"}),
    )
    key = f"selection:{command.selection_group_id}:{command.member_base_sequence}:cancelled"
    plan.record(cancelled, key)
