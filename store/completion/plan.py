"""What a workflow task's commands write: parsed, numbered and planned, with no I/O.

`RULES` is the one table of commands. Each entry says what its command writes and whether it
folds into the one-statement completions (`statements.COMPLETE_AT_POSITION`,
`statements.COMPLETE_WITH_WORKFLOW_TASK`) or needs the transactional path, whose statements run
in order (`statements.FENCE_AND_LOCK_RUN` ... `statements.FINISH_COMPLETION`). A command that
folds is planned by a pure function of the plan; one that needs the transaction is planned by a
function that may ask `InTransaction` to read or write a row of its own.

Adding a command: its model in `burrow.protocol.commands`, one entry in `RULES` with its
planner below, and, only if it needs a new kind of row written in the transaction, a method on
`InTransaction` (implemented in `transactional.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Flag, auto
from typing import TypeVar

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.protocol.shapes import (
    ActivitySpec,
    ExceptionInfo,
    JsonObject,
    activity_connection,
    activity_execution_id,
)
from burrow.store import children, errors, ready
from burrow.store.completion import visibility_plans, wait_plans
from burrow.store.completion.effects import Closed, InTransaction, NotAtPosition, Plan
from burrow.store.history import NewEvent
from burrow.store.models import RunStatus

_SNAPSHOT_FIELDS = tuple(ActivitySpec.model_fields)  # what ActivityScheduled records

C = TypeVar("C", bound=cmd.Command)
Planner = Callable[[Plan, cmd.Command, int], None]
Applier = Callable[[Plan, cmd.Command, int, InTransaction], Awaitable[None]]


class Writes(Flag):
    """What a command writes: its entry declares it (test_completion_plan.py checks it)."""

    EVENT = auto()
    ACTIVITY_ROW = auto()
    TIMER_ROW = auto()
    CLOSES_RUN = auto()
    TIMER_CANCEL = auto()  # the pending timer row of an earlier task
    SIGNAL_CHECK = auto()  # reads the signal the skip names
    UPDATE_OUTCOME = auto()  # the accepted update's row
    NEW_RUN = auto()  # the successor run, its first workflow task, the message streams it carries
    CHILD_RUN = auto()  # a child's first run, its first workflow task and its child row
    CHILD_REQUEST = auto()  # a signal or cancel request written to a child's run
    ACTIVITY_STOP = auto()  # the activity row of an earlier task asked to stop
    STREAM_ITEMS = auto()  # a run output stream's items or its end
    VISIBILITY = auto()  # the run's memo or search attribute rows


@dataclass(frozen=True, slots=True)
class Rule:
    """One command's entry: what it writes and how it is planned.

    `plan` is set when the command folds into the one-statement completions, `apply` when it
    needs the transactional path.
    """

    command: type[object]
    writes: Writes
    plan: Planner | None = None
    apply: Applier | None = None

    def __post_init__(self) -> None:
        if (self.plan is None) == (self.apply is None):
            raise TypeError(f"rule of {self.command.__name__}: give exactly one of plan, apply")


def _wrong(kind: type[object], command: cmd.Command) -> TypeError:
    return TypeError(f"rule of {kind.__name__} given {type(command).__name__}")


def folds(kind: type[C], writes: Writes, planner: Callable[[Plan, C, int], None]) -> Rule:
    """The entry of a command written by a pure planner: it folds into one statement."""

    def plan(p: Plan, command: cmd.Command, step: int) -> None:
        if not isinstance(command, kind):
            raise _wrong(kind, command)
        planner(p, command, step)

    return Rule(kind, writes, plan=plan)


def in_transaction(
    kind: type[C],
    writes: Writes,
    applier: Callable[[Plan, C, int, InTransaction], Awaitable[None]],
) -> Rule:
    """The entry of a command that needs statements of its own: the transactional path."""

    async def apply(p: Plan, command: cmd.Command, step: int, db: InTransaction) -> None:
        if not isinstance(command, kind):
            raise _wrong(kind, command)
        await applier(p, command, step, db)

    return Rule(kind, writes, apply=apply)


# -- parsing and numbering ------------------------------------------------------------------


def parse_commands(task_id: str, commands: Sequence[cmd.Command | JsonObject]) -> list[cmd.Command]:
    """Typed commands, parsing any given in wire form; InvalidCommands names the bad one."""
    parsed: list[cmd.Command] = []
    for index, command in enumerate(commands):
        if isinstance(command, dict):
            try:
                command = cmd.parse_command(command)
            except cmd.InvalidCommand as exc:
                reason = f"command {index}: {exc}"
                raise errors.InvalidCommands(task_id=task_id, reason=reason) from exc
        parsed.append(command)
    return parsed


def number_steps(task_id: str, last_step: int, commands: Sequence[cmd.Command]) -> list[int]:
    """Step numbers for the batch, continuing the run's last step (PROTOCOL.md 8.3).

    A command that carries its step number must carry exactly that one; a terminal command must
    come last. Anything else refuses the whole batch before anything is written.
    """
    steps: list[int] = []
    expected = last_step
    for index, command in enumerate(commands):
        if isinstance(command, cmd.STEP_COMMANDS):
            expected += 1
            if command.seq is not None and command.seq != expected:
                got = command.seq
                reason = f"command {index} ({command.type}) has step {got}, expected {expected}"
                raise errors.InvalidCommands(task_id=task_id, reason=reason)
        elif isinstance(command, cmd.TERMINAL_COMMANDS) and index != len(commands) - 1:
            reason = f"terminal command {command.type} must be last"
            raise errors.InvalidCommands(task_id=task_id, reason=reason)
        steps.append(expected)
    return steps


def foldable(commands: Sequence[cmd.Command]) -> bool:
    """Whether the one-statement completions can write these commands."""
    return all(rule_of(command).plan is not None for command in commands)


def plan_in_statement(plan: Plan, commands: Sequence[cmd.Command]) -> None:
    """Plan `commands` for a one-statement completion.

    Raises:
        NotAtPosition: a command needs the transactional path, or the task closes its run and
            starts work (cancelled with the run: the transactional path writes it in order).
    """
    steps = number_steps(plan.task_id, plan.run.last_step_seq, commands)
    for step, command in zip(steps, commands, strict=True):
        planner = rule_of(command).plan
        if planner is None:
            raise NotAtPosition
        planner(plan, command, step)
    if plan.closed is not None and (plan.activity_rows or plan.timer_rows):
        raise NotAtPosition


async def plan_in_transaction(
    plan: Plan, commands: Sequence[cmd.Command], db: InTransaction
) -> None:
    """Plan `commands` for the transactional path, running the statements some need (`db`)."""
    steps = number_steps(plan.task_id, plan.run.last_step_seq, commands)
    for step, command in zip(steps, commands, strict=True):
        rule = rule_of(command)
        if rule.apply is not None:
            await rule.apply(plan, command, step, db)
        elif rule.plan is not None:
            rule.plan(plan, command, step)


# -- planners: one per entry of RULES ---------------------------------------------------------


def _schedule_activity(plan: Plan, command: cmd.ScheduleActivity, step: int) -> None:
    plan.last_step = step
    run = plan.run
    execution_id = f"{run.run_id}:{step}"
    task_id = str(uuid.uuid4())
    s2close = command.schedule_to_close_timeout
    session = command.worker_session  # W4: admission reads the snapshot at claim time
    connection = activity_connection(command, run.connection)  # M7: call > session > run
    plan.activity_rows.append(
        {
            "task_id": task_id,
            "run_id": run.run_id,
            "step_seq": step,
            "activity_type": command.activity_type,
            "activity_execution_id": execution_id,
            "activity_attempt_id": str(uuid.uuid4()),
            "namespace": run.namespace,
            "connection": connection,
            "queue": command.queue,
            "build_id": run.build_id,  # S8, M7: the run's compatibility family (PROTOCOL.md 16)
            "arguments": command.arguments.copy(),
            "retry_policy": command.retry_policy.to_json(),
            "schedule_to_start_seconds": command.schedule_to_start_timeout,
            "start_to_close_seconds": command.start_to_close_timeout,
            "schedule_to_close_seconds": s2close,
            "heartbeat_seconds": command.heartbeat_timeout,
            "schedule_to_close_deadline": (
                None if s2close is None else plan.now + timedelta(seconds=s2close)
            ),
            "session_id": None if session is None else session.session_id,
            "worker_session": None if session is None else session.to_json(),
        }
    )
    plan.txn.notify(run.namespace, connection, command.queue, "activity", task_id)
    scheduled = events.ActivityScheduled(
        activity_execution_id=execution_id,
        activity_type=command.activity_type,
        sequence=step,
        workflow_task_id=plan.task_id,
        # The command was validated when it was built or parsed: copy its options as they are.
        activity=ActivitySpec.model_construct(
            **{name: getattr(command, name) for name in _SNAPSHOT_FIELDS}
        ),
    )
    plan.record(scheduled, f"step:{step}:scheduled")


def _record_local_activity(plan: Plan, command: cmd.RecordLocalActivity, step: int) -> None:
    """A3: the execution the workflow task ran in-process becomes ordinary activity history.

    No activity task row: nothing is left to run, and the events belong to this task, so they
    wake no workflow task and replay finds the result where the code awaited it.
    """
    plan.last_step = step
    recorded = events.local_activity_events(
        command, run_id=plan.run.run_id, step=step, workflow_task_id=plan.task_id, now=plan.now
    )
    plan.events.extend(NewEvent(event, key) for event, key in recorded)


def _start_timer(plan: Plan, command: cmd.StartTimer, step: int) -> None:
    plan.last_step = step
    fire_at = wait_plans.timer_row(plan, step, command.delay_seconds)
    scheduled = events.TimerScheduled(
        timer_id=f"{plan.run.run_id}:{step}",
        sequence=step,
        delay_seconds=command.delay_seconds,
        fire_at=fire_at,
    )
    plan.record(scheduled, f"step:{step}:timer")


async def _cancel_timer(plan: Plan, command: cmd.CancelTimer, step: int, db: InTransaction) -> None:
    seq = command.sequence
    started_now = [row for row in plan.timer_rows if row["step_seq"] == seq]
    if started_now:
        # Started and cancelled in the same task: the timer row is never written.
        plan.timer_rows.remove(started_now[0])
        delay: float | None = started_now[0]["delay_seconds"]
    else:
        delay = await db.cancel_timer(plan, seq)
        if delay is None:
            return  # Already fired: the TimerFired event reaches the workflow, which ignores it.
    cancelled = events.TimerCancelled(
        timer_id=f"{plan.run.run_id}:{seq}",
        sequence=seq,
        delay_seconds=delay,
        cancelled_at=plan.now,
    )
    plan.record(cancelled, f"step:{seq}:timer-cancelled")


def _record_side_effect(plan: Plan, command: cmd.RecordSideEffect, step: int) -> None:
    plan.last_step = step
    effect = events.SideEffectRecorded(
        sequence=step, result=command.result, payload_codec=command.codec
    )
    plan.record(effect, f"step:{step}:side-effect")


async def _record_stream_side_effect(
    plan: Plan, command: cmd.RecordSideEffect, step: int, db: InTransaction
) -> None:
    _record_side_effect(plan, command, step)
    if command.workflow_stream is not None:
        await db.workflow_stream(plan, command.workflow_stream)


def _record_version_marker(plan: Plan, command: cmd.RecordVersionMarker, step: int) -> None:
    plan.last_step = step
    marker = events.VersionMarkerRecorded(
        sequence=step,
        change_id=command.change_id,
        version=command.version,
        min_supported=command.min_supported,
        max_supported=command.max_supported,
    )
    plan.record(marker, f"step:{step}:version")


async def _finish_update(
    plan: Plan, command: cmd.CompleteUpdate | cmd.FailUpdate, step: int, db: InTransaction
) -> None:
    run = plan.run
    finished = await db.finish_update(plan, command)
    ids = {"update_id": command.update_id, "workflow_run_id": run.run_id}
    if isinstance(command, cmd.FailUpdate):
        event = events.UpdateCompleted(
            **ids,
            message=command.message,
            exception_type=command.exception_type,
            non_retryable=command.non_retryable,
            exception=command.exception,
        )
    else:
        event = events.UpdateCompleted(
            **ids, result=command.result["blob"], payload_codec=command.result["codec"]
        )
        if plan.update_task:
            # Where the handler ran: replay runs it at this point again (PROTOCOL.md 5.1).
            applied = events.UpdateApplied(
                update_id=command.update_id,
                update_name=finished.update_name,
                workflow_instance_id=run.workflow_id,
                workflow_run_id=run.run_id,
                arguments=finished.arguments,
            )
            plan.record(applied, f"update:{command.update_id}:applied")
    plan.record(event, f"update:{command.update_id}:completed")
    plan.txn.notify_run(
        run.namespace, run.run_id, ready.Change.UPDATE, notify_queue=run.notify_queue
    )


async def _skip_signal(plan: Plan, command: cmd.SkipSignal, step: int, db: InTransaction) -> None:
    key = f"signal:{command.signal_id}:skipped"
    await db.check_signal(plan, command, key)
    skipped = events.SignalSkipped(
        signal_id=command.signal_id, signal_name=command.signal_name, reason=command.reason
    )
    plan.record(skipped, key)


def _close(plan: Plan, closed: Closed) -> None:
    plan.closed = closed
    plan.outcome.closed_status = closed.status
    outcome = ready.RunOutcome(
        status=closed.status.value,
        result=None if closed.result is None else dict(closed.result),
        failure=closed.failure,
        continued_to_run_id=closed.continued_to_run_id,
    )
    run = plan.run
    plan.txn.notify_run(
        run.namespace, run.run_id, ready.Change.CLOSED, outcome, notify_queue=run.notify_queue
    )


def _complete_workflow(plan: Plan, command: cmd.CompleteWorkflow, step: int) -> None:
    completed = events.WorkflowCompleted(
        output=command.result["blob"], payload_codec=command.result["codec"]
    )
    plan.record(completed, "workflow-closed")
    _close(plan, Closed(RunStatus.COMPLETED, result=command.result.copy()))


def _fail_workflow(plan: Plan, command: cmd.FailWorkflow, step: int) -> None:
    failure = command.failure()
    failed = events.WorkflowFailed(
        exception_type=failure.exception_type,
        message=failure.message,
        non_retryable=failure.non_retryable,
        exception=command.exception or ExceptionInfo(),
    )
    plan.record(failed, "workflow-closed")
    _close(plan, Closed(RunStatus.FAILED, failure=failure.to_json()))


def _cancel_workflow(plan: Plan, command: cmd.CancelWorkflow, step: int) -> None:
    run = plan.run
    message = command.message or "workflow cancelled"
    cancelled = events.WorkflowCancelled(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, message=message
    )
    plan.record(cancelled, "workflow-closed")
    failure: JsonObject = {"message": message, "exception_type": "WorkflowCancelled"}
    _close(plan, Closed(RunStatus.CANCELLED, failure=failure))


async def _continue_as_new(
    plan: Plan, command: cmd.ContinueAsNew, step: int, db: InTransaction
) -> None:
    new_run_id = await db.continue_run(plan, command)
    continued = events.WorkflowContinuedAsNew(continued_to_run_id=new_run_id)
    plan.record(continued, "workflow-closed")
    _close(plan, Closed(RunStatus.CONTINUED_AS_NEW, continued_to_run_id=new_run_id))
    plan.outcome.continued_run_id = new_run_id
    plan.outcome.workflow_task_created = True


async def _start_child(
    plan: Plan, command: cmd.StartChildWorkflow, step: int, db: InTransaction
) -> None:
    """The child's start is recorded now and written with the task's other starts.

    A start its id refuses (a running run) is rewritten then (`refuse_child`).
    """
    plan.last_step = step
    started = await db.start_child(plan, command, step)
    plan.record(_scheduled(started, plan), scheduled_key(step))
    child_started = events.ChildRunStarted(
        sequence=step,
        child_workflow_instance_id=started.workflow_id,
        child_workflow_run_id=started.run_id,
        child_workflow_type=command.workflow_type,
        parent_close_policy=command.parent_close_policy,
        cancellation_policy=command.cancellation_policy,
    )
    plan.record(child_started, started_key(step))


def scheduled_key(step: int) -> str:
    """The once-only key of a child step's ChildWorkflowScheduled."""
    return f"step:{step}:child"


def started_key(step: int) -> str:
    """The once-only key of a child step's ChildRunStarted."""
    return f"step:{step}:child-started"


def refuse_child(plan: Plan, refused: children.StartedChild) -> events.ChildRunFailed:
    """Rewrite a planned child start its id refused: no ChildRunStarted, no run id.

    Returns the ChildRunFailed the parent's next workflow task delivers (through its inbox).
    """
    step = refused.step
    kept = []
    for new in plan.events:
        if new.idempotency_key == started_key(step):
            continue
        if new.idempotency_key == scheduled_key(step):
            update = {"child_workflow_run_id": ""}
            new = NewEvent(new.event.model_copy(update=update), new.idempotency_key)
        kept.append(new)
    plan.events[:] = kept
    return children.start_refused_event(refused)


def _scheduled(started: children.StartedChild, plan: Plan) -> events.ChildWorkflowScheduled:
    command = started.command
    return events.ChildWorkflowScheduled(
        sequence=started.step,
        child_workflow_instance_id=started.workflow_id,
        child_workflow_run_id=started.run_id,
        child_workflow_type=command.workflow_type,
        parent_close_policy=command.parent_close_policy,
        cancellation_policy=command.cancellation_policy,
        retry_policy=command.retry_policy,
        timeout_policy=command.timeout_policy(),
        workflow_task_id=plan.task_id,
    )


async def _signal_child(
    plan: Plan, command: cmd.SignalChildWorkflow, step: int, db: InTransaction
) -> None:
    plan.last_step = step
    signal_id = f"{plan.run.run_id}:{step}"
    workflow_id, delivered = await db.signal_child(plan, command, signal_id)
    signalled = events.ChildSignalled(
        sequence=step,
        child_sequence=command.child_sequence,
        child_workflow_instance_id=workflow_id,
        signal_name=command.signal_name,
        signal_id=signal_id,
        delivered=delivered,
    )
    plan.record(signalled, f"step:{step}:child-signal")


async def _cancel_child(
    plan: Plan, command: cmd.CancelChildWorkflow, step: int, db: InTransaction
) -> None:
    workflow_id, delivered = await db.cancel_child(plan, command.sequence)
    requested = events.ChildCancelRequested(
        sequence=command.sequence, child_workflow_instance_id=workflow_id, delivered=delivered
    )
    plan.record(requested, f"step:{command.sequence}:child-cancel")


async def _cancel_activity(
    plan: Plan, command: cmd.CancelActivity, step: int, db: InTransaction
) -> None:
    """Ask the activity of `command.sequence` to stop (its policy: try_cancel or wait).

    One scheduled by this very task has no row yet: it is never written, and its
    `ActivityCancelled` reaches the code with the next task.
    """
    seq = command.sequence
    row = next((r for r in plan.activity_rows if r["step_seq"] == seq), None)
    if row is not None:
        plan.activity_rows.remove(row)
        cancelled = events.ActivityCancelled(
            activity_execution_id=row["activity_execution_id"],
            activity_attempt_id=row["activity_attempt_id"],
            activity_type=row["activity_type"],
            sequence=seq,
            attempt_number=1,
            cancelled_at=plan.now,
            message="cancelled before it started",
        )
        await db.queue_event(plan, cancelled, f"activity:{row['activity_execution_id']}:closed")
    else:
        await db.stop_activity(plan, seq)
    requested = events.ActivityCancelRequested(
        sequence=seq, activity_execution_id=activity_execution_id(plan.run.run_id, seq)
    )
    plan.record(requested, f"step:{seq}:activity-cancel")


RULES: Mapping[type[object], Rule] = {
    rule.command: rule
    for rule in (
        folds(cmd.ScheduleActivity, Writes.EVENT | Writes.ACTIVITY_ROW, _schedule_activity),
        folds(cmd.RecordLocalActivity, Writes.EVENT, _record_local_activity),
        folds(cmd.StartTimer, Writes.EVENT | Writes.TIMER_ROW, _start_timer),
        in_transaction(cmd.CancelTimer, Writes.EVENT | Writes.TIMER_CANCEL, _cancel_timer),
        in_transaction(
            cmd.OpenConditionWait,
            Writes.EVENT | Writes.TIMER_ROW | Writes.TIMER_CANCEL,
            wait_plans.open_condition_wait,
        ),
        in_transaction(
            cmd.SatisfyConditionWait,
            Writes.EVENT | Writes.TIMER_CANCEL,
            wait_plans.satisfy_condition_wait,
        ),
        folds(cmd.OpenSelection, Writes.EVENT, wait_plans.open_selection),
        folds(cmd.CancelSelectionOperation, Writes.EVENT, wait_plans.cancel_selection_operation),
        folds(cmd.RecordSideEffect, Writes.EVENT, _record_side_effect),
        folds(cmd.RecordVersionMarker, Writes.EVENT, _record_version_marker),
        in_transaction(
            cmd.UpsertMemo, Writes.EVENT | Writes.VISIBILITY, visibility_plans.upsert_memo
        ),
        in_transaction(
            cmd.UpsertSearchAttributes,
            Writes.EVENT | Writes.VISIBILITY,
            visibility_plans.upsert_search_attributes,
        ),
        in_transaction(cmd.CompleteUpdate, Writes.EVENT | Writes.UPDATE_OUTCOME, _finish_update),
        in_transaction(cmd.FailUpdate, Writes.EVENT | Writes.UPDATE_OUTCOME, _finish_update),
        in_transaction(cmd.SkipSignal, Writes.EVENT | Writes.SIGNAL_CHECK, _skip_signal),
        in_transaction(cmd.StartChildWorkflow, Writes.EVENT | Writes.CHILD_RUN, _start_child),
        in_transaction(cmd.SignalChildWorkflow, Writes.EVENT | Writes.CHILD_REQUEST, _signal_child),
        in_transaction(cmd.CancelChildWorkflow, Writes.EVENT | Writes.CHILD_REQUEST, _cancel_child),
        in_transaction(cmd.CancelActivity, Writes.EVENT | Writes.ACTIVITY_STOP, _cancel_activity),
        folds(cmd.CompleteWorkflow, Writes.EVENT | Writes.CLOSES_RUN, _complete_workflow),
        folds(cmd.FailWorkflow, Writes.EVENT | Writes.CLOSES_RUN, _fail_workflow),
        folds(cmd.CancelWorkflow, Writes.EVENT | Writes.CLOSES_RUN, _cancel_workflow),
        in_transaction(
            cmd.ContinueAsNew, Writes.EVENT | Writes.CLOSES_RUN | Writes.NEW_RUN, _continue_as_new
        ),
    )
}
"""Every command: what it writes, and whether it folds into one statement (`folds`) or needs
the transactional path (`in_transaction`)."""

STREAM_SIDE_EFFECT = in_transaction(
    cmd.RecordSideEffect, Writes.EVENT | Writes.STREAM_ITEMS, _record_stream_side_effect
)
"""A `record_side_effect` with a `workflow_stream` directive: its stream rows need the
transaction (the run's lock orders the stream's offsets)."""


def rule_of(command: cmd.Command) -> Rule:
    """The command's entry: `RULES` by type, but `STREAM_SIDE_EFFECT` for a stream side effect."""
    if isinstance(command, cmd.RecordSideEffect) and command.workflow_stream is not None:
        return STREAM_SIDE_EFFECT
    return RULES[type(command)]
