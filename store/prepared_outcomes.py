"""Prepared local activities: an attempt's close (`burrow.store.prepared_locals`).

`outcome` records what the worker reports, `recover` what a lost claim left open; a retry the
execution's policy allows releases the claim and makes the run's next workflow task.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events as ev
from burrow.protocol.activity_events import LocalRecovery, failure_fields
from burrow.protocol.shapes import (
    Failure,
    JsonDict,
    LocalActivitySpec,
)
from burrow.store import fragments, sql
from burrow.store.completion import transactional
from burrow.store.history import NewEvent
from burrow.store.models import HistoryEvent
from burrow.store.prepared_locals import (
    Attempt,
    Claim,
    Execution,
    Held,
    PreparedRefused,
    attempt_of,
    event_id,
    execution_of,
    hold,
    require_own,
    require_same,
    write,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

LOST_CALLBACK = "LocalActivityCallbackLost"
"""The exception type of a failure `recover` records."""

_NEXT_TASK = statement(
    """
    WITH created AS (
        {insert_task}
        WHERE run_id = :run_id AND status = 'running'
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    )
    SELECT * FROM created
    """.format(
        insert_task=fragments.insert_workflow_task(":task_id", "runs"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
    )
)
# A row the statement above inserted is not visible to another part of it: a second statement.
_DUE_AT = statement(
    "UPDATE workflow_tasks SET available_at = :available_at WHERE task_id = CAST(:task_id AS uuid)"
)
_OPEN_TASK = statement(
    "SELECT task_id FROM workflow_tasks WHERE run_id = :run_id AND state IN ('ready', 'leased')"
)

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
    execution: Execution, attempt: Attempt, failure: Failure, now: datetime
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


async def _close(
    txn: Txn[AsyncConnection],
    held: Held,
    claim: Claim,
    execution: Execution,
    attempt: Attempt,
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
        fields = {**failure_fields(failure), "local_recovery": recovery}
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
    written = await write(txn, held)
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
    txn: Txn[AsyncConnection], held: Held, claim: Claim, available_at: datetime
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
        due = {"task_id": str(row.task_id), "available_at": available_at}
        await sql.execute(txn.conn, _DUE_AT, due)
        txn.notify_workflow_task(row, available_at)
        return str(row.task_id)
    return str((await sql.one(txn.conn, _OPEN_TASK, {"run_id": held.run.run_id})).task_id)


def _closed_of(held: Held, attempt: Attempt, record: HistoryEvent) -> Closed:
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
    held = await hold(txn, claim, renew=False)
    execution, attempt = attempt_of(held, activity_attempt_id)
    require_own(held, claim, attempt)
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
    held = await hold(txn, claim, renew=False)
    execution = execution_of(held, sequence)
    if execution is None:
        raise PreparedRefused(
            "prepared_local_attempt_not_open",
            f"step {sequence} of run {held.run.run_id} is no prepared local activity",
            sequence=sequence,
        )
    require_same(execution, spec, sequence)
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
