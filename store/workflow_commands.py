"""The control plane's repair, archive and redrive of one workflow (PROTOCOL.md 17).

Each runs in the caller's transaction on the run it holds locked, and decides from what it reads
there: a refusal writes nothing. What an accepted command did is recorded in the run's history
under the command's id (`burrow.protocol.control_events`): `RepairRequested`; `ArchiveRequested`,
then `WorkflowArchived` the first time; `RedriveRequested` on the failed run. They have no
workflow task, so replay passes over them.

* Repair is the repair pass for one run: a workflow task whose lease ran out is handed back as its
  next attempt, a run left without the workflow task it needs gets one, and every ready task of
  the run is announced again (a lost wake costs no more than this call).
* Archive marks a closed run archived, with the reason given; archiving it again is answered as
  done (a blind resend must not fail).
* Redrive continues a failed run as a new run of its workflow id (the Durable Workflow
  package's `FailedRunRedrivePlan`): the new run's history holds the failed run's completed
  activity steps, so its workflow code gets their results again without running them, and its
  first workflow task schedules the step that failed anew. Only a history of activity steps that
  ends in the failure of its last step can be continued so; the refusal names what stood in the
  way. The failed run points at its continuation (`continued_to_run_id`), which makes a resent
  redrive find the run it made.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events as ev
from burrow.store import fragments, history, runs, sql, workflow_views
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import RunInfo, RunRow, RunStatus
from burrow.store.sql import statement
from burrow.store.transactions import Txn


@dataclass(frozen=True, slots=True)
class CommandOrigin:
    """Who asked: the command's id (answered to the caller) and the caller's `request_id`."""

    command_id: str
    request_id: str | None = None


def _recorded_as(origin: CommandOrigin, run: RunRow) -> dict[str, str | None]:
    return {
        "workflow_command_id": origin.command_id,
        "workflow_instance_id": run.workflow_id,
        "workflow_run_id": run.run_id,
        "request_id": origin.request_id,
    }


async def _record(conn: AsyncConnection, run: RunRow, *records: NewEvent) -> int:
    """Append the command's events to the held run; returns its new last sequence."""
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        events=records,
        workflow_task_id=None,
    )
    await conn.execute(
        sa.update(s.runs).where(s.runs.c.run_id == run.run_id).values(last_event_seq=last)
    )
    return last


class CommandRefused(Exception):
    """A control command refused: HTTP-neutral `reason` code; nothing was written."""

    def __init__(self, reason: str, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.run_id = run_id


# -- repair -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RepairOutcome:
    """What one run's repair did."""

    run_id: str
    leases_expired: int
    task_created: bool
    wakes_republished: int

    @property
    def dispatched(self) -> bool:
        """Whether anything was handed out again (`repair_dispatched`, else `repair_not_needed`)."""
        return bool(self.leases_expired or self.task_created or self.wakes_republished)


_LEASE_EXPIRED = {"exception_type": "LeaseExpired", "message": "workflow task lease expired"}
_EXPIRE_RUN_LEASE = statement(
    f"""
    UPDATE workflow_tasks SET {fragments.return_to_ready("now()")}
    WHERE run_id = :run_id AND state = 'leased' AND lease_expires_at < now()
    RETURNING task_id
    """,
    json_params=["last_failure"],
)
_NEEDS_TASK = statement(
    f"""
    SELECT NOT EXISTS (SELECT 1 FROM workflow_tasks
                       WHERE run_id = :run_id AND state IN ('ready', 'leased'))
       AND (NOT {workflow_views.PAST_START_SQL}
            OR EXISTS (SELECT 1 FROM inbox_events
                       WHERE run_id = :run_id AND NOT applied AND wakes_workflow)) AS needs
    FROM runs r WHERE r.run_id = :run_id
    """
)
_READY_WORKFLOW_TASKS = statement(
    f"""
    SELECT task_id, namespace, connection, queue, {fragments.sticky_owner()}
    FROM workflow_tasks WHERE run_id = :run_id AND state = 'ready' AND available_at <= now()
    """
)
_READY_ACTIVITY_TASKS = statement(
    """
    SELECT task_id, namespace, connection, queue FROM activity_tasks
    WHERE run_id = :run_id AND state = 'ready' AND available_at <= now()
    """
)


async def repair_run(
    txn: Txn[AsyncConnection], *, run: RunRow, origin: CommandOrigin
) -> RepairOutcome:
    """One run's repair pass (the caller holds the run), recorded as `RepairRequested`.

    A closed run is refused.
    """
    if run.status != RunStatus.RUNNING:
        raise CommandRefused(
            "run_not_active",
            f"run {run.run_id} of workflow {run.workflow_id} is {run.status.value}",
            run_id=run.run_id,
        )
    conn = txn.conn
    waited_on = (await workflow_views.run_place(conn, run_id=run.run_id)).wait_kind
    params = {"run_id": run.run_id, "last_failure": _LEASE_EXPIRED}
    expired = await sql.fetch(conn, _EXPIRE_RUN_LEASE, params)
    needs = await sql.one(conn, _NEEDS_TASK, {"run_id": run.run_id})
    made = await runs.ensure_workflow_task(txn, run=run) if needs.needs else None
    created = made is not None
    republished = 0
    if not created:  # a task ensure_workflow_task created is announced already
        for row in await sql.fetch(conn, _READY_WORKFLOW_TASKS, {"run_id": run.run_id}):
            txn.notify_workflow_task(row)
            republished += 1
    for row in await sql.fetch(conn, _READY_ACTIVITY_TASKS, {"run_id": run.run_id}):
        txn.notify(row.namespace, row.connection, row.queue, "activity", str(row.task_id))
        republished += 1
    done = RepairOutcome(run.run_id, len(expired), created, republished)
    handed_out = made or (str(expired[0].task_id) if expired else None)
    requested = ev.RepairRequested(
        **_recorded_as(origin, run),
        outcome="repair_dispatched" if done.dispatched else "repair_not_needed",
        wait_kind=waited_on,
        task_id=handed_out,
        task_type=None if handed_out is None else "workflow",
    )
    await _record(conn, run, NewEvent(requested, f"repair:{origin.command_id}"))
    return done


# -- archive ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveOutcome:
    """The archived run, when, why, and whether this call archived it."""

    run_id: str
    archived_at: datetime
    reason: str | None
    archived_now: bool


async def archive_run(
    txn: Txn[AsyncConnection], *, run: RunRow, reason: str | None, origin: CommandOrigin
) -> ArchiveOutcome:
    """Archive the closed run (the caller holds it); an open run is refused.

    Each accepted archive records `ArchiveRequested`; the one that archives the run records
    `WorkflowArchived` after it, with the reason it was given.
    """
    if run.status == RunStatus.RUNNING:
        raise CommandRefused(
            "run_not_closed",
            f"run {run.run_id} of workflow {run.workflow_id} is still running;"
            " only a closed run can be archived",
            run_id=run.run_id,
        )
    r = s.runs.c
    done = (
        await txn.conn.execute(
            sa.select(r.archived_at, r.archive_reason).where(r.run_id == run.run_id)
        )
    ).one()
    archived_now = done.archived_at is None
    requested = ev.ArchiveRequested(
        **_recorded_as(origin, run),
        outcome="archived" if archived_now else "archive_not_needed",
        reason=reason,
    )
    records = [NewEvent(requested, f"archive:{origin.command_id}")]
    if not archived_now:
        await _record(txn.conn, run, *records)
        return ArchiveOutcome(run.run_id, done.archived_at, done.archive_reason, False)
    archived = ev.WorkflowArchived(
        **_recorded_as(origin, run), archive_command_id=origin.command_id, reason=reason
    )
    await _record(txn.conn, run, *records, NewEvent(archived, "workflow-archived"))
    archived_at = (
        await txn.conn.execute(
            sa.update(s.runs)
            .where(r.run_id == run.run_id)
            .values(archived_at=sa.func.now(), archive_reason=reason)
            .returning(r.archived_at)
        )
    ).scalar_one()
    return ArchiveOutcome(run.run_id, archived_at, reason, True)


# -- redrive ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedrivePlan:
    """The failed run's completed steps before the step that failed, and that step."""

    resume_step: int
    reused: list[ev.HistoryEvent]


_STEP_EVENTS = (
    ev.ActivityScheduled,
    ev.ActivityStarted,
    ev.ActivityHeartbeatRecorded,
    ev.ActivityRetryScheduled,
    ev.ActivityCompleted,
    ev.ActivityFailed,
    ev.ActivityTimedOut,
)


def redrive_plan(run_id: str, events: Sequence[ev.HistoryEvent]) -> RedrivePlan:
    """The plan to continue the failed run; CommandRefused naming why it cannot be continued."""

    def refuse(reason: str, why: str) -> CommandRefused:
        return CommandRefused(reason, f"run {run_id} cannot be redriven: {why}", run_id=run_id)

    # What operators did to the closed run (archived it, redrove it) is no part of its steps.
    events = [r for r in events if not isinstance(r.event, ev.CONTROL_EVENTS)]

    if not events or not isinstance(events[0].event, ev.WorkflowStarted):
        raise refuse("missing_start", "its history does not begin with WorkflowStarted")
    if not isinstance(events[-1].event, ev.WorkflowFailed):
        raise refuse("missing_terminal_history", "its history does not end in WorkflowFailed")
    steps: dict[int, list[ev.HistoryEvent]] = {}
    for record in events[1:-1]:
        event = record.event
        if not isinstance(event, _STEP_EVENTS):
            raise refuse("unsupported_history", f"it recorded {event.event_type}")
        if getattr(event, "execution_mode", None) == "local" or getattr(
            event, "local_activity", False
        ):
            raise refuse("unsupported_local_activity", "it ran a local activity")
        steps.setdefault(event.sequence, []).append(record)
    if not steps:
        raise refuse("unrecorded_failure_boundary", "no activity step failed")
    boundary = max(steps)
    if sorted(steps) != list(range(1, boundary + 1)):
        raise refuse("activity_sequence_gap", "its activity steps are not numbered 1 to n")
    last = steps[boundary][-1].event
    if not isinstance(last, ev.ActivityFailed | ev.ActivityTimedOut):
        raise refuse("unrecorded_failure_boundary", f"its last step {boundary} did not fail")
    reused: list[ev.HistoryEvent] = []
    for step in range(1, boundary):
        kept = [
            r
            for r in steps[step]
            if isinstance(r.event, ev.ActivityScheduled | ev.ActivityCompleted)
        ]
        if [type(r.event) for r in kept] != [ev.ActivityScheduled, ev.ActivityCompleted]:
            raise refuse("incomplete_activity_prefix", f"its step {step} did not complete")
        reused += kept
    return RedrivePlan(boundary, reused)


@dataclass(frozen=True, slots=True)
class RedriveOutcome:
    """The run continuing the failed one; `created` False when an earlier redrive made it."""

    run: RunInfo
    continued_from_run_id: str
    resume_step: int | None
    created: bool


_DEADLINE_PASSED = statement(
    "SELECT CAST(:deadline AS timestamptz) IS NOT NULL"
    " AND CAST(:deadline AS timestamptz) <= now() AS passed"
)


async def redrive_run(
    txn: Txn[AsyncConnection], *, source: RunRow, origin: CommandOrigin
) -> RedriveOutcome:
    """Continue the failed `source` (the caller holds it) as a new run; see the module doc.

    The failed run records `RedriveRequested` naming the new run; a resend records nothing.
    """
    conn = txn.conn
    if source.continued_to_run_id is not None:
        made = await runs.lock_run(conn, run_id=source.continued_to_run_id)
        if made.retry_of_run_id is None and made.continued_from_run_id == source.run_id:
            # The source is closed, its history final: the plan that made the run reads the same.
            again = redrive_plan(
                source.run_id, await history.read_history(conn, run_id=source.run_id)
            )
            return RedriveOutcome(made.info(), source.run_id, again.resume_step, created=False)
    place = await workflow_views.run_place(conn, run_id=source.run_id)
    if not place.is_current_run:
        raise CommandRefused(
            "source_run_not_current",
            f"run {source.run_id} is not the current run of workflow {source.workflow_id}",
            run_id=source.run_id,
        )
    if source.status != RunStatus.FAILED:
        raise CommandRefused(
            "run_not_failed",
            f"run {source.run_id} is {source.status.value}; only a failed run can be redriven",
            run_id=source.run_id,
        )
    if source.parent_run_id is not None:
        raise CommandRefused(
            "unsupported_source_link_or_payload",
            f"run {source.run_id} is a child run; redrive its parent",
            run_id=source.run_id,
        )
    passed = await sql.one(conn, _DEADLINE_PASSED, {"deadline": source.execution_deadline_at})
    if passed.passed:
        raise CommandRefused(
            "execution_deadline_elapsed",
            f"the execution deadline of workflow {source.workflow_id} has passed",
            run_id=source.run_id,
        )
    plan = redrive_plan(source.run_id, await history.read_history(conn, run_id=source.run_id))
    made_info = await runs.create_run(
        txn,
        runs.NewRun(
            namespace=source.namespace,
            workflow_id=source.workflow_id,
            workflow_type=source.workflow_type,
            task_queue=source.task_queue,
            input=source.input,
            connection=source.connection,
            build_id=source.build_id,
            continued_from_run_id=source.run_id,
            notify_queue=source.notify_queue,
            run_id=str(uuid.uuid4()),
            workflow_definition_fingerprint=source.workflow_definition_fingerprint,
            **runs.chain_fields(source),
        ),
    )
    last = await history.append_events(
        conn,
        run_id=made_info.run_id,
        after_seq=made_info.last_event_seq,
        events=[NewEvent(r.event, f"redrive:{r.sequence}") for r in plan.reused],
        workflow_task_id=None,
    )
    r = s.runs.c
    await conn.execute(
        sa.update(s.runs)
        .where(r.run_id == made_info.run_id)
        .values(last_event_seq=last, last_step_seq=plan.resume_step - 1)
    )
    await conn.execute(
        sa.update(s.runs)
        .where(r.run_id == source.run_id)
        .values(continued_to_run_id=made_info.run_id)
    )
    requested = ev.RedriveRequested(
        **_recorded_as(origin, source),
        continued_to_run_id=made_info.run_id,
        resume_step_sequence=plan.resume_step,
    )
    await _record(conn, source, NewEvent(requested, "redrive-requested"))
    made = await runs.lock_run(conn, run_id=made_info.run_id)
    return RedriveOutcome(made.info(), source.run_id, plan.resume_step, created=True)
