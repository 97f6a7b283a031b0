"""Cooperative cancellation: a client's request, and its delivery at one authored call.

A request (`request_cancellation`) is recorded once per run as `CooperativeCancellationRequested`
in the run's inbox; it wakes a workflow task, whose worker replays to the call the workflow
waits in and names it. `deliver` records `CooperativeCancellationDelivered` on that claim, in
the same transaction as what the call's own cancellation policy asks of the work it waits for:

- a queued activity: `try_cancel` (the default) asks it to stop (its heartbeat reports
  `cancel_requested`) and delivers now; `wait_cancellation_completed` asks it and delivers only
  once it has ended (the claim is released meanwhile, the activity's close wakes the run again);
  `abandon` leaves it running. An activity not yet started is cancelled outright.
- a child workflow: the same three policies, the child asked to cancel as its parent would.
- a timer: it will not fire.

Neither request nor delivery changes anything else; the workflow's cleanup code decides the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Self

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.errors import Conflict
from burrow.protocol import events
from burrow.protocol.cancellation_events import CallKind
from burrow.protocol.shapes import Failure
from burrow.store import activities, children, fragments, history, ready, runs, sql, tasks
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.isolation import RepairStep, RowRef, Tally, each_row, held_out, marked
from burrow.store.models import (
    Fence,
    HistoryEvent,
    JsonDict,
    RunRow,
    RunStatus,
    TaskState,
    TimerState,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

DEFAULT_CLEANUP_SECONDS = 300
"""How long a request gives cleanup code when the caller names no bound."""

_REQUESTED_KEY = "cooperative-cancel-requested"
_DELIVERED_KEY = "cooperative-cancel-delivered"
_ACTIVITY_CLOSED = (
    events.ActivityCompleted,
    events.ActivityFailed,
    events.ActivityTimedOut,
    events.ActivityCancelled,
)


class CancellationRefused(Conflict):
    """A delivery the run cannot take; `reason` is the protocol's code. Nothing was written."""

    def __init__(self, reason: str, message: str, **ids: object) -> None:
        super().__init__(message, reason=reason, **ids)


@dataclass(frozen=True, slots=True)
class CancellationRequest:
    """A run's one cooperative cancellation request; `duplicate` when it was recorded before."""

    request_id: str
    workflow_id: str
    run_id: str
    requested_at: datetime
    cleanup_deadline_at: datetime
    duplicate: bool

    @classmethod
    def of(cls, event: events.CooperativeCancellationRequested, *, duplicate: bool) -> Self:
        """The request its history event records."""
        return cls(
            request_id=event.workflow_command_id,
            workflow_id=event.workflow_instance_id,
            run_id=event.workflow_run_id,
            requested_at=event.requested_at,
            cleanup_deadline_at=event.cleanup_deadline_at,
            duplicate=duplicate,
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """What `deliver` did: `delivered`, or the work the call still waits for (`waiting_for`)."""

    run_id: str
    delivered: bool
    waiting_for: str | None = None


def recorded_request(
    history_events: list[HistoryEvent],
) -> events.CooperativeCancellationRequested | None:
    """The run's request, if its history holds one."""
    for record in history_events:
        if isinstance(record.event, events.CooperativeCancellationRequested):
            return record.event
    return None


async def _queued_request(
    conn: AsyncConnection, run_id: str
) -> events.CooperativeCancellationRequested | None:
    i = s.inbox_events.c
    payload = (
        await conn.execute(
            sa.select(i.payload).where(i.run_id == run_id, i.idempotency_key == _REQUESTED_KEY)
        )
    ).scalar_one_or_none()
    if payload is None:
        return None
    return events.CooperativeCancellationRequested.model_validate(payload)


async def request_cancellation(
    txn: Txn[AsyncConnection], *, run: RunRow, reason: str | None, cleanup_seconds: int | None
) -> CancellationRequest:
    """Record the run's request once; a repeat returns the original request and deadline."""
    conn = txn.conn
    runs.require_running(run)
    existing = await _queued_request(conn, run.run_id)
    if existing is not None:
        return CancellationRequest.of(existing, duplicate=True)
    now = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
    seconds = cleanup_seconds or DEFAULT_CLEANUP_SECONDS
    requested = events.CooperativeCancellationRequested(
        workflow_command_id=str(uuid.uuid4()),
        workflow_instance_id=run.workflow_id,
        workflow_run_id=run.run_id,
        requested_at=now,
        cleanup_deadline_at=now + timedelta(seconds=seconds),
        cleanup_timeout_seconds=seconds,
        reason=reason,
    )
    await runs.record_external_event(txn, run=run, event=NewEvent(requested, _REQUESTED_KEY))
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(cleanup_deadline_at=requested.cleanup_deadline_at)
    )
    return CancellationRequest.of(requested, duplicate=False)


@dataclass(frozen=True, slots=True)
class DeliveryTarget:
    """The call a worker names for the delivery (its request, step, kind and spans)."""

    request_id: str
    sequence: int
    call_kind: CallKind
    sequence_span: int = 1
    operation_sequence: int | None = None
    operation_sequence_span: int | None = None


async def deliver(txn: Txn[AsyncConnection], *, lease: Fence, target: DeliveryTarget) -> Delivery:
    """Deliver the run's request at the named call, on the worker's current claim.

    Raises:
        StaleLease: the lease is not current.
        CancellationRefused: no request, another request, another call already delivered, or
            the step is not a call of that kind.
    """
    conn = txn.conn
    task = await tasks.check_workflow_task_lease(conn, lease=lease)
    run = await runs.lock_run(conn, run_id=task.run_id)
    runs.require_running(run)
    recorded = await history.read_history(conn, run_id=run.run_id)
    request = recorded_request(recorded)
    if request is None:
        raise CancellationRefused(
            "cancellation_not_requested", f"run {run.run_id} has no cancellation request"
        )
    if request.workflow_command_id != target.request_id:
        raise CancellationRefused(
            "cancellation_request_mismatch",
            f"run {run.run_id} was asked to cancel by request {request.workflow_command_id}",
            request_id=target.request_id,
        )
    delivered = _delivery(request, target)
    for record in recorded:
        if isinstance(record.event, events.CooperativeCancellationDelivered):
            if record.event != delivered:  # a resend after a lost answer is the same delivery
                raise CancellationRefused(
                    "cancellation_already_delivered",
                    f"run {run.run_id} already took its cancellation at step"
                    f" {record.event.sequence}",
                    sequence=record.event.sequence,
                )
            return Delivery(run.run_id, delivered=True)
    waiting_for = await _stop_work(txn, run, recorded, target)
    if waiting_for is not None:
        return Delivery(run.run_id, delivered=False, waiting_for=waiting_for)
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        events=[NewEvent(delivered, _DELIVERED_KEY)],
        workflow_task_id=task.task_id,
    )
    await conn.execute(
        sa.update(s.runs).where(s.runs.c.run_id == run.run_id).values(last_event_seq=last)
    )
    return Delivery(run.run_id, delivered=True)


def _delivery(
    request: events.CooperativeCancellationRequested, target: DeliveryTarget
) -> events.CooperativeCancellationDelivered:
    return events.CooperativeCancellationDelivered(
        workflow_command_id=request.workflow_command_id,
        workflow_instance_id=request.workflow_instance_id,
        workflow_run_id=request.workflow_run_id,
        sequence=target.sequence,
        call_kind=target.call_kind,
        sequence_span=target.sequence_span,
        operation_sequence=target.operation_sequence,
        operation_sequence_span=target.operation_sequence_span,
    )


def _step_events(recorded: list[HistoryEvent], sequence: int) -> list[events.Event]:
    return [r.event for r in recorded if getattr(r.event, "sequence", None) == sequence]


async def _stop_work(
    txn: Txn[AsyncConnection], run: RunRow, recorded: list[HistoryEvent], target: DeliveryTarget
) -> str | None:
    """Apply the call's cancellation policy to what it waits for; what it must wait for yet."""
    if target.call_kind == "activity":
        return await _stop_activity(txn, run, _step_events(recorded, target.sequence), target)
    if target.call_kind == "child":
        return await _stop_child(txn, run, _step_events(recorded, target.sequence), target)
    if target.call_kind == "timer":
        step = _step_events(recorded, target.sequence)
        if not any(isinstance(e, events.TimerScheduled) for e in step):
            raise _not_a_call(run, target)
        t = s.timers.c
        await txn.conn.execute(
            sa.update(s.timers)
            .where(
                t.run_id == run.run_id,
                t.step_seq == target.sequence,
                t.state == TimerState.PENDING.value,
            )
            .values(state=TimerState.CANCELLED.value)
        )
    return None


def _not_a_call(run: RunRow, target: DeliveryTarget) -> CancellationRefused:
    return CancellationRefused(
        "cancellation_call_mismatch",
        f"step {target.sequence} of run {run.run_id} is no {target.call_kind} call",
        sequence=target.sequence,
        call_kind=target.call_kind,
    )


async def _stop_activity(
    txn: Txn[AsyncConnection], run: RunRow, step: list[events.Event], target: DeliveryTarget
) -> str | None:
    scheduled = next((e for e in step if isinstance(e, events.ActivityScheduled)), None)
    if scheduled is None or scheduled.execution_mode != "queued":
        raise _not_a_call(run, target)
    if any(isinstance(e, _ACTIVITY_CLOSED) for e in step):
        return None
    policy = getattr(scheduled.activity, "cancellation_policy", None) or "try_cancel"
    if policy == "abandon":
        return None
    still_running = await request_activity_stop(
        txn, run=run, step=target.sequence, record_close=False
    )
    if still_running and policy == "wait_cancellation_completed":
        return "activity"
    return None


async def request_activity_stop(
    txn: Txn[AsyncConnection], *, run: RunRow, step: int, record_close: bool
) -> bool | None:
    """Ask the activity of `step` to stop; True while an attempt of it still runs.

    None when the run has no queued activity at that step. A running attempt learns it at its
    next heartbeat (`cancel_requested`), and its close is recorded as `ActivityCancelled` when
    it reports the cancellation; one waiting to start (or to retry) is cancelled at once and
    never runs again, its `ActivityCancelled` queued for the run when `record_close`.
    """
    a = s.activity_tasks.c
    found = await txn.conn.execute(
        sa.select(a.state).where(a.run_id == run.run_id, a.step_seq == step)
    )
    if found.first() is None:
        return None
    waiting = (
        await txn.conn.execute(
            sa.update(s.activity_tasks)
            .where(a.run_id == run.run_id, a.step_seq == step, a.state == TaskState.READY.value)
            .values(state=TaskState.CANCELLED.value, cancel_requested=True)
            .returning(a.activity_execution_id, a.activity_attempt_id, a.activity_type, a.attempt)
        )
    ).first()
    if waiting is not None:
        if record_close:
            cancelled = events.ActivityCancelled(
                activity_execution_id=waiting.activity_execution_id,
                activity_attempt_id=str(waiting.activity_attempt_id),
                activity_type=waiting.activity_type,
                sequence=step,
                attempt_number=waiting.attempt,
                cancelled_at=(await txn.conn.execute(sa.select(sa.func.now()))).scalar_one(),
                message="cancelled before it started",
            )
            key = f"activity:{waiting.activity_execution_id}:closed"
            await runs.record_external_event(txn, run=run, event=NewEvent(cancelled, key))
        return False
    started = await txn.conn.execute(
        sa.update(s.activity_tasks)
        .where(a.run_id == run.run_id, a.step_seq == step, a.state == TaskState.LEASED.value)
        .values(cancel_requested=True)
        .returning(a.task_id)
    )
    return started.first() is not None


async def _stop_child(
    txn: Txn[AsyncConnection], run: RunRow, step: list[events.Event], target: DeliveryTarget
) -> str | None:
    scheduled = next((e for e in step if isinstance(e, events.ChildWorkflowScheduled)), None)
    if scheduled is None:
        raise _not_a_call(run, target)
    if any(isinstance(e, events.ChildClosed) for e in step):
        return None
    if scheduled.cancellation_policy == "abandon":
        return None
    child = await children.find_child(txn.conn, parent=run, step=target.sequence)
    if child is None:
        raise _not_a_call(run, target)
    reason = f"cancelled by its parent {run.workflow_id}"
    asked = await children.request_cancel(txn, child=child, reason=reason)
    if asked and scheduled.cancellation_policy == "wait_cancellation_completed":
        return "child"
    return None


# -- the activity side: a cooperative worker observes its attempt and acknowledges its stop -----

_ACTIVITY_STATUS = statement(
    f"""
    WITH {fragments.fence_probe("activity_tasks")}, held AS (
        SELECT cancel_requested, lease_expires_at, activity_execution_id
        FROM activity_tasks WHERE {fragments.LEASE_FENCE}{fragments.ATTEMPT_ID_FENCE}
    )
    SELECT held.*, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN held ON true
    """
)


@dataclass(frozen=True, slots=True)
class ActivityStatus:
    """A held attempt, observed without renewing anything.

    `request` is the run's cooperative request when the attempt was asked to stop because of
    it, and `delivery_event_id` names the history event that asked it: the delivery, or the
    request while the delivery waits for the activity to end.
    """

    run_id: str
    activity_execution_id: str
    cancel_requested: bool
    lease_expires_at: datetime
    request: events.CooperativeCancellationRequested | None = None
    delivery_event_id: str | None = None


def event_id(run_id: str, sequence: int) -> str:
    """A history event's id as the worker plane names it (its run and sequence)."""
    return f"{run_id}:{sequence}"


async def activity_status(conn: AsyncConnection, *, lease: Fence) -> ActivityStatus:
    """The attempt while `lease` holds it; StaleLease (saying why) otherwise."""
    row = await sql.one(conn, _ACTIVITY_STATUS, fragments.fence_params(lease, "activity"))
    if row.lease_expires_at is None:
        raise fragments.refused(row, lease, "activity")
    status = ActivityStatus(
        run_id=str(row.fence_run_id),
        activity_execution_id=row.activity_execution_id,
        cancel_requested=row.cancel_requested,
        lease_expires_at=row.lease_expires_at,
    )
    if not row.cancel_requested:
        return status
    recorded = await history.read_history(conn, run_id=status.run_id)
    # The delivery that asked it to stop, or (its policy waits for the activity) the request.
    marks = [
        r
        for r in recorded
        if isinstance(
            r.event,
            events.CooperativeCancellationDelivered | events.CooperativeCancellationRequested,
        )
    ]
    if not marks:
        return status
    return replace(
        status,
        request=recorded_request(recorded),
        delivery_event_id=event_id(status.run_id, marks[-1].sequence),
    )


async def acknowledge_activity_stop(
    txn: Txn[AsyncConnection], *, lease: Fence, request_id: str
) -> str:
    """Close the held attempt as cancelled: its worker stopped it as asked; the close's id.

    Raises:
        StaleLease: the lease is not current.
        CancellationRefused: the attempt was not asked to stop, or by another request.
    """
    status = await activity_status(txn.conn, lease=lease)
    if not status.cancel_requested:
        raise CancellationRefused(
            "activity_cancellation_not_requested",
            f"activity task {lease.task_id} was not asked to stop",
        )
    if status.request is not None and status.request.workflow_command_id != request_id:
        raise CancellationRefused(
            "cancellation_request_mismatch",
            f"activity task {lease.task_id} was asked to stop by another request",
            request_id=request_id,
        )
    failure = {
        "message": "activity cancelled",
        "exception_type": "ActivityCancelled",
        "non_retryable": True,
    }
    await activities.fail_activity(txn, lease=lease, failure=Failure.of(failure))
    # Its ActivityCancelled joins the run's inbox under this key (activities.fail_attempt).
    return f"{status.run_id}:activity:{status.activity_execution_id}:closed"


# -- the cleanup deadline: the repair pass closes a run whose cleanup outlived it ------------

BATCH = 500
_OPEN_WITH_CLEANUP = "status = 'running' AND cleanup_deadline_at IS NOT NULL"
_DUE = statement(
    f"""
    SELECT run_id, namespace,
           {marked(RepairStep.CLEANUP_DEADLINE, "runs.run_id::text")} AS marked
    FROM runs
    WHERE {_OPEN_WITH_CLEANUP} AND cleanup_deadline_at <= now()
      AND NOT {held_out(RepairStep.CLEANUP_DEADLINE, "runs.run_id::text")}
    ORDER BY cleanup_deadline_at
    LIMIT :limit
    """
)
# A run held out after a failure is left out: the loop would wake for it every pass until then.
_NEXT = statement(
    f"SELECT min(cleanup_deadline_at) FROM runs WHERE {_OPEN_WITH_CLEANUP}"
    f" AND NOT {held_out(RepairStep.CLEANUP_DEADLINE, 'runs.run_id::text')}"
)


async def next_cleanup_deadline_at(conn: sql.Conn) -> datetime | None:
    """When the earliest open run's cleanup deadline passes, or None."""
    due: datetime | None = await sql.scalar_one(conn, _NEXT)
    return due


async def cut_short_cleanups(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Close as cancelled the runs whose cleanup is past its deadline; how many."""
    candidates = await sql.fetch(txn.conn, _DUE, {"limit": BATCH})
    refs = [
        RowRef(key=str(c.run_id), namespace=c.namespace, run_id=str(c.run_id), marked=c.marked)
        for c in candidates
    ]

    async def close(batch: Sequence[RowRef]) -> int:
        return sum([await _cut_short(txn, ref.run_id) for ref in batch])

    return await each_row(txn, RepairStep.CLEANUP_DEADLINE, refs, close, tally or Tally())


async def _cut_short(txn: Txn[AsyncConnection], run_id: str) -> int:
    conn = txn.conn
    run = await runs.lock_run(conn, run_id=run_id)
    row = (
        await conn.execute(
            sa.select(s.runs.c.cleanup_deadline_at, sa.func.now()).where(s.runs.c.run_id == run_id)
        )
    ).one()
    deadline, now = row
    if run.status != RunStatus.RUNNING or deadline is None or deadline > now:
        return 0  # closed or moved on since it was selected
    message = f"cancellation cleanup of workflow {run.workflow_id} passed its deadline {deadline}"
    cancelled = events.WorkflowCancelled(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, message=message
    )
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        events=[NewEvent(cancelled, "workflow-closed")],
        workflow_task_id=None,
    )
    failure: JsonDict = {"message": message, "exception_type": "WorkflowCancelled"}
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(
            status=RunStatus.CANCELLED,
            last_event_seq=last,
            failure=failure,
            closed_at=sa.func.now(),
        )
    )
    await runs.close_open_work(conn, run_id=run.run_id)
    outcome = ready.RunOutcome(status=RunStatus.CANCELLED.value, failure=failure)
    txn.notify_run(
        run.namespace, run.run_id, ready.Change.CLOSED, outcome, notify_queue=run.notify_queue
    )
    await children.run_closed(txn, run, children.ClosedRun(RunStatus.CANCELLED, failure=failure))
    return 1
