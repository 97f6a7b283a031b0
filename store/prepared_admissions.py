"""Prepared local activities: admission and observation (`burrow.store.prepared_locals`).

`checkpoint` and `checkpoint_group` record what opens before a local call; `prepare` starts an
attempt; `control` and `heartbeat` watch it while it runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.codec import Payload
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.activity_events import LocalAdmission, LocalCleanup, LocalPreparation
from burrow.protocol.shapes import LocalActivitySpec, activity_execution_id
from burrow.store import cooperative, tasks
from burrow.store.completion import plan as planning
from burrow.store.completion import transactional
from burrow.store.completion.effects import Plan
from burrow.store.errors import InvariantBroken
from burrow.store.history import NewEvent
from burrow.store.prepared_locals import (
    Attempt,
    AttemptState,
    Claim,
    Execution,
    Held,
    PreparedRefused,
    attempt_of,
    attempt_state,
    event_id,
    execution_of,
    hold,
    require_own,
    require_same,
    write,
)
from burrow.store.transactions import Txn

CHECKPOINT_COMMANDS = (cmd.RecordSideEffect, cmd.RecordVersionMarker)
"""The authored steps a checkpoint records before a prepared local call (events only)."""

# -- checkpoints ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """What a checkpoint recorded (or, `duplicate`, had recorded): its range and its locals."""

    run_id: str
    start_sequence: int
    next_sequence: int
    duplicate: bool
    local_activities: list[tuple[int, str]]
    """(step, activity execution id) of each local member, in step order."""


def _refuse_range(held: Held, start: int, count: int) -> PreparedRefused:
    return PreparedRefused(
        "prepared_checkpoint_conflict",
        f"steps {start}..{start + count - 1} are not the run's next steps (its last step is"
        f" {held.last_step}) nor what the history holds there",
        start_sequence=start,
        last_sequence=held.last_step,
    )


async def _checkpoint(
    txn: Txn[AsyncConnection], held: Held, start: int, planned: list[NewEvent]
) -> bool:
    """Record `planned` (one event per step from `start`), or find it recorded: duplicate."""
    count = len(planned)
    if start == held.last_step + 1:
        held.appended.extend(planned)
        held.last_step = start + count - 1
        await write(txn, held)
        return False
    steps = range(start, start + count)
    recorded = [r.event for r in held.history if getattr(r.event, "sequence", None) in steps]
    if recorded != [p.event for p in planned]:
        raise _refuse_range(held, start, count)
    return True


async def checkpoint(
    txn: Txn[AsyncConnection], *, claim: Claim, start_sequence: int, commands: Sequence[cmd.Command]
) -> Checkpointed:
    """Record the authored steps before a prepared local call (`CHECKPOINT_COMMANDS` only)."""
    held = await hold(txn, claim, renew=False)
    plan = Plan(run=held.run, task_id=held.task_id, now=held.now, txn=txn)
    for offset, command in enumerate(commands):
        rule = planning.rule_of(command)
        if not isinstance(command, CHECKPOINT_COMMANDS) or rule.plan is None:
            raise PreparedRefused(
                "prepared_checkpoint_command_not_supported",
                f"command {offset} ({command.type}) cannot be checkpointed before a local call",
                command=offset,
            )
        rule.plan(plan, command, start_sequence + offset)
    duplicate = await _checkpoint(txn, held, start_sequence, plan.events)
    return Checkpointed(
        held.run.run_id, start_sequence, start_sequence + len(commands), duplicate, []
    )


GroupMember = LocalActivitySpec | cmd.ScheduleActivity | cmd.StartTimer | cmd.StartChildWorkflow
"""A member of a prepared group: a local call (its options), or a remote step's command."""
_OPENINGS: dict[type[object], type[ev.Event]] = {
    cmd.ScheduleActivity: ev.ActivityScheduled,
    cmd.StartTimer: ev.TimerScheduled,
    cmd.StartChildWorkflow: ev.ChildWorkflowScheduled,
}


async def checkpoint_group(
    txn: Txn[AsyncConnection],
    *,
    claim: Claim,
    start_sequence: int,
    members: Sequence[GroupMember],
    kind: str,
) -> Checkpointed:
    """Open every member of a parallel group at once, from `start_sequence` on.

    A local member's `ActivityScheduled` records the group (`kind`, as the SDK names it); the
    other members are opened as the task's completion would open them (their activity and
    timer rows, their child runs), so they run while the local calls do.
    """
    held = await hold(txn, claim, renew=False)
    size = len(members)
    preparation = LocalPreparation(
        parallel_group_base_sequence=start_sequence,
        parallel_group_size=size,
        parallel_group_kind=kind,
    )
    steps = [start_sequence + offset for offset in range(size)]
    found = [
        (step, activity_execution_id(held.run.run_id, step))
        for step, member in zip(steps, members, strict=True)
        if isinstance(member, LocalActivitySpec)
    ]
    if start_sequence != held.last_step + 1:
        _require_opened(held, steps, members, preparation)
        return Checkpointed(held.run.run_id, start_sequence, start_sequence + size, True, found)
    plan = Plan(run=held.run, task_id=held.task_id, now=held.now, txn=txn)
    openings = transactional.Openings(txn)
    for step, member in zip(steps, members, strict=True):
        if isinstance(member, LocalActivitySpec):
            plan.last_step = step
            plan.record(_scheduled(held, step, member, preparation), f"step:{step}:scheduled")
        else:
            await openings.open(plan, member, step)
    await openings.write(plan)
    held.appended.extend(plan.events)
    held.last_step = steps[-1]
    await write(txn, held)
    return Checkpointed(held.run.run_id, start_sequence, start_sequence + size, False, found)


def _require_opened(
    held: Held, steps: Sequence[int], members: Sequence[GroupMember], preparation: LocalPreparation
) -> None:
    """Refuse a group resent for steps the history opened otherwise (a resend is the same)."""
    for step, member in zip(steps, members, strict=True):
        opened = [r.event for r in held.history if getattr(r.event, "sequence", None) == step]
        if isinstance(member, LocalActivitySpec):
            same = _scheduled(held, step, member, preparation) in opened
        else:
            same = any(isinstance(event, _OPENINGS[type(member)]) for event in opened)
        if not same:
            raise _refuse_range(held, steps[0], len(steps))


def _scheduled(
    held: Held, step: int, spec: LocalActivitySpec, preparation: LocalPreparation
) -> ev.ActivityScheduled:
    return ev.ActivityScheduled(
        activity_execution_id=activity_execution_id(held.run.run_id, step),
        activity_type=spec.activity_type,
        sequence=step,
        execution_mode="local",
        local_activity=True,
        workflow_task_id=held.task_id,
        activity=spec,
        local_preparation=preparation,
    )


async def prepare(
    txn: Txn[AsyncConnection],
    *,
    claim: Claim,
    sequence: int,
    worker_attempt_id: str,
    spec: LocalActivitySpec,
    group: tuple[int, int] | None = None,
    cleanup: CleanupProof | None = None,
) -> AttemptState:
    """Start the next attempt of the local step `sequence` (opening it when alone).

    A member of a group (`group`: its base step and size) was opened by the group's checkpoint.
    A call in cancellation cleanup names the run's request and the delivery its code took it at
    (`cleanup`); its deadlines end by the cleanup deadline.
    """
    held = await hold(txn, claim, renew=True)
    in_cleanup = None if cleanup is None else _cleanup(held, cleanup)
    execution = execution_of(held, sequence)
    _require_group(execution, group, sequence)
    if execution is None:
        if sequence != held.last_step + 1:
            raise PreparedRefused(
                "prepared_local_sequence_mismatch",
                f"step {sequence} is neither a prepared local step of run {held.run.run_id}"
                f" nor its next step ({held.last_step + 1})",
                sequence=sequence,
            )
        scheduled = _scheduled(held, sequence, spec, LocalPreparation())
        held.appended.append(NewEvent(scheduled, f"step:{sequence}:scheduled"))
        held.last_step = sequence
        execution = Execution(scheduled, spec)
        scheduled_at = held.now
    else:
        require_same(execution, spec, sequence)
        scheduled_at = _scheduled_at(held, sequence)
    if execution.closed is not None:
        raise PreparedRefused(
            "prepared_local_activity_closed",
            f"the local activity of step {sequence} has closed",
            sequence=sequence,
        )
    open_attempt = execution.open_attempt()
    if open_attempt is not None:
        admission = open_attempt.admission
        if (
            admission.worker_attempt_id == worker_attempt_id
            and admission.workflow_task_attempt == claim.epoch
            and open_attempt.event.workflow_task_id == held.task_id
        ):
            return attempt_state(held, claim, execution, open_attempt, duplicate=True, renewed=True)
        raise PreparedRefused(
            "prepared_local_attempt_open",
            f"attempt {open_attempt.event.attempt_number} of step {sequence} is still open:"
            " recover it first",
            sequence=sequence,
        )
    started = _started(held, claim, execution, sequence, worker_attempt_id, scheduled_at)
    if in_cleanup is not None:
        started = _in_cleanup(started, in_cleanup)
    admission = _admission(started)
    closing = admission.schedule_to_close_deadline_at
    if closing is not None and closing <= held.now:
        raise PreparedRefused(
            "schedule_to_close_deadline_expired",
            f"the local activity of step {sequence} has no time left for another attempt",
            sequence=sequence,
        )
    key = f"activity:{started.activity_execution_id}:started:{started.attempt_number}"
    held.appended.append(NewEvent(started, key))
    await write(txn, held)
    return attempt_state(held, claim, execution, Attempt(started, admission), renewed=True)


def _require_group(
    execution: Execution | None, group: tuple[int, int] | None, sequence: int
) -> None:
    preparation = None if execution is None else execution.scheduled.local_preparation
    recorded = None
    if preparation is not None and preparation.parallel_group_base_sequence is not None:
        recorded = (preparation.parallel_group_base_sequence, preparation.parallel_group_size)
    if recorded != group:
        raise PreparedRefused(
            "prepared_local_group_mismatch",
            f"step {sequence} names group {group}, but its history opened it in {recorded}",
            sequence=sequence,
        )


@dataclass(frozen=True, slots=True)
class CleanupProof:
    """What a call in cancellation cleanup names: the run's request and the delivery event."""

    request_id: str
    delivery_history_event_id: str


def _cleanup(held: Held, proof: CleanupProof) -> LocalCleanup:
    """The cleanup the proof names, if the history holds that request and its delivery."""
    request = cooperative.recorded_request(held.history)
    delivery = next(
        (
            event_id(r.run_id, r.sequence)
            for r in held.history
            if isinstance(r.event, ev.CooperativeCancellationDelivered)
        ),
        None,
    )
    named = (proof.request_id, proof.delivery_history_event_id)
    if request is None or (request.workflow_command_id, delivery) != named:
        raise PreparedRefused(
            "cancellation_cleanup_mismatch",
            f"run {held.run.run_id} took no cancellation {proof.request_id} at event"
            f" {proof.delivery_history_event_id}",
            request_id=proof.request_id,
        )
    if request.cleanup_deadline_at <= held.now:
        raise PreparedRefused(
            "cancellation_deadline_expired",
            f"the cleanup of cancellation {proof.request_id} ended at"
            f" {request.cleanup_deadline_at.isoformat()}",
            request_id=proof.request_id,
        )
    return LocalCleanup(
        request_id=request.workflow_command_id,
        root_request_id=request.workflow_command_id,
        delivery_history_event_id=proof.delivery_history_event_id,
        cleanup_deadline_at=request.cleanup_deadline_at,
    )


def _in_cleanup(started: ev.ActivityStarted, cleanup: LocalCleanup) -> ev.ActivityStarted:
    """The attempt with its cleanup, its fixed deadlines ending by the cleanup deadline."""
    admission = _admission(started)
    closing = cleanup.cleanup_deadline_at
    start_to_close = admission.start_to_close_deadline_at
    schedule_to_close = admission.schedule_to_close_deadline_at
    bounded = admission.model_copy(
        update={
            "cancellation_cleanup": cleanup,
            "start_to_close_deadline_at": None
            if start_to_close is None
            else min(start_to_close, closing),
            "schedule_to_close_deadline_at": None
            if schedule_to_close is None
            else min(schedule_to_close, closing),
        }
    )
    return started.model_copy(update={"local_admission": bounded})


def _scheduled_at(held: Held, sequence: int) -> datetime:
    for record in held.history:
        if isinstance(record.event, ev.ActivityScheduled) and record.event.sequence == sequence:
            return record.recorded_at
    return held.now


def _admission(started: ev.ActivityStarted) -> LocalAdmission:
    if started.local_admission is None:
        raise InvariantBroken("a prepared local attempt was started without its admission")
    return started.local_admission


def _started(
    held: Held,
    claim: Claim,
    execution: Execution,
    sequence: int,
    worker_attempt_id: str,
    scheduled_at: datetime,
) -> ev.ActivityStarted:
    spec = execution.spec
    start_to_close = spec.start_to_close_timeout
    schedule_to_close = spec.schedule_to_close_timeout
    return ev.ActivityStarted(
        activity_execution_id=execution.scheduled.activity_execution_id,
        activity_attempt_id=str(uuid.uuid4()),
        activity_type=spec.activity_type,
        sequence=sequence,
        attempt_number=len(execution.attempts) + 1,
        workflow_task_id=held.task_id,
        started_at=held.now,
        execution_mode="local",
        local_activity=True,
        local_admission=LocalAdmission(
            workflow_task_attempt=claim.epoch,
            lease_owner=claim.lease.lease_owner,
            worker_attempt_id=worker_attempt_id,
            start_to_close_deadline_at=None
            if start_to_close is None
            else held.now + timedelta(seconds=start_to_close),
            schedule_to_close_deadline_at=None
            if schedule_to_close is None
            else scheduled_at + timedelta(seconds=schedule_to_close),
        ),
    )


async def control(
    txn: Txn[AsyncConnection], *, claim: Claim, activity_attempt_id: str
) -> AttemptState:
    """The attempt observed; the claim's lease renewed while the attempt may go on."""
    held = await hold(txn, claim, renew=False)
    execution, attempt = attempt_of(held, activity_attempt_id)
    require_own(held, claim, attempt)
    found = attempt_state(held, claim, execution, attempt)
    if found.stop_reason is not None:
        return found
    renewed = await tasks.heartbeat_workflow_task(
        txn.conn, lease=claim.lease, lease_duration=claim.lease_duration
    )
    held.lease_expires_at = renewed.lease_expires_at
    return attempt_state(held, claim, execution, attempt, renewed=True)


async def heartbeat(
    txn: Txn[AsyncConnection],
    *,
    claim: Claim,
    activity_attempt_id: str,
    progress: Payload | None = None,
) -> AttemptState:
    """Record the attempt's heartbeat (`ActivityHeartbeatRecorded`) while it may go on."""
    held = await hold(txn, claim, renew=False)
    execution, attempt = attempt_of(held, activity_attempt_id)
    require_own(held, claim, attempt)
    found = attempt_state(held, claim, execution, attempt)
    if found.stop_reason is not None:
        return found
    started = attempt.event
    elapsed = int((held.now - (started.started_at or held.now)).total_seconds() * 1000)
    beat = ev.ActivityHeartbeatRecorded(
        activity_execution_id=started.activity_execution_id,
        activity_attempt_id=started.activity_attempt_id,
        activity_type=started.activity_type,
        sequence=started.sequence,
        attempt_number=started.attempt_number,
        workflow_task_id=held.task_id,
        elapsed_ms=elapsed,
        progress=progress,
    )
    index = len(attempt.heartbeats)
    key = f"activity:{started.activity_execution_id}:heartbeat:{started.attempt_number}:{index}"
    held.appended.append(NewEvent(beat, key))
    ids = await write(txn, held)
    attempt.heartbeats.append(beat)
    return attempt_state(held, claim, execution, attempt, heartbeat_event_id=ids[0])
