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

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import Conflict
from burrow.protocol import events as ev
from burrow.protocol.activity_events import LocalAdmission, LocalCleanup
from burrow.protocol.shapes import LocalActivitySpec
from burrow.store import history, runs, sql, tasks
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import Fence, HistoryEvent, RunRow
from burrow.store.sql import statement
from burrow.store.transactions import Txn

_NOW = statement("SELECT now() AS now")
_LEASE = statement("SELECT lease_expires_at FROM workflow_tasks WHERE task_id = :task_id")


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
class Held:
    """A call's claim, checked: its task, its locked run and history, the database's now."""

    task_id: str
    run: RunRow
    history: list[HistoryEvent]
    now: datetime
    lease_expires_at: datetime
    appended: list[NewEvent] = field(default_factory=list)
    last_step: int = 0


async def hold(txn: Txn[AsyncConnection], claim: Claim, *, renew: bool) -> Held:
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
    return Held(task.task_id, run, recorded, now, expires, last_step=run.last_step_seq)


async def write(txn: Txn[AsyncConnection], held: Held) -> dict[int, str]:
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


# -- one execution's attempts, as its history holds them -----------------------------------


@dataclass(slots=True)
class Attempt:
    """One attempt of a prepared local execution, as its history holds it."""

    event: ev.ActivityStarted
    admission: LocalAdmission
    heartbeats: list[ev.ActivityHeartbeatRecorded] = field(default_factory=list)
    closed: HistoryEvent | None = None


@dataclass(slots=True)
class Execution:
    """A prepared local execution: its opening, options and attempts, and its close if any."""

    scheduled: ev.ActivityScheduled
    spec: LocalActivitySpec
    attempts: list[Attempt] = field(default_factory=list)
    closed: HistoryEvent | None = None

    def open_attempt(self) -> Attempt | None:
        """The last attempt while nothing has closed it."""
        last = self.attempts[-1] if self.attempts else None
        return last if last is not None and last.closed is None else None


def _opened(event: ev.ActivityScheduled) -> Execution | None:
    """The execution a prepared local opening starts; None for any other ActivityScheduled."""
    spec = event.activity
    if event.local_preparation is None or not isinstance(spec, LocalActivitySpec):
        return None
    return Execution(event, spec)


def execution_of(held: Held, step: int) -> Execution | None:
    """The prepared local execution of `step`, if the history opened one there."""
    found: Execution | None = None
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
            found.attempts.append(Attempt(event, event.local_admission))
        elif isinstance(event, ev.ActivityHeartbeatRecorded) and found.attempts:
            found.attempts[-1].heartbeats.append(event)
        elif isinstance(event, ev.ActivityRetryScheduled) and found.attempts:
            found.attempts[-1].closed = record
        elif isinstance(event, ev.ActivityClosed):
            found.closed = record
            if found.attempts and found.attempts[-1].closed is None:
                found.attempts[-1].closed = record
    return found


def attempt_of(held: Held, attempt_id: str) -> tuple[Execution, Attempt]:
    """The attempt the call names, with its execution; 404 refusal when the run has none."""
    steps = {
        r.event.sequence
        for r in held.history
        if isinstance(r.event, ev.ActivityStarted) and r.event.activity_attempt_id == attempt_id
    }
    for step in steps:
        execution = execution_of(held, step)
        for attempt in [] if execution is None else execution.attempts:
            if execution is not None and attempt.event.activity_attempt_id == attempt_id:
                return execution, attempt
    raise PreparedRefused(
        "prepared_local_attempt_not_found",
        f"run {held.run.run_id} has no prepared local attempt {attempt_id}",
        status=404,
        activity_attempt_id=attempt_id,
    )


def require_own(held: Held, claim: Claim, attempt: Attempt) -> None:
    """Refuse a call about an attempt another claim (task, attempt or owner) admitted."""
    admission = attempt.admission
    admitted_on = (
        attempt.event.workflow_task_id,
        admission.workflow_task_attempt,
        admission.lease_owner,
    )
    if admitted_on != (held.task_id, claim.epoch, claim.lease.lease_owner):
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
    cancellation_cleanup: LocalCleanup | None = None
    stop_reason: str | None = None
    """None while the attempt may go on; else why it must stop."""
    duplicate: bool = False
    renewed: bool = False
    heartbeat_event_id: str | None = None


def _heartbeat_deadline(execution: Execution, attempt: Attempt) -> datetime | None:
    """The last heartbeat (or the start) plus the heartbeat timeout, never past cleanup's end.

    In cleanup without a heartbeat timeout, the cleanup deadline is the heartbeat deadline.
    """
    timeout = execution.spec.heartbeat_timeout
    started = attempt.event.started_at
    cleanup = attempt.admission.cancellation_cleanup
    closing = None if cleanup is None else cleanup.cleanup_deadline_at
    if timeout is None or started is None:
        return closing
    elapsed = max((beat.elapsed_ms for beat in attempt.heartbeats), default=0)
    beat = started + timedelta(milliseconds=elapsed, seconds=timeout)
    return beat if closing is None else min(beat, closing)


def attempt_state(
    held: Held, claim: Claim, execution: Execution, attempt: Attempt, **extra: object
) -> AttemptState:
    """The attempt as the call finds it: its deadlines, and why it must stop, if it must."""
    admission = attempt.admission
    started = attempt.event
    heartbeat = _heartbeat_deadline(execution, attempt)
    deadlines = {
        "start_to_close_deadline_expired": admission.start_to_close_deadline_at,
        "schedule_to_close_deadline_expired": admission.schedule_to_close_deadline_at,
        "cleanup_deadline_expired": None
        if admission.cancellation_cleanup is None
        else admission.cancellation_cleanup.cleanup_deadline_at,
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
        "cancellation_cleanup": admission.cancellation_cleanup,
        "stop_reason": reason,
    }
    return AttemptState(**{**fields, **extra})  # type: ignore[arg-type]


def require_same(execution: Execution, spec: LocalActivitySpec, sequence: int) -> None:
    """Refuse a call naming other options than the execution recorded at its opening."""
    if execution.spec != spec:
        raise PreparedRefused(
            "prepared_local_descriptor_mismatch",
            f"step {sequence} holds local activity {execution.spec.activity_type!r} with other"
            " options than the call names",
            sequence=sequence,
        )
