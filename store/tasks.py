"""Workflow task completion: commands become events, follow-up tasks and run changes at once."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.protocol.shapes import ActivitySpec, ExceptionInfo
from burrow.store import claims, errors, fragments, history, ready, references, runs, sql
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import (
    ClaimedActivityTask,
    HeartbeatResult,
    JsonDict,
    Lease,
    RunPosition,
    RunRow,
    RunStatus,
)
from burrow.store.sql import statement

_SNAPSHOT_FIELDS = tuple(ActivitySpec.model_fields)  # what ActivityScheduled records

DEFAULT_WORKFLOW_TASK_RETRY_SECONDS = 1.0
MAX_WORKFLOW_TASK_RETRY_SECONDS = 60.0


@dataclass(slots=True)
class CompletionOutcome:
    """What a completion did, for its caller (who hears of ready work is decided by notices).

    The caller starts the activities leased to it eagerly and wakes its repair loop for the
    timers started; `workflow_task_created` and the closing fields are for diagnostics and tests.
    """

    workflow_task_created: bool = False
    timers_started: list[datetime] = field(default_factory=list)
    closed_status: RunStatus | None = None
    continued_run_id: str | None = None
    eager_activities: list[ClaimedActivityTask] = field(default_factory=list)
    last_event_seq: int = 0
    """The run's last history sequence once the completion's events are written."""
    last_step_seq: int = 0
    """The run's last step once the completion's commands are written."""


class _ActivityRow(TypedDict):
    """One scheduled activity: the parameters of _INSERT_ACTIVITY."""

    task_id: str
    run_id: str
    step_seq: int
    activity_type: str
    activity_execution_id: str
    activity_attempt_id: str
    namespace: str
    connection: str
    queue: str
    arguments: JsonDict
    retry_policy: JsonDict
    schedule_to_start_seconds: float | None
    start_to_close_seconds: float | None
    schedule_to_close_seconds: float | None
    heartbeat_seconds: float | None
    schedule_to_close_deadline: datetime | None
    session_id: str | None
    worker_session: JsonDict | None


class _TimerRow(TypedDict):
    """One started timer: the parameters of _INSERT_TIMER."""

    run_id: str
    step_seq: int
    namespace: str
    fire_at: datetime
    delay_seconds: float


@dataclass(frozen=True, slots=True)
class _Closed:
    """How a completion closes its run: the columns _FINISH_COMPLETION sets."""

    status: RunStatus
    result: JsonDict | None = None
    failure: JsonDict | None = None
    continued_to_run_id: str | None = None


@dataclass(slots=True)
class _Apply:
    """Accumulates one completion's effects before they are written."""

    run: RunRow
    task_id: str
    now: datetime
    events: list[NewEvent] = field(default_factory=list)
    outcome: CompletionOutcome = field(default_factory=CompletionOutcome)
    closed: _Closed | None = None
    last_step: int = 0
    activity_rows: list[_ActivityRow] = field(default_factory=list)
    timer_rows: list[_TimerRow] = field(default_factory=list)
    update_task: bool = False


def parse_commands(task_id: str, commands: Sequence[cmd.Command | JsonDict]) -> list[cmd.Command]:
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


_FENCE_AND_LOCK_RUN = statement(
    f"""
    WITH task AS (
        UPDATE workflow_tasks SET state = 'completed', lease_token = NULL, last_failure = NULL
        WHERE {fragments.LEASE_FENCE}
        RETURNING run_id
    )
    SELECT runs.*, now() AS now FROM runs JOIN task USING (run_id)
    FOR NO KEY UPDATE OF runs
    """
)


def finish_ctes(
    *,
    run_where: str,
    close_when: str,
    except_task: str = "NULL",
    follow_up: str = "false",
    last_event_seq: str = ":last_event_seq",
    except_activity: str = "NULL",
) -> str:
    """The last CTEs (no leading WITH) of the completion statements.

    They update the run (its last event `last_event_seq`, SQL), then create its next workflow
    task or close its open work (but for `except_task` and `except_activity`: close_open_work).
    """
    return """
    run AS (
        UPDATE runs
        SET last_event_seq = {last_event_seq}, last_step_seq = :last_step_seq,
            status = COALESCE(CAST(:status AS text), status),
            result = COALESCE(:result, result), failure = COALESCE(:failure, failure),
            continued_to_run_id = COALESCE(CAST(:continued_to AS uuid), continued_to_run_id),
            closed_at = CASE WHEN CAST(:status AS text) IS NULL THEN closed_at ELSE now() END,
            -- S4: an open run stays bound to the worker that keeps it warm, or to nobody.
            sticky_worker_id = CASE WHEN CAST(:status AS text) IS NULL
                AND CAST(:sticky_ttl AS float8) IS NOT NULL THEN :sticky_owner END,
            sticky_until = CASE WHEN CAST(:status AS text) IS NULL
                AND CAST(:sticky_ttl AS float8) IS NOT NULL
                THEN now() + make_interval(secs => :sticky_ttl) END
        WHERE {run_where}
        RETURNING run_id, workflow_type, namespace, connection, task_queue, build_id,
                  sticky_worker_id, sticky_until
    ), next_task AS (
        {insert_task}
        WHERE CAST(:status AS text) IS NULL AND (CAST(:follow_up AS boolean) OR {follow_up}
            OR EXISTS (SELECT 1 FROM inbox_events
                       WHERE run_id = :run_id AND NOT applied AND wakes_workflow))
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    ), {close_open_work}""".format(
        run_where=run_where,
        follow_up=follow_up,
        last_event_seq=last_event_seq,
        insert_task=fragments.insert_workflow_task(":new_task_id", "run"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
        close_open_work=fragments.close_open_work(
            ":run_id", close_when, except_task, except_activity
        ),
    )


# Append the task's events and update the run; then either close its open work (it ended) or,
# when events wait in its inbox (or an update task asks for a follow-up), create the next
# workflow task. One round trip.
_FINISH_COMPLETION = statement(
    """
    WITH {appended}, {finish}
    SELECT next_task.*, (SELECT count(*) FROM appended) AS appended
    FROM (SELECT 1) AS one LEFT JOIN next_task ON true
    """.format(
        appended=history.APPENDED_CTE,
        finish=finish_ctes(
            run_where="run_id = :run_id", close_when="CAST(:status AS text) IS NOT NULL"
        ),
    ),
    json_params=["result", "failure"],
)


def written_work_ctes(gate: str, first_seq: str) -> str:
    """CTEs (no leading WITH) that write a completion's events, activities and timers.

    Each writes only for the run in CTE `gate`, so a gate that selects nothing writes nothing.
    Events are numbered after `first_seq` (SQL) and belong to workflow task `:workflow_task_id`
    (`history.append_params`); the attempts named by `:eager_ids` are leased to the completing
    worker as they are written, as its claim would lease them (eager dispatch, no claim). The
    caller's last SELECT reports those leases with `EAGER_LEASES`.
    """
    return """
    appended AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id)
        SELECT {gate}.run_id, {first_seq} + e.ord, e.event_type, e.payload, e.idempotency_key,
               CAST(:workflow_task_id AS uuid)
        FROM {gate}, unnest(CAST(:event_types AS text[]),
                            CAST(CAST(:payloads AS text[]) AS jsonb[]), CAST(:keys AS text[]))
             WITH ORDINALITY AS e(event_type, payload, idempotency_key, ord)
        RETURNING sequence
    ), activities AS (
        INSERT INTO activity_tasks ({activity_columns}, state, lease_owner, lease_token,
                                    lease_expires_at, started_at, claimed_at)
        SELECT {activity_values},
               CASE WHEN a.eager THEN 'leased' ELSE 'ready' END,
               CASE WHEN a.eager THEN CAST(:eager_owner AS text) END,
               CASE WHEN a.eager THEN gen_random_uuid() END,
               CASE WHEN a.eager THEN now() + make_interval(secs => :eager_lease_seconds) END,
               CASE WHEN a.eager THEN now() END,
               CASE WHEN a.eager THEN clock_timestamp() END
        FROM {gate}, (
            SELECT r.*, r.task_id = ANY(CAST(CAST(:eager_ids AS text[]) AS uuid[])) AS eager
            FROM jsonb_to_recordset(CAST(:activities AS jsonb)) AS r(
                task_id uuid, run_id uuid, step_seq int, activity_type text,
                activity_execution_id text, activity_attempt_id uuid, namespace text,
                connection text, queue text, arguments jsonb, retry_policy jsonb,
                schedule_to_start_seconds float8, start_to_close_seconds float8,
                schedule_to_close_seconds float8, heartbeat_seconds float8,
                schedule_to_close_deadline timestamptz, session_id text, worker_session jsonb)
        ) AS a
        RETURNING task_id, run_id, state, lease_token, lease_expires_at, scheduled_at, attempt,
                  activity_execution_id, activity_attempt_id, activity_type, step_seq
    ), started AS (
        INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key, wakes_workflow)
        SELECT claimed.run_id, '{started_type}', {started},
               {started_key}, false
        FROM activities AS claimed WHERE claimed.state = 'leased'
        ON CONFLICT (run_id, idempotency_key) DO NOTHING
    ), timers AS (
        INSERT INTO timers ({timer_columns})
        SELECT t.* FROM {gate}, jsonb_to_recordset(CAST(:timers AS jsonb)) AS t(
            run_id uuid, step_seq int, namespace text, fire_at timestamptz, delay_seconds float8)
    )""".format(
        gate=gate,
        first_seq=first_seq,
        activity_columns=", ".join(_ActivityRow.__annotations__),
        activity_values=", ".join(f"a.{column}" for column in _ActivityRow.__annotations__),
        started_type=events.ActivityStarted.event_type,
        started=claims.ACTIVITY_STARTED,
        started_key=claims.ACTIVITY_STARTED_KEY,
        timer_columns=", ".join(_TimerRow.__annotations__),
    )


EAGER_LEASES = """(SELECT jsonb_agg(jsonb_build_object(
                'task_id', task_id, 'lease_token', lease_token,
                'lease_expires_at', lease_expires_at, 'scheduled_at', scheduled_at))
            FROM activities WHERE state = 'leased') AS eager"""
"""The last SELECT's column of the attempts `written_work_ctes` leased (`leased_attempts`)."""


# The completion of a task whose run is where its claim left it (RunPosition), in ONE statement
# outside a transaction block: the run is locked only if it is still at that position, the
# lease fenced only then, and every write below depends on the fence, so a stale lease or a
# moved run writes nothing (the caller then takes the transactional path, which says why).
# Without ON CONFLICT: an event already recorded fails the whole statement the same way. The
# statement's snapshot may predate an event that another transaction put in the run's inbox
# while this one waited for the run's lock: that transaction flagged the task (follow_up), and
# the fence's update reads the flag from the task row as it is now.
_COMPLETE_AT_POSITION = statement(
    """
    WITH position AS (
        SELECT run_id FROM runs
        WHERE run_id = :run_id AND status = 'running'
          AND last_event_seq = :after_seq AND last_step_seq = :after_step
        FOR NO KEY UPDATE
    ), fenced AS (
        UPDATE workflow_tasks SET state = 'completed', lease_token = NULL, last_failure = NULL
        WHERE {lease_fence} AND run_id IN (SELECT run_id FROM position)
        RETURNING run_id, follow_up  -- as the last event written meanwhile left it
    ), {work}, {finish}
    SELECT (SELECT count(*) FROM fenced) AS fenced, next_task.*, {eager_leases}
    FROM (SELECT 1) AS one LEFT JOIN next_task ON true
    """.format(
        lease_fence=fragments.LEASE_FENCE,
        work=written_work_ctes("fenced", ":after_seq"),
        eager_leases=EAGER_LEASES,
        finish=finish_ctes(
            run_where="run_id IN (SELECT run_id FROM fenced)",
            close_when="CAST(:status AS text) IS NOT NULL AND EXISTS (SELECT 1 FROM fenced)",
            except_task="CAST(:task_id AS uuid)",
            follow_up="coalesce((SELECT bool_or(follow_up) FROM fenced), false)",
        ),
    ),
    json_params=["result", "failure"],
)

_INSERT_ACTIVITY = statement(
    """
    INSERT INTO activity_tasks (task_id, run_id, step_seq, activity_type, activity_execution_id,
        activity_attempt_id, namespace, connection, queue, arguments, retry_policy,
        schedule_to_start_seconds, start_to_close_seconds, schedule_to_close_seconds,
        heartbeat_seconds, schedule_to_close_deadline, session_id, worker_session)
    VALUES (:task_id, :run_id, :step_seq, :activity_type, :activity_execution_id,
        :activity_attempt_id, :namespace, :connection, :queue, :arguments, :retry_policy,
        :schedule_to_start_seconds, :start_to_close_seconds, :schedule_to_close_seconds,
        :heartbeat_seconds, :schedule_to_close_deadline, :session_id, :worker_session)
    """,
    json_params=["arguments", "retry_policy", "worker_session"],
)

_INSERT_TIMER = statement(
    """
    INSERT INTO timers (run_id, step_seq, namespace, fire_at, delay_seconds)
    VALUES (:run_id, :step_seq, :namespace, :fire_at, :delay_seconds)
    """
)


_FAIL_WORKFLOW_TASK = statement(
    f"""
    UPDATE workflow_tasks SET {fragments.return_to_ready("now() + CAST(:backoff AS interval)")}
    WHERE {fragments.LEASE_FENCE}
    RETURNING task_id, available_at, namespace, connection, queue, {fragments.sticky_owner()}
    """,
    json_params=["last_failure"],
)


async def complete_workflow_task(
    conn: AsyncConnection,
    *,
    lease: Lease,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
    update_task: bool = False,
) -> CompletionOutcome:
    """Apply a workflow task's commands in the caller's transaction (store invariant 3).

    With `sticky_ttl`, the run is bound to the lease owner until then, and the workflow task it
    makes next inherits the binding (S4). With `update_task`, the task ran accepted updates on
    their own (an SDK worker, PROTOCOL.md 5.1): each completed one records `UpdateApplied`, so
    replay runs its handler at this point again, and the run gets a follow-up workflow task in
    which its code goes on with the update's effects.
    """
    locked = await sql.first(conn, _FENCE_AND_LOCK_RUN, fragments.fence_params(lease))
    if locked is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    run = runs.run_row(locked)
    steps = number_steps(lease.task_id, run.last_step_seq, commands)
    state = _Apply(
        run=run,
        task_id=lease.task_id,
        now=locked.now,
        last_step=run.last_step_seq,
        update_task=update_task,
    )
    for step, command in zip(steps, commands, strict=True):
        await _apply(conn, state, command, step)
    if state.activity_rows:
        await sql.executemany(conn, _INSERT_ACTIVITY, state.activity_rows)
    if state.timer_rows:
        await sql.executemany(conn, _INSERT_TIMER, state.timer_rows)
    last = run.last_event_seq + len(state.events)
    params = finish_params(state, lease.lease_owner, sticky_ttl, follow_up=update_task)
    created = await sql.one(conn, _FINISH_COMPLETION, params)
    try:
        history.check_appended(run.run_id, run.last_event_seq, state.events, created.appended)
    except ValueError as exc:  # raised before commit: the whole completion rolls back
        raise errors.InvalidCommands(task_id=lease.task_id, reason=str(exc)) from exc
    return await _finished(conn, state, eager, last, created)


class NotAtPosition(Exception):
    """The completion could not be written at the claimed position; nothing was written.

    A stale lease, a run that moved, or an event already recorded: the transactional path
    decides what to report.
    """


# Commands whose effects need statements of their own (reads, other rows): never folded.
_UNFOLDED = (cmd.CancelTimer, cmd.CompleteUpdate, cmd.FailUpdate, cmd.SkipSignal, cmd.ContinueAsNew)


def _transactional(conn: sql.Conn) -> AsyncConnection:
    """The connection of the transactional path, which alone runs more than one statement.

    Raises:
        NotAtPosition: `conn` is a single statement's (`complete_at_position`): nothing was
            written, and the transactional path does the work.
    """
    if isinstance(conn, AsyncConnection):
        return conn
    raise NotAtPosition


def foldable(commands: Sequence[cmd.Command]) -> bool:
    """Whether `complete_at_position` can write these commands in one statement."""
    return not any(isinstance(command, _UNFOLDED) for command in commands)


async def complete_at_position(
    conn: sql.Conn,
    *,
    lease: Lease,
    position: RunPosition,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
) -> CompletionOutcome:
    """`complete_workflow_task` for a run still where its claim left it, in ONE statement.

    Store invariant 3 holds because the statement is atomic: it needs no transaction block of
    its own. With `eager`, the activities it schedules that the caller's claim would take are
    written leased to it (session attempts need admission: the transactional path claims them).

    Raises:
        NotAtPosition: nothing was written; `complete_workflow_task` says why.
    """
    run = position.run
    elapsed = timedelta(seconds=max(time.monotonic() - position.claimed_monotonic, 0.0))
    state, leased = await plan_at_position(
        conn,
        task_id=lease.task_id,
        run=run,
        now=position.claimed_at + elapsed,
        commands=commands,
        eager=eager,
    )
    params = {
        **finish_params(state, lease.lease_owner, sticky_ttl, follow_up=False),
        **fragments.fence_params(lease),
        **work_params(state, leased, eager),
    }
    row = await written_at_position(conn, _COMPLETE_AT_POSITION, params)
    return await finished_at_position(conn, state, leased, eager, row)


async def written_at_position(
    conn: sql.Conn, stmt: sql.Statement, params: dict[str, object]
) -> sql.Row:
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


async def plan_at_position(
    conn: sql.Conn,
    *,
    task_id: str,
    run: RunRow,
    now: datetime,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None,
) -> tuple[_Apply, list[_ActivityRow]]:
    """The effects of `commands` on `run` as one statement writes them, and its eager attempts.

    Raises:
        NotAtPosition: they need the transactional path (`foldable` commands only reach here).
    """
    steps = number_steps(task_id, run.last_step_seq, commands)
    state = _Apply(run=run, task_id=task_id, now=now, last_step=run.last_step_seq)
    for step, command in zip(steps, commands, strict=True):
        await _apply(conn, state, command, step)
    if state.closed is not None and (state.activity_rows or state.timer_rows):
        # Work started by the task that closes the run is cancelled with it: written by the
        # transactional path, whose statements run in order.
        raise NotAtPosition
    return state, _eagerly_leased(state, eager)


def work_params(
    state: _Apply, leased: list[_ActivityRow], eager: claims.EagerClaim | None
) -> dict[str, object]:
    """The parameters of `written_work_ctes` beyond the append's (`finish_params`)."""
    return {
        "after_step": state.run.last_step_seq,
        "activities": json.dumps(state.activity_rows, default=datetime.isoformat),
        "timers": json.dumps(state.timer_rows, default=datetime.isoformat),
        "eager_ids": [row["task_id"] for row in leased],
        "eager_owner": None if eager is None else eager.worker_id,
        "eager_lease_seconds": None if eager is None else eager.lease.total_seconds(),
    }


async def finished_at_position(
    conn: sql.Conn,
    state: _Apply,
    leased: list[_ActivityRow],
    eager: claims.EagerClaim | None,
    row: sql.Row,
    *,
    last_event_seq: int | None = None,
) -> CompletionOutcome:
    """The outcome of a one-statement completion that wrote (`row`: its last SELECT)."""
    if leased:
        state.outcome.eager_activities = _leased_attempts(leased, row.eager, eager, state.run)
        ready.retract({row["task_id"] for row in leased})
    if last_event_seq is None:
        last_event_seq = state.run.last_event_seq + len(state.events)
    return await _finished(conn, state, None, last_event_seq, row)


def _eagerly_leased(state: _Apply, eager: claims.EagerClaim | None) -> list[_ActivityRow]:
    """The attempts `complete_at_position` leases to the caller as it writes them.

    Raises:
        NotAtPosition: a session attempt is among them (W6: it needs admission first).
    """
    wanted = _eager_candidates(state, eager)
    if any(row["session_id"] is not None for row in wanted):
        raise NotAtPosition
    return wanted


def _eager_candidates(state: _Apply, eager: claims.EagerClaim | None) -> list[_ActivityRow]:
    """The scheduled attempts an eager claim may take: on its queue, of its types, to its limit.

    None when the task closes its run: its work is cancelled with it.
    """
    if eager is None or state.closed is not None:
        return []
    flt = eager.flt
    wanted = [
        row
        for row in state.activity_rows
        if row["queue"] == flt.queue
        and row["namespace"] == flt.namespace
        and row["connection"] == flt.connection
        and row["activity_type"] in flt.types
    ]
    return wanted[: eager.limit]


def _leased_attempts(
    rows: list[_ActivityRow],
    leases: list[JsonDict],
    eager: claims.EagerClaim | None,
    run: RunRow,
) -> list[ClaimedActivityTask]:
    """The attempts the completion leased, as a claim of them returns them."""
    assert eager is not None
    by_id = {lease["task_id"]: lease for lease in leases}
    attempts = []
    for row in rows:
        written = by_id[row["task_id"]]
        attempts.append(
            ClaimedActivityTask(
                lease=Lease(
                    task_id=row["task_id"],
                    run_id=row["run_id"],
                    lease_token=written["lease_token"],
                    lease_owner=eager.worker_id,
                    attempt=1,
                    lease_expires_at=datetime.fromisoformat(written["lease_expires_at"]),
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
                arguments=row["arguments"],
                heartbeat_details=None,
                heartbeat_seconds=row["heartbeat_seconds"],
                start_to_close_seconds=row["start_to_close_seconds"],
                scheduled_at=datetime.fromisoformat(written["scheduled_at"]),
                schedule_to_close_deadline=row["schedule_to_close_deadline"],
            )
        )
    return attempts


async def _finished(
    conn: sql.Conn,
    state: _Apply,
    eager: claims.EagerClaim | None,
    last: int,
    written: sql.AnyRow,
) -> CompletionOutcome:
    """The outcome once a completion's statement is written: eager activities, the next task."""
    state.outcome.last_event_seq = last
    state.outcome.last_step_seq = state.last_step
    if eager is not None:
        await _claim_eagerly(_transactional(conn), state, eager)
    if written.task_id is not None:
        state.outcome.workflow_task_created = True
        ready.notify_workflow_task(written)
    return state.outcome


def finish_params(
    state: _Apply, owner: str, sticky_ttl: timedelta | None, *, follow_up: bool
) -> dict[str, object]:
    """The parameters of the events' append and of `finish_ctes`, shared by the statements.

    `owner` is the worker that ran the task: the run stays bound to it for `sticky_ttl` (S4).
    """
    run = state.run
    return {
        **history.append_params(
            run_id=run.run_id,
            after_seq=run.last_event_seq,
            events=state.events,
            workflow_task_id=state.task_id,
        ),
        "last_event_seq": run.last_event_seq + len(state.events),
        "last_step_seq": state.last_step,
        "new_task_id": str(uuid.uuid4()),
        "sticky_owner": owner,
        "sticky_ttl": None if sticky_ttl is None else sticky_ttl.total_seconds(),
        "follow_up": follow_up,
        **_closing_params(state.closed),
    }


def _closing_params(closed: _Closed | None) -> dict[str, object]:
    if closed is None:  # the run stays open: every column keeps its value
        return {"status": None, "result": None, "failure": None, "continued_to": None}
    return {
        "status": closed.status.value,
        "result": closed.result,
        "failure": closed.failure,
        "continued_to": closed.continued_to_run_id,
    }


async def _claim_eagerly(conn: AsyncConnection, state: _Apply, eager: claims.EagerClaim) -> None:
    ids = [row["task_id"] for row in _eager_candidates(state, eager)]
    if not ids:
        return
    claimed = await claims.claim_activity_tasks(
        conn,
        flt=eager.flt,
        worker_id=eager.worker_id,
        lease=eager.lease,
        limit=eager.limit,
        task_ids=ids,
    )
    ready.retract({task.lease.task_id for task in claimed})
    state.outcome.eager_activities = claimed


# A3: a local activity's heartbeat renews the lease of the workflow task running it, and learns
# whether the run was asked to cancel meanwhile.
_HEARTBEAT_WORKFLOW_TASK = statement(
    f"""
    WITH task AS (
        UPDATE workflow_tasks
        SET lease_expires_at = now() + CAST(:lease_duration AS interval)
        WHERE {fragments.LEASE_FENCE}
        RETURNING run_id, lease_expires_at
    )
    SELECT task.lease_expires_at, runs.cancel_requested FROM task JOIN runs USING (run_id)
    """
)


async def heartbeat_workflow_task(
    conn: AsyncConnection, *, lease: Lease, lease_duration: timedelta
) -> HeartbeatResult:
    """Renew a held workflow task lease; StaleLease when it is no longer current."""
    params = {**fragments.fence_params(lease), "lease_duration": lease_duration}
    row = await sql.first(conn, _HEARTBEAT_WORKFLOW_TASK, params)
    if row is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    return HeartbeatResult(
        cancel_requested=row.cancel_requested, lease_expires_at=row.lease_expires_at
    )


async def fail_workflow_task(conn: AsyncConnection, *, lease: Lease, failure: JsonDict) -> datetime:
    """Hand the task back for a retry with backoff, recording why (visible in describe)."""
    backoff = min(
        DEFAULT_WORKFLOW_TASK_RETRY_SECONDS * 2 ** (lease.attempt - 1),
        MAX_WORKFLOW_TASK_RETRY_SECONDS,
    )
    params = {
        **fragments.fence_params(lease),
        "backoff": timedelta(seconds=backoff),
        "last_failure": failure,
    }
    row = await sql.first(conn, _FAIL_WORKFLOW_TASK, params)
    if row is None:
        raise errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    available_at: datetime = row.available_at
    ready.notify_workflow_task(row, available_at)
    return available_at


async def _apply(conn: sql.Conn, st: _Apply, command: cmd.Command, step: int) -> None:
    """One command's effects (a flat dispatcher: each case is one concept)."""
    match command:
        case cmd.ScheduleActivity():
            _schedule_activity(st, command, step)
        case cmd.RecordLocalActivity():
            _record_local_activity(st, command, step)
        case cmd.StartTimer():
            _start_timer(st, command, step)
        case cmd.CancelTimer():
            await _cancel_timer(_transactional(conn), st, command)
        case cmd.RecordSideEffect():
            st.last_step = step
            effect = events.SideEffectRecorded(
                sequence=step, result=command.result, payload_codec=command.codec
            )
            st.events.append(NewEvent(effect, f"step:{step}:side-effect"))
        case cmd.RecordVersionMarker():
            st.last_step = step
            marker = events.VersionMarkerRecorded(
                sequence=step,
                change_id=command.change_id,
                version=command.version,
                min_supported=command.min_supported,
                max_supported=command.max_supported,
            )
            st.events.append(NewEvent(marker, f"step:{step}:version"))
        case cmd.CompleteUpdate() | cmd.FailUpdate():
            await _finish_update(_transactional(conn), st, command)
        case cmd.SkipSignal():
            await _skip_signal(_transactional(conn), st, command)
        case cmd.CompleteWorkflow():
            completed = events.WorkflowCompleted(
                output=command.result["blob"], payload_codec=command.result["codec"]
            )
            st.events.append(NewEvent(completed, "workflow-closed"))
            _close(st, _Closed(RunStatus.COMPLETED, result=dict(command.result)))
        case cmd.FailWorkflow():
            _fail_workflow(st, command)
        case cmd.CancelWorkflow():
            _cancel_workflow(st, command)
        case cmd.ContinueAsNew():
            await _continue_as_new(_transactional(conn), st, command)


def _schedule_activity(st: _Apply, command: cmd.ScheduleActivity, step: int) -> None:
    st.last_step = step
    execution_id = f"{st.run.run_id}:{step}"
    task_id = str(uuid.uuid4())
    s2close = command.schedule_to_close_timeout
    session = command.worker_session  # W4: admission reads the snapshot at claim time
    connection = (session.connection if session else None) or st.run.connection
    st.activity_rows.append(
        {
            "task_id": task_id,
            "run_id": st.run.run_id,
            "step_seq": step,
            "activity_type": command.activity_type,
            "activity_execution_id": execution_id,
            "activity_attempt_id": str(uuid.uuid4()),
            "namespace": st.run.namespace,
            "connection": connection,
            "queue": command.queue,
            "arguments": dict(command.arguments),
            "retry_policy": command.retry_policy.to_json(),
            "schedule_to_start_seconds": command.schedule_to_start_timeout,
            "start_to_close_seconds": command.start_to_close_timeout,
            "schedule_to_close_seconds": s2close,
            "heartbeat_seconds": command.heartbeat_timeout,
            "schedule_to_close_deadline": (
                None if s2close is None else st.now + timedelta(seconds=s2close)
            ),
            "session_id": None if session is None else session.session_id,
            "worker_session": None if session is None else session.to_json(),
        }
    )
    ready.notify(st.run.namespace, connection, command.queue, "activity", task_id)
    scheduled = events.ActivityScheduled(
        activity_execution_id=execution_id,
        activity_type=command.activity_type,
        sequence=step,
        workflow_task_id=st.task_id,
        # The command was validated when it was built or parsed: copy its options as they are.
        activity=ActivitySpec.model_construct(
            **{name: getattr(command, name) for name in _SNAPSHOT_FIELDS}
        ),
    )
    st.events.append(NewEvent(scheduled, f"step:{step}:scheduled"))


def _record_local_activity(st: _Apply, command: cmd.RecordLocalActivity, step: int) -> None:
    """A3: the execution the workflow task ran in-process becomes ordinary activity history.

    No activity task row: nothing is left to run, and the events belong to this task, so they
    wake no workflow task and replay finds the result where the code awaited it.
    """
    st.last_step = step
    recorded = events.local_activity_events(
        command, run_id=st.run.run_id, step=step, workflow_task_id=st.task_id, now=st.now
    )
    st.events.extend(NewEvent(event, key) for event, key in recorded)


def _start_timer(st: _Apply, command: cmd.StartTimer, step: int) -> None:
    st.last_step = step
    fire_at = st.now + timedelta(seconds=command.delay_seconds)
    st.timer_rows.append(
        {
            "run_id": st.run.run_id,
            "step_seq": step,
            "namespace": st.run.namespace,
            "fire_at": fire_at,
            "delay_seconds": command.delay_seconds,
        }
    )
    scheduled = events.TimerScheduled(
        timer_id=f"{st.run.run_id}:{step}",
        sequence=step,
        delay_seconds=command.delay_seconds,
        fire_at=fire_at,
    )
    st.events.append(NewEvent(scheduled, f"step:{step}:timer"))
    st.outcome.timers_started.append(fire_at)


async def _cancel_timer(conn: AsyncConnection, st: _Apply, command: cmd.CancelTimer) -> None:
    seq = command.sequence
    started_now = [row for row in st.timer_rows if row["step_seq"] == seq]
    if started_now:
        # Started and cancelled in the same task: the timer row is never written.
        st.timer_rows.remove(started_now[0])
        delay: float | None = started_now[0]["delay_seconds"]
    else:
        delay = await references.cancel_timer(
            conn, task_id=st.task_id, run_id=st.run.run_id, seq=seq
        )
        if delay is None:
            return  # Already fired: the TimerFired event reaches the workflow, which ignores it.
    event = events.TimerCancelled(
        timer_id=f"{st.run.run_id}:{seq}", sequence=seq, delay_seconds=delay, cancelled_at=st.now
    )
    st.events.append(NewEvent(event, f"step:{seq}:timer-cancelled"))


async def _skip_signal(conn: AsyncConnection, st: _Apply, command: cmd.SkipSignal) -> None:
    key = f"signal:{command.signal_id}:skipped"
    await references.check_signal(
        conn, task_id=st.task_id, run_id=st.run.run_id, command=command, skipped_key=key
    )
    skipped = events.SignalSkipped(
        signal_id=command.signal_id, signal_name=command.signal_name, reason=command.reason
    )
    st.events.append(NewEvent(skipped, key))


async def _finish_update(
    conn: AsyncConnection, st: _Apply, command: cmd.CompleteUpdate | cmd.FailUpdate
) -> None:
    run = st.run
    finished = await references.finish_update(
        conn, task_id=st.task_id, run_id=run.run_id, command=command
    )
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
        if st.update_task:
            # Where the handler ran: replay runs it at this point again (PROTOCOL.md 5.1).
            applied = events.UpdateApplied(
                update_id=command.update_id,
                update_name=finished.update_name,
                workflow_instance_id=run.workflow_id,
                workflow_run_id=run.run_id,
                arguments=finished.arguments,
            )
            st.events.append(NewEvent(applied, f"update:{command.update_id}:applied"))
    st.events.append(NewEvent(event, f"update:{command.update_id}:completed"))
    ready.notify_run(run.namespace, run.run_id, ready.Change.UPDATE, notify_queue=run.notify_queue)


def _close(st: _Apply, closed: _Closed) -> None:
    st.closed = closed
    st.outcome.closed_status = closed.status
    outcome = ready.RunOutcome(
        status=closed.status.value,
        result=closed.result,
        failure=closed.failure,
        continued_to_run_id=closed.continued_to_run_id,
    )
    ready.notify_run(
        st.run.namespace,
        st.run.run_id,
        ready.Change.CLOSED,
        outcome,
        notify_queue=st.run.notify_queue,
    )


def _fail_workflow(st: _Apply, command: cmd.FailWorkflow) -> None:
    failure = command.failure()
    failed = events.WorkflowFailed(
        exception_type=failure.exception_type,
        message=failure.message,
        non_retryable=failure.non_retryable,
        exception=command.exception or ExceptionInfo(),
    )
    st.events.append(NewEvent(failed, "workflow-closed"))
    _close(st, _Closed(RunStatus.FAILED, failure=failure.to_json()))


def _cancel_workflow(st: _Apply, command: cmd.CancelWorkflow) -> None:
    message = command.message or "workflow cancelled"
    cancelled = events.WorkflowCancelled(
        workflow_instance_id=st.run.workflow_id, workflow_run_id=st.run.run_id, message=message
    )
    st.events.append(NewEvent(cancelled, "workflow-closed"))
    failure = {"message": message, "exception_type": "WorkflowCancelled"}
    _close(st, _Closed(RunStatus.CANCELLED, failure=failure))


async def _continue_as_new(conn: AsyncConnection, st: _Apply, command: cmd.ContinueAsNew) -> None:
    run = st.run
    # The old run must leave the open-id index before the new one takes its place.
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(status=RunStatus.CONTINUED_AS_NEW, closed_at=sa.func.now())
    )
    new_run = await runs.create_run(
        conn,
        runs.NewRun(
            namespace=run.namespace,
            workflow_id=run.workflow_id,
            workflow_type=command.workflow_type or run.workflow_type,
            task_queue=command.queue or run.task_queue,
            input=dict(command.arguments),
            connection=run.connection,
            build_id=run.build_id,
            continued_from_run_id=run.run_id,
        ),
    )
    continued = events.WorkflowContinuedAsNew(continued_to_run_id=new_run.run_id)
    st.events.append(NewEvent(continued, "workflow-closed"))
    _close(st, _Closed(RunStatus.CONTINUED_AS_NEW, continued_to_run_id=new_run.run_id))
    st.outcome.continued_run_id = new_run.run_id
    st.outcome.workflow_task_created = True
