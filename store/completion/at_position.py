"""The one-statement completions, for a run still where the completing worker last saw it.

`complete_at_position` writes a workflow task's completion; `complete_with_workflow_task` writes
an activity's result together with the workflow task a warm instance ran on it. Each is ONE
statement outside a transaction block (store invariant 3 holds because a statement is atomic),
and writes nothing when the run moved, the lease is stale or a command needs the transactional
path: NotAtPosition, and the caller takes the transactional path (transactional.py).

Why fuse a result with its workflow task: the worker that completes an activity often holds the
run warm (sticky execution). It can run the workflow code on with the result before writing
anything, and write the attempt's completion, the `ActivityCompleted` event and that workflow
task's commands at once, saving the follow-up task's own claim and completion. It is only done
when the result is all the task would observe: the run is still where the warm instance left
it, has no open workflow task and no waking event in its inbox.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from burrow.protocol import commands as cmd
from burrow.protocol.shapes import JsonObject
from burrow.store import claims, fragments, sql
from burrow.store.completion import plan as planning
from burrow.store.completion import statements
from burrow.store.completion.effects import (
    ActivityRow,
    CompletionOutcome,
    NotAtPosition,
    Plan,
    eager_candidates,
)
from burrow.store.models import ClaimedActivityTask, Lease, RunPosition, RunRow
from burrow.store.transactions import Txn


@dataclass(frozen=True, slots=True)
class WorkflowTaskRun:
    """A workflow task the completing worker ran on its warm instance, to write with the result.

    `run` is the run as that instance last left it (its `last_event_seq` and `last_step_seq`
    are the position the statement checks); `workflow_time` is the time the code saw as its
    current time, recorded in the result's event for replay (S12: the database stamps
    `recorded_at` itself, D3); `commands` are what the code did with the result.
    """

    workflow_task_id: str
    run: RunRow
    workflow_time: datetime
    commands: Sequence[cmd.Command]


async def complete_at_position(
    txn: Txn[sql.Conn],
    *,
    lease: Lease,
    position: RunPosition,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
) -> CompletionOutcome:
    """`transactional.complete_workflow_task` for a run still where its claim left it.

    With `eager`, the activities it schedules that the caller's claim would take are written
    leased to it (session attempts need admission: the transactional path claims them).

    Raises:
        NotAtPosition: nothing was written; `transactional.complete_workflow_task` says why.
    """
    run = position.run
    elapsed = timedelta(seconds=max(time.monotonic() - position.claimed_monotonic, 0.0))
    now = position.claimed_at + elapsed
    plan, leased = _planned(txn, lease.task_id, run, now, commands, eager)
    params = {
        **statements.finish_params(plan, lease.lease_owner, sticky_ttl, follow_up=False),
        **fragments.fence_params(lease),
        **statements.work_params(plan, leased, eager),
        **statements.parent_report_params(plan),
    }
    reporting = params["parent_event"] is not None
    stmt = (
        statements.COMPLETE_AT_POSITION_REPORTING if reporting else statements.COMPLETE_AT_POSITION
    )
    row = await _written(txn.conn, stmt, params)
    return _finished(plan, leased, eager, row, run.last_event_seq + len(plan.events))


async def complete_with_workflow_task(
    txn: Txn[sql.Conn],
    *,
    lease: Lease,
    result: JsonObject,
    task: WorkflowTaskRun,
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
    finished_at: datetime | None = None,
) -> CompletionOutcome:
    """Complete the attempt and the workflow task `task` in ONE statement, or write nothing.

    With `eager`, the activities the task schedules that the caller's claim would take are
    written leased to it; with `sticky_ttl`, the run stays bound to the caller (S4);
    `finished_at` is when the attempt returned, by its worker's clock.

    Raises:
        NotAtPosition: nothing was written (the run moved, is busy, or the lease is stale); the
            caller completes the attempt on its own (`activities.complete_activity`).
    """
    run = task.run
    plan, leased = _planned(
        txn, task.workflow_task_id, run, task.workflow_time, task.commands, eager
    )
    params = {
        **statements.finish_params(plan, lease.lease_owner, sticky_ttl, follow_up=False),
        **fragments.fence_params(lease),
        **statements.work_params(plan, leased, eager),
        **statements.parent_report_params(plan),
        "blob": result["blob"],
        "codec": result["codec"],
        "workflow_time": task.workflow_time,
        "finished_at": finished_at,
        "event_count": len(plan.events),
    }
    fused = (
        statements.COMPLETE_WITH_WORKFLOW_TASK_REPORTING
        if params["parent_event"] is not None
        else statements.COMPLETE_WITH_WORKFLOW_TASK
    )
    row = await _written(txn.conn, fused, params)
    last = run.last_event_seq + row.moved + 1 + len(plan.events)
    return _finished(plan, leased, eager, row, last)


def _planned(
    txn: Txn[sql.Conn],
    task_id: str,
    run: RunRow,
    now: datetime,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None,
) -> tuple[Plan, list[ActivityRow]]:
    """The effects of `commands` on `run` as one statement writes them, and its eager attempts.

    Raises:
        NotAtPosition: they need the transactional path, or a session attempt is among those
            the caller would take (W6: it needs admission first).
    """
    plan = Plan(run=run, task_id=task_id, now=now, txn=txn, last_step=run.last_step_seq)
    planning.plan_in_statement(plan, commands)
    leased = eager_candidates(plan, eager)
    if any(row["session_id"] is not None for row in leased):
        raise NotAtPosition
    return plan, leased


async def _written(conn: sql.Conn, stmt: sql.Statement, params: dict[str, object]) -> sql.Row:
    """Run a one-statement completion; its last SELECT says what it `fenced`.

    Raises:
        NotAtPosition: it wrote nothing (fenced nothing, or an event was already recorded).
    """
    try:
        row = await sql.one(conn, stmt, params)
    except asyncpg.UniqueViolationError as exc:
        raise NotAtPosition from exc
    if not row.fenced:
        raise NotAtPosition
    return row


def _finished(
    plan: Plan,
    leased: list[ActivityRow],
    eager: claims.EagerClaim | None,
    row: sql.Row,
    last_event_seq: int,
) -> CompletionOutcome:
    """The outcome of a one-statement completion that wrote (`row`: its last SELECT)."""
    if leased and eager is not None:  # only an eager claim leases
        plan.outcome.eager_activities = _leased_attempts(leased, row.eager, eager, plan.run)
        plan.txn.retract({attempt["task_id"] for attempt in leased})
    if row.parent_task is not None:  # a child's close woke its parent
        plan.txn.notify_workflow_task(ParentTask(**row.parent_task))
    return plan.settle(last_event_seq, row)


@dataclass(slots=True)
class ParentTask:
    """The parent's ready workflow task a child's close made (or found), to announce."""

    task_id: str
    namespace: str
    connection: str
    queue: str
    sticky_owner: str | None


def _leased_attempts(
    rows: list[ActivityRow], leases: list[JsonObject], eager: claims.EagerClaim, run: RunRow
) -> list[ClaimedActivityTask]:
    """The attempts the completion leased, as a claim of them returns them."""
    by_id = {str(lease["task_id"]): lease for lease in leases}
    return [_leased_attempt(row, by_id[row["task_id"]], eager, run) for row in rows]


def _leased_attempt(
    row: ActivityRow, written: JsonObject, eager: claims.EagerClaim, run: RunRow
) -> ClaimedActivityTask:
    return ClaimedActivityTask(
        lease=Lease(
            task_id=row["task_id"],
            run_id=row["run_id"],
            lease_token=str(written["lease_token"]),
            lease_owner=eager.worker_id,
            attempt=1,
            lease_expires_at=datetime.fromisoformat(str(written["lease_expires_at"])),
        ),
        run_id=row["run_id"],
        workflow_id=run.workflow_id,
        namespace=row["namespace"],
        queue=row["queue"],
        step_seq=row["step_seq"],
        activity_type=row["activity_type"],
        activity_execution_id=row["activity_execution_id"],
        activity_attempt_id=row["activity_attempt_id"],
        attempt_number=1,
        arguments=dict(row["arguments"]),
        heartbeat_details=None,
        heartbeat_seconds=row["heartbeat_seconds"],
        start_to_close_seconds=row["start_to_close_seconds"],
        scheduled_at=datetime.fromisoformat(str(written["scheduled_at"])),
        schedule_to_close_deadline=row["schedule_to_close_deadline"],
        connection=row["connection"],
    )
