"""Prepared local activities (protocol 1.20): admitted, watched and closed on their workflow claim.

A worker that negotiated the bridge does not run a local activity first and record it after
(`record_local_activity`, A3): it asks first, on the workflow task it holds, and every answer is
history. Each call runs in one transaction that checks the claim's lease, locks the run and reads
its history; the activity's state is that history, nothing beside it.

- `checkpoint` records the authored steps before the local call (side effects, version markers)
  at the run's next steps; `checkpoint_group` records the opening `ActivityScheduled` of every
  local member of a parallel group at once, each with the group in its `local_preparation`.
- `prepare` starts an attempt of the local step (its `ActivityScheduled` first, when alone):
  `ActivityStarted` with the claim and the worker's nonce in `local_admission`, and the fixed
  deadlines. `control` observes it (and renews the claim's lease), `heartbeat` records
  `ActivityHeartbeatRecorded` and moves only the heartbeat deadline.
- `outcome` closes the attempt: `ActivityCompleted`, `ActivityFailed`, or, when the retry policy
  allows another attempt, `ActivityRetryScheduled`; a retry releases the claim and makes the
  run's next workflow task, due after the backoff, whose worker prepares the next attempt.
- `recover` closes an attempt a lost claim left open: its callback's fate is unknown, so it is
  a failure (a timeout once its start-to-close deadline passed) under the same retry policy,
  marked with `local_recovery`.

A local execution's retry policy is the SDK's: one attempt unless it names `max_attempts`, and
the backoff it lists (none: at once). A resend of a call the history already answers gets the
same answer, `duplicate`; anything the history cannot take is refused with a reason and writes
nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import Conflict
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.activity_events import LocalAdmission, LocalPreparation, LocalRecovery
from burrow.protocol.shapes import (
    ExceptionInfo,
    Failure,
    JsonDict,
    LocalActivitySpec,
    activity_execution_id,
)
from burrow.store import fragments, history, runs, sql, tasks
from burrow.store import schema as s
from burrow.store.completion import plan as planning
from burrow.store.completion import transactional
from burrow.store.completion.effects import Plan
from burrow.store.errors import InvariantBroken
from burrow.store.history import NewEvent
from burrow.store.models import Fence, HistoryEvent, RunRow
from burrow.store.sql import statement
from burrow.store.transactions import Txn

CHECKPOINT_COMMANDS = (cmd.RecordSideEffect, cmd.RecordVersionMarker)
"""The authored steps a checkpoint records before a prepared local call (events only)."""
LOST_CALLBACK = "LocalActivityCallbackLost"
"""The exception type of a failure `recover` records."""

_NOW = statement("SELECT now() AS now")
_LEASE = statement("SELECT lease_expires_at FROM workflow_tasks WHERE task_id = :task_id")
_NEXT_TASK = statement(
    """
    WITH created AS (
        {insert_task}
        WHERE run_id = :run_id AND status = 'running'
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    ), due AS (
        UPDATE workflow_tasks SET available_at = :available_at
        WHERE task_id = (SELECT task_id FROM created)
        RETURNING task_id
    )
    SELECT created.*, (SELECT count(*) FROM due) AS delayed FROM created
    """.format(
        insert_task=fragments.insert_workflow_task(":task_id", "runs"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
    )
)
_OPEN_TASK = statement(
    "SELECT task_id FROM workflow_tasks WHERE run_id = :run_id AND state IN ('ready', 'leased')"
)


class PreparedRefused(Conflict):
    """A prepared call the run's history cannot take; `reason` is its code. Nothing written."""

    def __init__(self, reason: str, message: str, *, status: int = 409, **ids: object) -> None:
        super().__init__(message, reason=reason, status=status, **ids)


@dataclass(frozen=True, slots=True)
class Claim:
    """The workflow claim a call names: its lease fence and how long a renewal holds it."""

    lease: Fence
    lease_duration: timedelta

    @property
    def epoch(self) -> int:
        """The claim's workflow task attempt."""
        return self.lease.attempt or 1


@dataclass(slots=True)
class _Held:
    task_id: str
    run: RunRow
    history: list[HistoryEvent]
    now: datetime
    lease_expires_at: datetime
    appended: list[NewEvent] = field(default_factory=list)
    last_step: int = 0


async def _hold(txn: Txn[AsyncConnection], claim: Claim, *, renew: bool) -> _Held:
    """The claim checked (renewed when `renew`), its run locked and read; StaleLease if lost."""
    conn = txn.conn
    task = await tasks.check_workflow_task_lease(conn, lease=claim.lease)
    if renew:
        await tasks.heartbeat_workflow_task(
            conn, lease=claim.lease, lease_duration=claim.lease_duration
        )
    run = await runs.lock_run(conn, run_id=task.run_id)
    runs.require_running(run)
    now = (await sql.one(conn, _NOW)).now
    expires = (await sql.one(conn, _LEASE, {"task_id": task.task_id})).lease_expires_at
    recorded = await history.read_history(conn, run_id=run.run_id)
    return _Held(task.task_id, run, recorded, now, expires, last_step=run.last_step_seq)


async def _write(txn: Txn[AsyncConnection], held: _Held) -> dict[int, str]:
    """Append what the call recorded after the run's last event; each new event's id by index."""
    conn = txn.conn
    if not held.appended:
        return {}
    run = held.run
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        events=held.appended,
        workflow_task_id=held.task_id,
    )
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(last_event_seq=last, last_step_seq=max(run.last_step_seq, held.last_step))
    )
    return {
        index: event_id(run.run_id, run.last_event_seq + 1 + index)
        for index in range(len(held.appended))
    }


def event_id(run_id: str, sequence: int) -> str:
    """A history event's id as the worker plane names it (selections.event_id)."""
    return f"{run_id}:{sequence}"


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


def _refuse_range(held: _Held, start: int, count: int) -> PreparedRefused:
    return PreparedRefused(
        "prepared_checkpoint_conflict",
        f"steps {start}..{start + count - 1} are not the run's next steps (its last step is"
        f" {held.last_step}) nor what the history holds there",
        start_sequence=start,
        last_sequence=held.last_step,
    )


async def _checkpoint(
    txn: Txn[AsyncConnection], held: _Held, start: int, planned: list[NewEvent]
) -> bool:
    """Record `planned` (one event per step from `start`), or find it recorded: duplicate."""
    count = len(planned)
    if start == held.last_step + 1:
        held.appended.extend(planned)
        held.last_step = start + count - 1
        await _write(txn, held)
        return False
    steps = range(start, start + count)
    recorded = [r.event for r in held.history if getattr(r.event, "sequence", None) in steps]
    openings = [e for e in recorded if not isinstance(e, _LATER_EVENTS)]
    if openings != [p.event for p in planned]:
        raise _refuse_range(held, start, count)
    return True


_LATER_EVENTS = (
    ev.ActivityStarted,
    ev.ActivityHeartbeatRecorded,
    ev.ActivityRetryScheduled,
    ev.ActivityCompleted,
    ev.ActivityFailed,
    ev.ActivityTimedOut,
    ev.ActivityCancelled,
)
"""What the history holds at a local step besides its opening."""


async def checkpoint(
    txn: Txn[AsyncConnection], *, claim: Claim, start_sequence: int, commands: Sequence[cmd.Command]
) -> Checkpointed:
    """Record the authored steps before a prepared local call (`CHECKPOINT_COMMANDS` only)."""
    held = await _hold(txn, claim, renew=False)
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


async def checkpoint_group(
    txn: Txn[AsyncConnection],
    *,
    claim: Claim,
    start_sequence: int,
    members: Sequence[LocalActivitySpec],
) -> Checkpointed:
    """Open every local member of a parallel group at once, from `start_sequence` on."""
    held = await _hold(txn, claim, renew=False)
    size = len(members)
    planned: list[NewEvent] = []
    found: list[tuple[int, str]] = []
    preparation = LocalPreparation(
        parallel_group_base_sequence=start_sequence, parallel_group_size=size
    )
    for offset, spec in enumerate(members):
        step = start_sequence + offset
        scheduled = _scheduled(held, step, spec, preparation)
        planned.append(NewEvent(scheduled, f"step:{step}:scheduled"))
        found.append((step, scheduled.activity_execution_id))
    duplicate = await _checkpoint(txn, held, start_sequence, planned)
    return Checkpointed(held.run.run_id, start_sequence, start_sequence + size, duplicate, found)


def _scheduled(
    held: _Held, step: int, spec: LocalActivitySpec, preparation: LocalPreparation
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


# -- one execution's attempts, as its history holds them -----------------------------------


@dataclass(slots=True)
class _Attempt:
    event: ev.ActivityStarted
    admission: LocalAdmission
    heartbeats: list[ev.ActivityHeartbeatRecorded] = field(default_factory=list)
    closed: HistoryEvent | None = None


@dataclass(slots=True)
class _Execution:
    scheduled: ev.ActivityScheduled
    spec: LocalActivitySpec
    attempts: list[_Attempt] = field(default_factory=list)
    closed: HistoryEvent | None = None

    def open_attempt(self) -> _Attempt | None:
        last = self.attempts[-1] if self.attempts else None
        return last if last is not None and last.closed is None else None


def _opened(event: ev.ActivityScheduled) -> _Execution | None:
    """The execution a prepared local opening starts; None for any other ActivityScheduled."""
    spec = event.activity
    if event.local_preparation is None or not isinstance(spec, LocalActivitySpec):
        return None
    return _Execution(event, spec)


def _execution(held: _Held, step: int) -> _Execution | None:
    """The prepared local execution of `step`, if the history opened one there."""
    found: _Execution | None = None
    for record in held.history:
        event = record.event
        if getattr(event, "sequence", None) != step:
            continue
        if isinstance(event, ev.ActivityScheduled):
            found = _opened(event)
            if found is None:
                return None
        elif found is None:
            continue
        elif isinstance(event, ev.ActivityStarted) and event.local_admission is not None:
            found.attempts.append(_Attempt(event, event.local_admission))
        elif isinstance(event, ev.ActivityHeartbeatRecorded) and found.attempts:
            found.attempts[-1].heartbeats.append(event)
        elif isinstance(event, ev.ActivityRetryScheduled) and found.attempts:
            found.attempts[-1].closed = record
        elif isinstance(event, ev.ActivityClosed):
            found.closed = record
            if found.attempts and found.attempts[-1].closed is None:
                found.attempts[-1].closed = record
    return found


def _attempt_of(held: _Held, attempt_id: str) -> tuple[_Execution, _Attempt]:
    steps = {
        r.event.sequence
        for r in held.history
        if isinstance(r.event, ev.ActivityStarted) and r.event.activity_attempt_id == attempt_id
    }
    for step in steps:
        execution = _execution(held, step)
        for attempt in [] if execution is None else execution.attempts:
            if execution is not None and attempt.event.activity_attempt_id == attempt_id:
                return execution, attempt
    raise PreparedRefused(
        "prepared_local_attempt_not_found",
        f"run {held.run.run_id} has no prepared local attempt {attempt_id}",
        status=404,
        activity_attempt_id=attempt_id,
    )


def _require_own(held: _Held, claim: Claim, attempt: _Attempt) -> None:
    admission = attempt.admission
    if (
        attempt.event.workflow_task_id != held.task_id
        or admission.workflow_task_attempt != claim.epoch
        or admission.lease_owner != claim.lease.lease_owner
    ):
        raise PreparedRefused(
            "prepared_local_claim_mismatch",
            f"attempt {attempt.event.activity_attempt_id} was admitted on another workflow claim",
            activity_attempt_id=attempt.event.activity_attempt_id,
        )


# -- attempts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttemptState:
    """A prepared attempt as a call finds it (and leaves it): what its receipt reports."""

    run_id: str
    task_id: str
    workflow_task_attempt: int
    lease_owner: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt_number: int
    worker_attempt_id: str
    server_time: datetime
    lease_expires_at: datetime
    start_to_close_deadline_at: datetime | None
    schedule_to_close_deadline_at: datetime | None
    heartbeat_deadline_at: datetime | None
    stop_reason: str | None = None
    """None while the attempt may go on; else why it must stop."""
    duplicate: bool = False
    renewed: bool = False
    heartbeat_event_id: str | None = None


def _heartbeat_deadline(execution: _Execution, attempt: _Attempt) -> datetime | None:
    timeout = execution.spec.heartbeat_timeout
    started = attempt.event.started_at
    if timeout is None or started is None:
        return None
    elapsed = max((beat.elapsed_ms for beat in attempt.heartbeats), default=0)
    return started + timedelta(milliseconds=elapsed, seconds=timeout)


def _state(
    held: _Held, claim: Claim, execution: _Execution, attempt: _Attempt, **extra: object
) -> AttemptState:
    admission = attempt.admission
    started = attempt.event
    heartbeat = _heartbeat_deadline(execution, attempt)
    deadlines = {
        "start_to_close_deadline_expired": admission.start_to_close_deadline_at,
        "schedule_to_close_deadline_expired": admission.schedule_to_close_deadline_at,
        "heartbeat_deadline_expired": heartbeat,
    }
    reason = "activity_attempt_closed" if attempt.closed is not None else None
    for code, deadline in deadlines.items():
        if reason is None and deadline is not None and deadline <= held.now:
            reason = code
    fields: dict[str, object] = {
        "run_id": held.run.run_id,
        "task_id": held.task_id,
        "workflow_task_attempt": claim.epoch,
        "lease_owner": claim.lease.lease_owner,
        "activity_execution_id": started.activity_execution_id,
        "activity_attempt_id": started.activity_attempt_id,
        "attempt_number": started.attempt_number,
        "worker_attempt_id": admission.worker_attempt_id,
        "server_time": held.now,
        "lease_expires_at": held.lease_expires_at,
        "start_to_close_deadline_at": admission.start_to_close_deadline_at,
        "schedule_to_close_deadline_at": admission.schedule_to_close_deadline_at,
        "heartbeat_deadline_at": heartbeat,
        "stop_reason": reason,
    }
    return AttemptState(**{**fields, **extra})  # type: ignore[arg-type]


async def prepare(
    txn: Txn[AsyncConnection],
    *,
    claim: Claim,
    sequence: int,
    worker_attempt_id: str,
    spec: LocalActivitySpec,
    group: tuple[int, int] | None = None,
) -> AttemptState:
    """Start the next attempt of the local step `sequence` (opening it when alone).

    A member of a group (`group`: its base step and size) was opened by the group's checkpoint.
    """
    held = await _hold(txn, claim, renew=True)
    execution = _execution(held, sequence)
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
        execution = _Execution(scheduled, spec)
        scheduled_at = held.now
    else:
        _require_same(execution, spec, sequence)
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
            return _state(held, claim, execution, open_attempt, duplicate=True, renewed=True)
        raise PreparedRefused(
            "prepared_local_attempt_open",
            f"attempt {open_attempt.event.attempt_number} of step {sequence} is still open:"
            " recover it first",
            sequence=sequence,
        )
    started = _started(held, claim, execution, sequence, worker_attempt_id, scheduled_at)
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
    await _write(txn, held)
    return _state(held, claim, execution, _Attempt(started, admission), renewed=True)


def _require_group(
    execution: _Execution | None, group: tuple[int, int] | None, sequence: int
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


def _require_same(execution: _Execution, spec: LocalActivitySpec, sequence: int) -> None:
    if execution.spec != spec:
        raise PreparedRefused(
            "prepared_local_descriptor_mismatch",
            f"step {sequence} holds local activity {execution.spec.activity_type!r} with other"
            " options than the call names",
            sequence=sequence,
        )


def _scheduled_at(held: _Held, sequence: int) -> datetime:
    for record in held.history:
        if isinstance(record.event, ev.ActivityScheduled) and record.event.sequence == sequence:
            return record.recorded_at
    return held.now


def _admission(started: ev.ActivityStarted) -> LocalAdmission:
    if started.local_admission is None:
        raise InvariantBroken("a prepared local attempt was started without its admission")
    return started.local_admission


def _started(
    held: _Held,
    claim: Claim,
    execution: _Execution,
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
    held = await _hold(txn, claim, renew=False)
    execution, attempt = _attempt_of(held, activity_attempt_id)
    _require_own(held, claim, attempt)
    found = _state(held, claim, execution, attempt)
    if found.stop_reason is not None:
        return found
    renewed = await tasks.heartbeat_workflow_task(
        txn.conn, lease=claim.lease, lease_duration=claim.lease_duration
    )
    held.lease_expires_at = renewed.lease_expires_at
    return _state(held, claim, execution, attempt, renewed=True)


async def heartbeat(
    txn: Txn[AsyncConnection], *, claim: Claim, activity_attempt_id: str
) -> AttemptState:
    """Record the attempt's heartbeat (`ActivityHeartbeatRecorded`) while it may go on."""
    held = await _hold(txn, claim, renew=False)
    execution, attempt = _attempt_of(held, activity_attempt_id)
    _require_own(held, claim, attempt)
    found = _state(held, claim, execution, attempt)
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
    )
    index = len(attempt.heartbeats)
    key = f"activity:{started.activity_execution_id}:heartbeat:{started.attempt_number}:{index}"
    held.appended.append(NewEvent(beat, key))
    ids = await _write(txn, held)
    attempt.heartbeats.append(beat)
    return _state(held, claim, execution, attempt, heartbeat_event_id=ids[0])


# -- closing an attempt ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Closed:
    """The event that closed an attempt, and what it did to the claim."""

    run_id: str
    task_id: str
    activity_execution_id: str
    activity_attempt_id: str
    worker_attempt_id: str
    event_type: str
    event_id: str
    recorded_at: datetime
    duplicate: bool
    created_task_ids: list[str]
    """The workflow task a retry made (the claim is released then), else none."""


@dataclass(frozen=True, slots=True)
class Report:
    """A worker's outcome of its attempt: completed with `result`, or failed."""

    completed: bool
    result: JsonDict | None = None
    failure: Failure | None = None


def _retry_backoff(
    execution: _Execution, attempt: _Attempt, failure: Failure, now: datetime
) -> float | None:
    """The backoff before another attempt, or None when this failure closes the execution."""
    policy = execution.spec.retry_policy
    limit = policy.max_attempts or 1
    number = attempt.event.attempt_number
    if failure.non_retryable or number >= limit:
        return None
    if failure.exception_type in (policy.non_retryable_error_types or []):
        return None
    explicit = policy.backoff_seconds or []
    backoff = float(explicit[min(number - 1, len(explicit) - 1)]) if explicit else 0.0
    deadline = attempt.admission.schedule_to_close_deadline_at
    if deadline is not None and now + timedelta(seconds=backoff) >= deadline:
        return None
    return backoff


def _failure_fields(failure: Failure) -> JsonDict:
    return {
        "exception_type": failure.exception_type,
        "message": failure.message,
        "non_retryable": failure.non_retryable,
        "failure_category": "timeout" if failure.timeout_kind else "application",
        "timeout_kind": failure.timeout_kind or None,
        "details": failure.details,
        "exception": ExceptionInfo(stack=failure.stack) if failure.stack else None,
    }


async def _close(
    txn: Txn[AsyncConnection],
    held: _Held,
    claim: Claim,
    execution: _Execution,
    attempt: _Attempt,
    report: Report,
    recovery: LocalRecovery | None = None,
) -> Closed:
    started = attempt.event
    ids: JsonDict = {
        "activity_execution_id": started.activity_execution_id,
        "activity_attempt_id": started.activity_attempt_id,
        "activity_type": started.activity_type,
        "sequence": started.sequence,
        "attempt_number": started.attempt_number,
        "workflow_task_id": held.task_id,
        "execution_mode": "local",
        "local_activity": True,
    }
    closed_key = f"activity:{started.activity_execution_id}:closed"
    backoff: float | None = None
    event: ev.Event
    if report.completed and report.result is not None:
        event = ev.ActivityCompleted(
            **ids, result=str(report.result["blob"]), payload_codec=str(report.result["codec"])
        )
    else:
        failure = report.failure or Failure()
        fields = {**_failure_fields(failure), "local_recovery": recovery}
        backoff = _retry_backoff(execution, attempt, failure, held.now)
        if backoff is not None:
            policy = execution.spec.retry_policy
            event = ev.ActivityRetryScheduled(
                **ids,
                **fields,
                retry_available_at=held.now + timedelta(seconds=backoff),
                retry_backoff_seconds=backoff,
                retry_after_attempt=started.attempt_number,
                retry_reason="timeout" if failure.timeout_kind else "failure",
                max_attempts=policy.max_attempts or 1,
            )
            closed_key = f"activity:{started.activity_execution_id}:retry:{started.attempt_number}"
        elif failure.timeout_kind:
            event = ev.ActivityTimedOut(**ids, **fields)
        else:
            event = ev.ActivityFailed(**ids, **fields)
    held.appended.append(NewEvent(event, closed_key))
    written = await _write(txn, held)
    created: list[str] = []
    if backoff is not None:
        created = [await _release(txn, held, claim, held.now + timedelta(seconds=backoff))]
    return Closed(
        run_id=held.run.run_id,
        task_id=held.task_id,
        activity_execution_id=started.activity_execution_id,
        activity_attempt_id=started.activity_attempt_id,
        worker_attempt_id=attempt.admission.worker_attempt_id,
        event_type=event.event_type,
        event_id=written[0],
        recorded_at=held.now,
        duplicate=False,
        created_task_ids=created,
    )


async def _release(
    txn: Txn[AsyncConnection], held: _Held, claim: Claim, available_at: datetime
) -> str:
    """Release the claim (its task completes with no commands); the run's next task's id.

    The next task is due when the retry is (a task the completion made already, for a signal
    say, is due at once, and runs the retry then).
    """
    await transactional.complete_workflow_task(txn, lease=claim.lease, commands=[])
    params = {
        "task_id": str(uuid.uuid4()),
        "run_id": held.run.run_id,
        "available_at": available_at,
    }
    row = await sql.first(txn.conn, _NEXT_TASK, params)
    if row is not None:
        txn.notify_workflow_task(row, available_at)
        return str(row.task_id)
    return str((await sql.one(txn.conn, _OPEN_TASK, {"run_id": held.run.run_id})).task_id)


def _closed_of(held: _Held, attempt: _Attempt, record: HistoryEvent) -> Closed:
    started = attempt.event
    return Closed(
        run_id=held.run.run_id,
        task_id=held.task_id,
        activity_execution_id=started.activity_execution_id,
        activity_attempt_id=started.activity_attempt_id,
        worker_attempt_id=attempt.admission.worker_attempt_id,
        event_type=record.event.event_type,
        event_id=event_id(record.run_id, record.sequence),
        recorded_at=record.recorded_at,
        duplicate=True,
        created_task_ids=[],
    )


async def outcome(
    txn: Txn[AsyncConnection], *, claim: Claim, activity_attempt_id: str, report: Report
) -> Closed:
    """Close the attempt as its worker reports it, under the execution's retry policy."""
    held = await _hold(txn, claim, renew=False)
    execution, attempt = _attempt_of(held, activity_attempt_id)
    _require_own(held, claim, attempt)
    if attempt.closed is not None:
        recorded = attempt.closed.event
        if isinstance(recorded, ev.ActivityCompleted) != report.completed or (
            isinstance(recorded, ev.ActivityCompleted)
            and report.result is not None
            and recorded.result != report.result.get("blob")
        ):
            raise PreparedRefused(
                "prepared_local_outcome_conflict",
                f"attempt {activity_attempt_id} was closed with {recorded.event_type}",
                activity_attempt_id=activity_attempt_id,
            )
        return _closed_of(held, attempt, attempt.closed)
    return await _close(txn, held, claim, execution, attempt, report)


async def recover(
    txn: Txn[AsyncConnection], *, claim: Claim, sequence: int, spec: LocalActivitySpec
) -> Closed:
    """Close the attempt of `sequence` a lost claim left open (its callback's fate unknown)."""
    held = await _hold(txn, claim, renew=False)
    execution = _execution(held, sequence)
    if execution is None:
        raise PreparedRefused(
            "prepared_local_attempt_not_open",
            f"step {sequence} of run {held.run.run_id} is no prepared local activity",
            sequence=sequence,
        )
    _require_same(execution, spec, sequence)
    last = execution.attempts[-1] if execution.attempts else None
    if last is not None and last.closed is not None:
        closing = last.closed.event
        recovery = getattr(closing, "local_recovery", None)
        if (
            isinstance(recovery, LocalRecovery)
            and recovery.workflow_task_id == held.task_id
            and recovery.workflow_task_attempt == claim.epoch
        ):
            return _closed_of(held, last, last.closed)
    if last is None or last.closed is not None:
        raise PreparedRefused(
            "prepared_local_attempt_not_open",
            f"the local activity of step {sequence} has no open attempt to recover",
            sequence=sequence,
        )
    deadline = last.admission.start_to_close_deadline_at
    timed_out = deadline is not None and deadline <= held.now
    failure = Failure(
        exception_type=LOST_CALLBACK,
        message="the workflow claim running this local activity was lost; whether its"
        " callback stopped is unknown",
        timeout_kind="start_to_close" if timed_out else None,
    )
    recovery = LocalRecovery(
        workflow_task_id=held.task_id,
        workflow_task_attempt=claim.epoch,
        lease_owner=claim.lease.lease_owner,
    )
    return await _close(
        txn, held, claim, execution, last, Report(completed=False, failure=failure), recovery
    )
