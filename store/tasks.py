"""Workflow task completion: commands become events, follow-up tasks and run changes at once."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import claims, errors, history, ready, runs
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import ClaimedActivityTask, JsonDict, Lease, RunStatus, TaskState
from burrow.store.sql import statement

STEP_COMMANDS = frozenset(
    {"schedule_activity", "start_timer", "record_side_effect", "record_version_marker"}
)
TERMINAL_COMMANDS = frozenset(
    {"complete_workflow", "fail_workflow", "cancel_workflow", "continue_as_new"}
)
OTHER_COMMANDS = frozenset({"cancel_timer", "complete_update", "fail_update"})
DEFAULT_WORKFLOW_TASK_RETRY_SECONDS = 1.0
MAX_WORKFLOW_TASK_RETRY_SECONDS = 60.0


@dataclass(slots=True)
class CompletionOutcome:
    """What a completion made ready, so the caller can wake workers after commit."""

    activity_queues: list[str] = field(default_factory=list)
    workflow_task_created: bool = False
    timers_started: list[datetime] = field(default_factory=list)
    closed_status: RunStatus | None = None
    continued_run_id: str | None = None
    eager_activities: list[ClaimedActivityTask] = field(default_factory=list)


@dataclass(slots=True)
class _Apply:
    """Accumulates one completion's effects before they are written."""

    run: Any
    task_id: str
    now: datetime
    events: list[NewEvent] = field(default_factory=list)
    outcome: CompletionOutcome = field(default_factory=CompletionOutcome)
    run_values: dict[str, Any] = field(default_factory=dict)
    last_step: int = 0
    activity_rows: list[dict[str, Any]] = field(default_factory=list)
    timer_rows: list[dict[str, Any]] = field(default_factory=list)


def validate_commands(task_id: str, last_step: int, commands: Sequence[JsonDict]) -> None:
    """Refuse malformed batches before anything is written (PROTOCOL.md 7)."""
    expected = last_step
    for index, command in enumerate(commands):
        kind = command.get("type")
        if kind in STEP_COMMANDS:
            expected += 1
            if command.get("sequence") != expected:
                got = command.get("sequence")
                reason = f"command {index} ({kind}) has step {got}, expected {expected}"
                raise errors.InvalidCommands(task_id=task_id, reason=reason)
        elif kind in TERMINAL_COMMANDS:
            if index != len(commands) - 1:
                reason = f"terminal command {kind} must be last"
                raise errors.InvalidCommands(task_id=task_id, reason=reason)
        elif kind not in OTHER_COMMANDS:
            raise errors.InvalidCommands(task_id=task_id, reason=f"unknown command type {kind!r}")


_FENCE_AND_LOCK_RUN = statement(
    """
    WITH task AS (
        UPDATE workflow_tasks SET state = 'completed', lease_token = NULL, last_failure = NULL
        WHERE task_id = :task_id AND lease_token = :lease_token AND lease_owner = :lease_owner
          AND attempt = :attempt AND state = 'leased'
        RETURNING run_id
    )
    SELECT runs.*, now() AS now FROM runs JOIN task USING (run_id)
    FOR NO KEY UPDATE OF runs
    """
)

# Update the run; then either close its open work (it ended) or, when events wait in its inbox,
# create the next workflow task. One round trip.
_FINISH_COMPLETION = statement(
    """
    WITH run AS (
        UPDATE runs
        SET last_event_seq = :last_event_seq, last_step_seq = :last_step_seq,
            status = COALESCE(CAST(:status AS text), status),
            result = COALESCE(:result, result), failure = COALESCE(:failure, failure),
            continued_to_run_id = COALESCE(CAST(:continued_to AS uuid), continued_to_run_id),
            closed_at = CASE WHEN CAST(:status AS text) IS NULL THEN closed_at ELSE now() END
        WHERE run_id = :run_id
        RETURNING run_id, workflow_type, namespace, connection, task_queue, build_id
    ), next_task AS (
        INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection, queue,
                                    build_id)
        SELECT :new_task_id, run_id, workflow_type, namespace, connection, task_queue, build_id
        FROM run
        WHERE CAST(:status AS text) IS NULL AND EXISTS (
            SELECT 1 FROM inbox_events
            WHERE run_id = :run_id AND NOT applied AND wakes_workflow)
        ON CONFLICT (run_id) WHERE state IN ('ready', 'leased') DO NOTHING
        RETURNING task_id, namespace, connection, queue
    ), closed_tasks AS (
        UPDATE workflow_tasks SET state = 'cancelled', lease_token = NULL
        WHERE run_id = :run_id AND state IN ('ready', 'leased')
          AND CAST(:status AS text) IS NOT NULL
    ), closed_ready_activities AS (
        UPDATE activity_tasks SET state = 'cancelled', cancel_requested = true
        WHERE run_id = :run_id AND state = 'ready' AND CAST(:status AS text) IS NOT NULL
    ), cancelled_leased_activities AS (
        -- A leased attempt keeps its lease: its worker learns of the cancel by heartbeat.
        UPDATE activity_tasks SET cancel_requested = true
        WHERE run_id = :run_id AND state = 'leased' AND CAST(:status AS text) IS NOT NULL
    ), closed_timers AS (
        UPDATE timers SET state = 'cancelled'
        WHERE run_id = :run_id AND state = 'pending' AND CAST(:status AS text) IS NOT NULL
    )
    SELECT next_task.* FROM (SELECT 1) AS one LEFT JOIN next_task ON true
    """,
    json_params=["result", "failure"],
)

_INSERT_ACTIVITY = statement(
    """
    INSERT INTO activity_tasks (task_id, run_id, step_seq, activity_type, activity_execution_id,
        activity_attempt_id, namespace, connection, queue, arguments, retry_policy,
        schedule_to_start_seconds, start_to_close_seconds, schedule_to_close_seconds,
        heartbeat_seconds, schedule_to_close_deadline)
    VALUES (:task_id, :run_id, :step_seq, :activity_type, :activity_execution_id,
        :activity_attempt_id, :namespace, :connection, :queue, :arguments, :retry_policy,
        :schedule_to_start_seconds, :start_to_close_seconds, :schedule_to_close_seconds,
        :heartbeat_seconds, :schedule_to_close_deadline)
    """,
    json_params=["arguments", "retry_policy"],
)

_INSERT_TIMER = statement(
    """
    INSERT INTO timers (run_id, step_seq, namespace, fire_at, delay_seconds)
    VALUES (:run_id, :step_seq, :namespace, :fire_at, :delay_seconds)
    """
)


async def complete_workflow_task(
    conn: AsyncConnection,
    *,
    lease: Lease,
    commands: Sequence[JsonDict],
    eager: claims.EagerClaim | None = None,
) -> CompletionOutcome:
    """Apply a workflow task's commands in the caller's transaction (store invariant 3)."""
    run = (
        await conn.execute(
            _FENCE_AND_LOCK_RUN,
            {
                "task_id": lease.task_id,
                "lease_token": lease.lease_token,
                "lease_owner": lease.lease_owner,
                "attempt": lease.attempt,
            },
        )
    ).first()
    if run is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    validate_commands(lease.task_id, run.last_step_seq, commands)
    state = _Apply(run=run, task_id=lease.task_id, now=run.now, last_step=run.last_step_seq)
    for command in commands:
        await _APPLY[command["type"]](conn, state, command)
    if state.activity_rows:
        await conn.execute(_INSERT_ACTIVITY, state.activity_rows)
    if state.timer_rows:
        await conn.execute(_INSERT_TIMER, state.timer_rows)
    try:
        last = await history.append_events(
            conn,
            run_id=run.run_id,
            after_seq=run.last_event_seq,
            events=state.events,
            workflow_task_id=lease.task_id,
        )
    except ValueError as exc:
        raise errors.InvalidCommands(task_id=lease.task_id, reason=str(exc)) from exc
    values = state.run_values
    created = (
        await conn.execute(
            _FINISH_COMPLETION,
            {
                "run_id": run.run_id,
                "last_event_seq": last,
                "last_step_seq": state.last_step,
                "status": values.get("status"),
                "result": values.get("result"),
                "failure": values.get("failure"),
                "continued_to": values.get("continued_to_run_id"),
                "new_task_id": str(uuid.uuid4()),
            },
        )
    ).one()
    if eager is not None and state.activity_rows and state.outcome.closed_status is None:
        await _claim_eagerly(conn, state, eager)
    if created.task_id is not None:
        state.outcome.workflow_task_created = True
        ready.notify(
            created.namespace, created.connection, created.queue, "workflow", created.task_id
        )
    return state.outcome


async def _claim_eagerly(conn: AsyncConnection, state: _Apply, eager: claims.EagerClaim) -> None:
    ids = [r["task_id"] for r in state.activity_rows if r["queue"] == eager.flt.queue]
    if not ids:
        return
    claimed = await claims.claim_activity_tasks(
        conn,
        flt=eager.flt,
        worker_id=eager.worker_id,
        lease=eager.lease,
        limit=eager.limit,
        task_ids=ids[: eager.limit],
    )
    ready.retract({task.lease.task_id for task in claimed})
    state.outcome.eager_activities = claimed


async def fail_workflow_task(conn: AsyncConnection, *, lease: Lease, failure: JsonDict) -> datetime:
    """Hand the task back for a retry with backoff, recording why (visible in describe)."""
    w = s.workflow_tasks.c
    backoff = min(
        DEFAULT_WORKFLOW_TASK_RETRY_SECONDS * 2 ** (lease.attempt - 1),
        MAX_WORKFLOW_TASK_RETRY_SECONDS,
    )
    row = (
        await conn.execute(
            sa.update(s.workflow_tasks)
            .where(*claims.fenced(s.workflow_tasks, lease))
            .values(
                state=TaskState.READY,
                attempt=w.attempt + 1,
                lease_owner=None,
                lease_token=None,
                lease_expires_at=None,
                available_at=sa.func.now() + timedelta(seconds=backoff),
                last_failure=failure,
            )
            .returning(w.available_at, w.namespace, w.connection, w.queue)
        )
    ).first()
    if row is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    ready.notify(
        row.namespace, row.connection, row.queue, "workflow", lease.task_id, row.available_at
    )
    return row.available_at  # type: ignore[no-any-return]


async def _schedule_activity(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    seq = cmd["sequence"]
    st.last_step = seq
    execution_id = f"{st.run.run_id}:{seq}"
    attempt_id = str(uuid.uuid4())
    queue = cmd.get("queue") or st.run.task_queue
    s2close = cmd.get("schedule_to_close_timeout")
    task_id = str(uuid.uuid4())
    connection = cmd.get("connection") or st.run.connection
    st.activity_rows.append(
        {
            "task_id": task_id,
            "run_id": st.run.run_id,
            "step_seq": seq,
            "activity_type": cmd["activity_type"],
            "activity_execution_id": execution_id,
            "activity_attempt_id": attempt_id,
            "namespace": st.run.namespace,
            "connection": connection,
            "queue": queue,
            "arguments": cmd["arguments"],
            "retry_policy": cmd.get("retry_policy") or {},
            "schedule_to_start_seconds": cmd.get("schedule_to_start_timeout"),
            "start_to_close_seconds": cmd.get("start_to_close_timeout"),
            "schedule_to_close_seconds": s2close,
            "heartbeat_seconds": cmd.get("heartbeat_timeout"),
            "schedule_to_close_deadline": (
                None if s2close is None else st.now + timedelta(seconds=float(s2close))
            ),
        }
    )
    ready.notify(st.run.namespace, connection, queue, "activity", task_id)
    snapshot = {k: v for k, v in cmd.items() if k not in ("type", "sequence", "arguments")}
    st.events.append(
        NewEvent(
            "ActivityScheduled",
            {
                "activity_execution_id": execution_id,
                "activity_type": cmd["activity_type"],
                "sequence": seq,
                "execution_mode": "queued",
                "local_activity": False,
                "workflow_task_id": st.task_id,
                "activity": {**snapshot, "queue": queue, "arguments": cmd["arguments"]},
            },
            f"step:{seq}:scheduled",
        )
    )
    st.outcome.activity_queues.append(queue)


async def _start_timer(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    seq = cmd["sequence"]
    st.last_step = seq
    delay = float(cmd["delay_seconds"])
    fire_at = st.now + timedelta(seconds=delay)
    st.timer_rows.append(
        {
            "run_id": st.run.run_id,
            "step_seq": seq,
            "namespace": st.run.namespace,
            "fire_at": fire_at,
            "delay_seconds": delay,
        }
    )
    payload = {"timer_id": f"{st.run.run_id}:{seq}", "sequence": seq, "delay_seconds": delay}
    st.events.append(
        NewEvent("TimerScheduled", {**payload, "fire_at": fire_at.isoformat()}, f"step:{seq}:timer")
    )
    st.outcome.timers_started.append(fire_at)


async def _cancel_timer(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    seq = cmd["sequence"]
    started_now = [row for row in st.timer_rows if row["step_seq"] == seq]
    if started_now:
        # Started and cancelled in the same task: the timer row is never written.
        st.timer_rows.remove(started_now[0])
        delay = started_now[0]["delay_seconds"]
    else:
        t = s.timers.c
        cancelled = (
            await conn.execute(
                sa.update(s.timers)
                .where(t.run_id == st.run.run_id, t.step_seq == seq, t.state == "pending")
                .values(state="cancelled")
                .returning(t.delay_seconds)
            )
        ).first()
        if cancelled is None:
            return  # Already fired: the TimerFired event reaches the workflow, which ignores it.
        delay = cancelled.delay_seconds
    payload = {
        "timer_id": f"{st.run.run_id}:{seq}",
        "sequence": seq,
        "delay_seconds": delay,
        "cancelled_at": st.now.isoformat(),
    }
    st.events.append(NewEvent("TimerCancelled", payload, f"step:{seq}:timer-cancelled"))


async def _record_side_effect(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    seq = cmd["sequence"]
    st.last_step = seq
    payload = {"sequence": seq, "result": cmd["result"], "payload_codec": cmd.get("codec", "avro")}
    st.events.append(NewEvent("SideEffectRecorded", payload, f"step:{seq}:side-effect"))


async def _record_version_marker(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    seq = cmd["sequence"]
    st.last_step = seq
    payload = {
        "sequence": seq,
        "change_id": cmd["change_id"],
        "version": cmd["version"],
        "min_supported": cmd["min_supported"],
        "max_supported": cmd["max_supported"],
    }
    st.events.append(NewEvent("VersionMarkerRecorded", payload, f"step:{seq}:version"))


async def _finish_update(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    update_id = cmd["update_id"]
    failed = cmd["type"] == "fail_update"
    failure = None
    if failed:
        failure = {k: cmd.get(k) for k in ("message", "exception_type", "non_retryable")}
    u = s.updates.c
    await conn.execute(
        sa.update(s.updates)
        .where(u.run_id == st.run.run_id, u.update_id == update_id)
        .values(
            state="failed" if failed else "completed",
            result=None if failed else cmd["result"],
            failure=failure,
            completed_at=sa.func.now(),
        )
    )
    payload: JsonDict = {"update_id": update_id, "workflow_run_id": st.run.run_id}
    if failed:
        payload.update(failure or {})
    else:
        payload.update(result=cmd["result"]["blob"], payload_codec=cmd["result"]["codec"])
    st.events.append(NewEvent("UpdateCompleted", payload, f"update:{update_id}:completed"))


def _close(st: _Apply, status: RunStatus, **values: Any) -> None:
    st.run_values.update(status=str(status), **values)
    st.outcome.closed_status = status


async def _complete_workflow(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    result = cmd["result"]
    payload = {"output": result["blob"], "payload_codec": result["codec"]}
    st.events.append(NewEvent("WorkflowCompleted", payload, "workflow-closed"))
    _close(st, RunStatus.COMPLETED, result=result)


async def _fail_workflow(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    failure = {k: v for k, v in cmd.items() if k != "type"}
    payload = {
        "exception_type": cmd.get("exception_type"),
        "message": cmd.get("message"),
        "non_retryable": bool(cmd.get("non_retryable")),
        "failure_category": "application",
        "exception": {k: cmd[k] for k in ("details", "stack") if k in cmd},
    }
    st.events.append(NewEvent("WorkflowFailed", payload, "workflow-closed"))
    _close(st, RunStatus.FAILED, failure=failure)


async def _cancel_workflow(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    message = cmd.get("message") or "workflow cancelled"
    payload = {
        "workflow_instance_id": st.run.workflow_id,
        "workflow_run_id": st.run.run_id,
        "closed_reason": "cancelled",
        "message": message,
    }
    st.events.append(NewEvent("WorkflowCancelled", payload, "workflow-closed"))
    _close(
        st, RunStatus.CANCELLED, failure={"message": message, "exception_type": "WorkflowCancelled"}
    )


async def _continue_as_new(conn: AsyncConnection, st: _Apply, cmd: JsonDict) -> None:
    run = st.run
    # The old run must leave the open-id index before the new one takes its place.
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(status=RunStatus.CONTINUED_AS_NEW, closed_at=sa.func.now())
    )
    new_run = await runs.create_run(
        conn,
        namespace=run.namespace,
        workflow_id=run.workflow_id,
        workflow_type=cmd.get("workflow_type") or run.workflow_type,
        task_queue=cmd.get("queue") or run.task_queue,
        input=cmd["arguments"],
        connection=run.connection,
        build_id=run.build_id,
        continued_from_run_id=run.run_id,
    )
    payload = {"continued_to_run_id": new_run.run_id, "closed_reason": "continued"}
    st.events.append(NewEvent("WorkflowContinuedAsNew", payload, "workflow-closed"))
    _close(st, RunStatus.CONTINUED_AS_NEW, continued_to_run_id=new_run.run_id)
    st.outcome.continued_run_id = new_run.run_id
    st.outcome.workflow_task_created = True


_APPLY = {
    "schedule_activity": _schedule_activity,
    "start_timer": _start_timer,
    "cancel_timer": _cancel_timer,
    "record_side_effect": _record_side_effect,
    "record_version_marker": _record_version_marker,
    "complete_update": _finish_update,
    "fail_update": _finish_update,
    "complete_workflow": _complete_workflow,
    "fail_workflow": _fail_workflow,
    "cancel_workflow": _cancel_workflow,
    "continue_as_new": _continue_as_new,
}
