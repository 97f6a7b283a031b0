"""The repair pass: expired leases, due timers and activity timeouts (store invariant 5)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import (
    activities,
    children,
    cooperative,
    fragments,
    operator,
    retention,
    run_deadlines,
    runs,
    schedule_fires,
    sessions,
    sql,
    standalone,
    timer_repair,
)
from burrow.store import schema as s
from burrow.store.isolation import (
    RepairStep,
    RowRef,
    Tally,
    each_row,
    held_out,
    marked,
    step_columns,
)
from burrow.store.models import (
    ActivityAttemptRow,
    JsonDict,
    SweepResult,
    TaskState,
    TimerState,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

DEFAULT_REPUBLISH_AFTER: timedelta = timedelta(seconds=60)
DEFAULT_OWNER_STALE: timedelta = timedelta(seconds=30)
SWEEP_LOCK_KEY = 0x62757272  # one sweeper at a time per database; others skip the pass
BATCH = 500


async def sweep(
    txn: Txn[AsyncConnection],
    *,
    republish_after: timedelta = DEFAULT_REPUBLISH_AFTER,
    owner_stale: timedelta = DEFAULT_OWNER_STALE,
) -> SweepResult:
    """Run one repair pass in the caller's transaction; skipped if another sweeper holds it.

    Besides repairs, queues whose ready work waited longer than `republish_after` are notified
    again, so a lost wake costs latency, never stranded work (C4). A row whose repair raises is
    isolated (store/isolation.py): the rest of the pass goes on, and `isolated` counts it.
    """
    conn = txn.conn
    held = await _held_elsewhere(conn)
    if held is not None:
        return held
    tally = Tally()
    expired = await expire_workflow_leases(txn, tally=tally)
    timeouts = await time_out_activities(txn, tally=tally)
    fired = await timer_repair.fire_due_timers(txn, tally=tally)
    released = await release_orphaned_bindings(txn, owner_stale=owner_stale)
    ended = sum((await sessions.expire_sessions(txn, owner_stale=owner_stale)).values())
    stranded = await fail_stranded_session_activities(txn, tally=tally)
    timed_out = await run_deadlines.time_out_runs(txn, tally=tally)
    cut_short = await cooperative.cut_short_cleanups(txn, tally=tally)
    policies = await children.apply_close_policies(txn)
    await standalone.settle_pending(txn, tally=tally)
    schedules_fired = await schedule_fires.fire_due_schedules(txn, tally=tally)
    await retention.purge_expired(txn)
    return SweepResult(
        expired_workflow_leases=expired,
        activity_timeouts=timeouts,
        timers_fired=fired,
        released_bindings=released,
        ended_sessions=ended,
        stranded_session_activities=stranded,
        close_policies_applied=policies,
        runs_timed_out=timed_out,
        cleanups_cut_short=cut_short,
        schedule_fires=schedules_fired,
        next_timer_at=await timer_repair.next_timer_at(conn),
        republished=await operator.renotify_stale_ready(txn, older_than=republish_after)
        + await renotify_stale_bound(txn, older_than=republish_after),
        isolated=tally.isolated,
    )


async def _held_elsewhere(conn: AsyncConnection) -> SweepResult | None:
    """Take the pass's lock for this transaction, or say the pass is skipped.

    When another sweeper holds it: the skipped pass's result, with when the next timer is due.
    """
    locked = (
        await conn.execute(sa.select(sa.func.pg_try_advisory_xact_lock(SWEEP_LOCK_KEY)))
    ).scalar()
    if locked:
        return None
    return SweepResult(next_timer_at=await timer_repair.next_timer_at(conn), skipped=True)


async def sweep_due(txn: Txn[AsyncConnection]) -> SweepResult:
    """The time-driven steps of a pass alone, those `next_timer_at` reports.

    Timers, run and cleanup deadlines, schedule fires (and the close policies of the runs they
    closed). The repair loop runs this at a due time between its full passes: a full pass is about
    fifteen statements, most of which have nothing to do then, and a timer waited on them.
    Same lock as the full pass, so the two never overlap.
    """
    conn = txn.conn
    held = await _held_elsewhere(conn)
    if held is not None:
        return held
    tally = Tally()
    fired = await timer_repair.fire_due_timers(txn, tally=tally)
    timed_out = await run_deadlines.time_out_runs(txn, tally=tally)
    cut_short = await cooperative.cut_short_cleanups(txn, tally=tally)
    policies = await children.apply_close_policies(txn) if timed_out or cut_short else 0
    schedules_fired = await schedule_fires.fire_due_schedules(txn, tally=tally)
    return SweepResult(
        timers_fired=fired,
        close_policies_applied=policies,
        runs_timed_out=timed_out,
        cleanups_cut_short=cut_short,
        schedule_fires=schedules_fired,
        next_timer_at=await timer_repair.next_timer_at(conn),
        isolated=tally.isolated,
    )


_EXPIRED_WORKFLOW_LEASES = statement(
    f"""
    SELECT task_id, namespace, run_id,
           {marked(RepairStep.WORKFLOW_LEASE, "workflow_tasks.task_id::text")} AS marked
    FROM workflow_tasks
    WHERE state = 'leased' AND lease_expires_at < now()
      AND NOT {held_out(RepairStep.WORKFLOW_LEASE, "workflow_tasks.task_id::text")}
    """
)
_EXPIRE_WORKFLOW_LEASES = statement(
    f"""
    UPDATE workflow_tasks SET {fragments.return_to_ready("now()")}
    WHERE task_id = ANY(CAST(:task_ids AS uuid[]))
      AND state = 'leased' AND lease_expires_at < now()
    RETURNING task_id, namespace, connection, queue, {fragments.sticky_owner()}
    """,
    json_params=["last_failure"],
)
# A ready task bound to an owner that is gone would wait for a wake that went nowhere (its
# sticky queue vanished with the owner): end the binding now and announce it to every worker.
# The owner stays recorded, so the claim reports a forced cold replay (S7).
_RELEASE_ORPHANED_BINDINGS = statement(
    f"""
    UPDATE workflow_tasks w SET sticky_until = now()
    WHERE w.state = 'ready' AND w.sticky_worker_id IS NOT NULL AND w.sticky_until > now()
      AND {fragments.owner_gone("w.sticky_worker_id")}
    RETURNING w.task_id, w.namespace, w.connection, w.queue
    """
)


async def release_orphaned_bindings(txn: Txn[AsyncConnection], *, owner_stale: timedelta) -> int:
    """The backstop for bindings whose owner vanished (S5c, C1); returns how many ended."""
    released = await sql.fetch(
        txn.conn, _RELEASE_ORPHANED_BINDINGS, {"owner_stale_seconds": owner_stale.total_seconds()}
    )
    for row in released:
        txn.notify(row.namespace, row.connection, row.queue, "workflow", row.task_id)
    return len(released)


# A bound task's wake goes to its owner's sticky queue. If that wake is lost, a shared-queue wake
# reaches the owner only by chance (no other worker may take the task while the binding holds),
# so the owner is woken again directly; an owner that is no longer an active sticky worker gets
# none (its binding ends through release_orphaned_bindings, or the shared wake finds the task).
_STALE_BOUND = statement(
    f"""
    SELECT task_id, namespace, connection, queue, {fragments.sticky_owner()}
    FROM workflow_tasks
    WHERE state = 'ready' AND sticky_worker_id IS NOT NULL AND sticky_until > now()
      AND available_at <= now() - make_interval(secs => :older_than)
    ORDER BY available_at
    LIMIT :limit
    """
)


async def renotify_stale_bound(txn: Txn[AsyncConnection], *, older_than: timedelta) -> int:
    """Wake the owners of bound ready workflow tasks older than `older_than` (lost sticky wakes)."""
    rows = await sql.fetch(
        txn.conn, _STALE_BOUND, {"older_than": older_than.total_seconds(), "limit": BATCH}
    )
    owned = [row for row in rows if row.sticky_owner is not None]
    for row in owned:
        txn.notify_workflow_task(row)
    return len(owned)


_LEASE_EXPIRED = {"exception_type": "LeaseExpired", "message": "workflow task lease expired"}


async def expire_workflow_leases(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Return workflow tasks whose lease ran out to ready, with a new attempt."""
    conn = txn.conn
    candidates = await sql.fetch(conn, _EXPIRED_WORKFLOW_LEASES)
    refs = [
        RowRef(key=c.task_id, namespace=c.namespace, run_id=c.run_id, marked=c.marked)
        for c in candidates
    ]

    async def expire(batch: Sequence[RowRef]) -> int:
        params = {"task_ids": [ref.key for ref in batch], "last_failure": _LEASE_EXPIRED}
        expired = await sql.fetch(conn, _EXPIRE_WORKFLOW_LEASES, params)
        for row in expired:
            txn.notify_workflow_task(row)
        return len(expired)

    return await each_row(txn, RepairStep.WORKFLOW_LEASE, refs, expire, tally or Tally())


def _passed(since: datetime | None, seconds: float | None, now: datetime) -> bool:
    """`seconds` (clamped as in SQL, `_seconds`) have passed since `since`."""
    if since is None or seconds is None:
        return False
    return (now - since).total_seconds() >= activities.clamp_seconds(seconds)


def _timeout_kind(row: ActivityAttemptRow) -> str | None:
    """Which timeout, if any, this open attempt has passed (checked in precedence order)."""
    now = row.now
    if row.schedule_to_close_deadline is not None and row.schedule_to_close_deadline <= now:
        return "schedule_to_close"
    if row.state == TaskState.READY:
        if _passed(row.available_at, row.schedule_to_start_seconds, now):
            return "schedule_to_start"
        return None
    if _passed(row.started_at, row.start_to_close_seconds, now):
        return "start_to_close"
    if _passed(row.heartbeat_at or row.started_at, row.heartbeat_seconds, now):
        return "heartbeat"
    if row.lease_expires_at is not None and row.lease_expires_at <= now:
        return "lease_expired"
    return None


def _seconds(column: sa.ColumnElement[float]) -> sa.ColumnElement[object]:
    """`column` seconds as an interval, clamped: a huge stored value must not overflow it.

    LEAST also maps NaN (greater than any number in Postgres) to the maximum.
    """
    clamped = sa.func.greatest(sa.func.least(column, activities.MAX_DURATION_SECONDS), 0.0)
    return sa.literal_column("interval '1 second'") * clamped


_A = s.activity_tasks.c
_NOW = sa.func.now()
# Only attempts that are actually due: a backlog of healthy activities must never hide them.
_DUE_TIMEOUTS = sa.or_(
    _A.schedule_to_close_deadline <= _NOW,
    sa.and_(
        fragments.state_is(_A.state, TaskState.READY),
        _A.available_at + _seconds(_A.schedule_to_start_seconds) <= _NOW,
    ),
    sa.and_(
        fragments.state_is(_A.state, TaskState.LEASED),
        sa.or_(
            _A.lease_expires_at <= _NOW,
            _A.started_at + _seconds(_A.start_to_close_seconds) <= _NOW,
            sa.func.coalesce(_A.heartbeat_at, _A.started_at) + _seconds(_A.heartbeat_seconds)
            <= _NOW,
        ),
    ),
)


async def time_out_activities(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Enforce the four activity timeouts and lost leases durably, retrying where allowed."""
    conn = txn.conn
    a = s.activity_tasks.c
    is_marked, not_held = step_columns(RepairStep.ACTIVITY_TIMEOUT, "activity_tasks.task_id::text")
    candidates = (
        await conn.execute(
            sa.select(a.task_id, a.run_id, a.namespace, is_marked)
            .where(fragments.state_is(a.state, *runs.OPEN_TASK_STATES), _DUE_TIMEOUTS, not_held)
            .order_by(a.run_id)
            .limit(BATCH)
        )
    ).all()
    refs = [
        RowRef(key=c.task_id, namespace=c.namespace, run_id=c.run_id, marked=c.marked)
        for c in candidates
    ]

    async def time_out(batch: Sequence[RowRef]) -> int:
        return sum([await _time_out_attempt(txn, ref) for ref in batch])

    return await each_row(txn, RepairStep.ACTIVITY_TIMEOUT, refs, time_out, tally or Tally())


async def _time_out_attempt(txn: Txn[AsyncConnection], ref: RowRef) -> int:
    """Fail one attempt if a timeout passed (run, then row, locked); 1 if it did."""
    conn = txn.conn
    a = s.activity_tasks.c
    await runs.lock_run(conn, run_id=ref.run_id)
    found = (
        await conn.execute(
            sa.select(s.activity_tasks, sa.func.now().label("now"))
            .where(a.task_id == ref.key, fragments.state_is(a.state, *runs.OPEN_TASK_STATES))
            .with_for_update(skip_locked=True)
        )
    ).first()
    row = None if found is None else activities.attempt_row(found)
    kind = None if row is None else _timeout_kind(row)
    if row is None or kind is None:
        return 0
    await activities.fail_attempt(
        txn, row=row, failure=_timeout_failure(row, kind), by_holder=False
    )
    return 1


# W5: a closed, failed or TTL-expired session is done for its id, so its waiting attempts could
# never be admitted anywhere: they fail (non-retryable) and the workflow decides what next.
_STRANDED_SESSION_ACTIVITIES = statement(
    f"""
    SELECT a.task_id, a.run_id, a.namespace,
           {marked(RepairStep.STRANDED_SESSION_ACTIVITY, "a.task_id::text")} AS marked
    FROM activity_tasks a
    JOIN worker_sessions ws ON ws.namespace = a.namespace AND ws.session_id = a.session_id
    WHERE a.state = 'ready' AND a.session_id IS NOT NULL AND {fragments.session_done("ws")}
      AND NOT {held_out(RepairStep.STRANDED_SESSION_ACTIVITY, "a.task_id::text")}
    ORDER BY a.run_id
    LIMIT :limit
    """
)
_STRANDED_ATTEMPT = statement(
    f"""
    SELECT a.*, now() AS now, ws.state AS session_state, ws.failure_reason, ws.close_reason
    FROM activity_tasks a
    JOIN worker_sessions ws ON ws.namespace = a.namespace AND ws.session_id = a.session_id
    WHERE a.task_id = :task_id AND a.state = 'ready' AND {fragments.session_done("ws")}
    FOR UPDATE OF a SKIP LOCKED
    """
)


async def fail_stranded_session_activities(
    txn: Txn[AsyncConnection], *, tally: Tally | None = None
) -> int:
    """Fail the waiting attempts of sessions that ended for good (W5); returns how many."""
    conn = txn.conn
    candidates = await sql.fetch(conn, _STRANDED_SESSION_ACTIVITIES, {"limit": BATCH})
    refs = [
        RowRef(key=c.task_id, namespace=c.namespace, run_id=c.run_id, marked=c.marked)
        for c in candidates
    ]

    async def fail(batch: Sequence[RowRef]) -> int:
        return sum([await _fail_stranded(txn, ref) for ref in batch])

    step = RepairStep.STRANDED_SESSION_ACTIVITY
    return await each_row(txn, step, refs, fail, tally or Tally())


async def _fail_stranded(txn: Txn[AsyncConnection], ref: RowRef) -> int:
    conn = txn.conn
    await runs.lock_run(conn, run_id=ref.run_id)
    found = await sql.first(conn, _STRANDED_ATTEMPT, {"task_id": ref.key})
    if found is None:
        return 0
    why = found.failure_reason or found.close_reason or found.session_state
    failure = {
        "exception_type": "WorkerSessionClosed",
        "message": f"worker session {found.session_id!r} is {found.session_state} ({why});"
        " its activities can no longer run",
        "non_retryable": True,
    }
    await activities.fail_attempt(
        txn, row=activities.attempt_row(found), failure=failure, by_holder=False
    )
    return 1


def _timeout_failure(row: ActivityAttemptRow, kind: str) -> JsonDict:
    if kind == "lease_expired":
        # The worker died or lost contact: the attempt is lost, like a start-to-close timeout.
        message = f"lease on attempt {row.attempt} expired (worker lost)"
        return {
            "exception_type": "LeaseExpired",
            "message": message,
            "timeout_kind": "start_to_close",
        }
    final = kind in ("schedule_to_close", "schedule_to_start")
    return {
        "exception_type": "ActivityTimedOut",
        "message": f"activity {row.activity_type} timed out ({kind})",
        "timeout_kind": kind,
        "failure_category": "timeout",
        "non_retryable": final,
    }


class ActivityTimeoutOutcome(BaseModel):
    """What one activity-timeout pass did to one activity execution (M8)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: str
    outcome: Literal["enforced", "skipped", "error"]
    has_retry: bool | None = None
    """Enforced: whether the execution goes on with another attempt."""
    reason: str | None = None
    """Skipped: `execution_not_found`, or `not_expired` when no timeout has passed. Error: its
    repair raised; rolled back and isolated like a failing row of the pass (isolation.py)."""


async def expired_activity_executions(
    conn: AsyncConnection, *, namespace: str, limit: int
) -> list[str]:
    """Open activity executions of the namespace past a timeout or lost lease (at most `limit`).

    What the next repair pass would time out: a start-to-close, schedule-to-close,
    schedule-to-start or heartbeat timeout passed, or the lease ran out.
    """
    a = s.activity_tasks.c
    rows = await conn.execute(
        sa.select(a.activity_execution_id)
        .where(
            a.namespace == namespace,
            fragments.state_is(a.state, *runs.OPEN_TASK_STATES),
            _DUE_TIMEOUTS,
        )
        .order_by(a.activity_execution_id)
        .limit(limit)
    )
    return [row.activity_execution_id for row in rows]


async def time_out_executions(
    txn: Txn[AsyncConnection], *, namespace: str, execution_ids: Sequence[str]
) -> list[ActivityTimeoutOutcome]:
    """Enforce the passed timeouts of the named executions of the namespace, as a pass would.

    Each in a savepoint of its own: one that raises is rolled back, marked and reported as an
    error, and the others go on.
    """
    a = s.activity_tasks.c
    found = {
        row.activity_execution_id: row
        for row in await txn.conn.execute(
            sa.select(a.activity_execution_id, a.task_id, a.run_id).where(
                a.namespace == namespace, a.activity_execution_id.in_(list(execution_ids))
            )
        )
    }
    outcomes = []
    for execution_id in execution_ids:
        row = found.get(execution_id)
        if row is None:
            outcomes.append(
                ActivityTimeoutOutcome(
                    execution_id=execution_id, outcome="skipped", reason="execution_not_found"
                )
            )
            continue
        ref = RowRef(key=row.task_id, namespace=namespace, run_id=row.run_id, marked=False)
        tally = Tally()

        async def time_out(batch: Sequence[RowRef]) -> int:
            return sum([await _time_out_attempt(txn, one) for one in batch])

        enforced = await each_row(txn, RepairStep.ACTIVITY_TIMEOUT, [ref], time_out, tally)
        if tally.isolated:
            outcomes.append(
                ActivityTimeoutOutcome(
                    execution_id=execution_id, outcome="error", reason="repair_failed"
                )
            )
            continue
        if not enforced:
            outcomes.append(
                ActivityTimeoutOutcome(
                    execution_id=execution_id, outcome="skipped", reason="not_expired"
                )
            )
            continue
        state = await txn.conn.scalar(sa.select(a.state).where(a.task_id == row.task_id))
        outcomes.append(
            ActivityTimeoutOutcome(
                execution_id=execution_id,
                outcome="enforced",
                has_retry=state in runs.OPEN_TASK_STATES,
            )
        )
    return outcomes


class RepairCandidates(BaseModel):
    """What the next repair pass would act on, every namespace (M8: `GET /api/system/repair`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    expired_workflow_leases: int = 0
    due_activity_timeouts: int = 0
    due_timers: int = 0
    isolated_rows: int = 0
    """Rows an earlier pass failed on, held out until their retry time (store/isolation.py)."""


async def repair_candidates(conn: AsyncConnection) -> RepairCandidates:
    """The counts of what the next pass would repair, each capped at `BATCH` + 1 rows."""
    w, a, t = s.workflow_tasks.c, s.activity_tasks.c, s.timers.c

    def capped(query: sa.Select[tuple[object]]) -> sa.ScalarSelect[int]:
        return (
            sa.select(sa.func.count())
            .select_from(query.limit(BATCH + 1).subquery())
            .scalar_subquery()
        )

    leases = sa.select(w.task_id).where(
        fragments.state_is(w.state, TaskState.LEASED), w.lease_expires_at < _NOW
    )
    timeouts = sa.select(a.task_id).where(
        fragments.state_is(a.state, *runs.OPEN_TASK_STATES), _DUE_TIMEOUTS
    )
    timers = sa.select(t.run_id).where(
        fragments.state_is(t.state, TimerState.PENDING), t.fire_at <= _NOW
    )
    row = (
        await conn.execute(
            sa.select(
                capped(leases).label("leases"),
                capped(timeouts).label("timeouts"),
                capped(timers).label("timers"),
                sa.select(sa.func.count())
                .select_from(s.repair_failures)
                .scalar_subquery()
                .label("isolated"),
            )
        )
    ).one()
    return RepairCandidates(
        expired_workflow_leases=row.leases,
        due_activity_timeouts=row.timeouts,
        due_timers=row.timers,
        isolated_rows=row.isolated,
    )
