"""Firing schedules: each fire time starts at most one workflow (issue 30).

A fire first inserts its `schedule_fires` row, keyed by schedule and fire time: a second
attempt at the same time (another repair pass, a trigger in the same second, a backfill over
fired times) inserts nothing and does nothing. Only then does it apply the overlap policy
against the schedule's previous run and, if it starts, create the run with the deterministic
workflow id `<schedule id>-<fire time>`, in the same transaction. The repair pass claims due
schedules with `FOR UPDATE SKIP LOCKED`, so concurrent passes split them instead of waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
import structlog
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol.schedules import (
    OverlapPolicy,
    ScheduleAction,
    SchedulePolicies,
    ScheduleSpec,
    fire_times_after,
    jitter_for,
    scheduled_workflow_id,
)
from burrow.store import children, runs, schedule_history
from burrow.store import schema as s
from burrow.store.isolation import RepairStep, RowRef, Tally, each_row, held_out, marked
from burrow.store.models import IdReusePolicy, RunRow, RunStatus
from burrow.store.schedule_models import FireKind, FireOutcome, ScheduleFire
from burrow.store.transactions import Txn

log = structlog.get_logger("burrow.store.schedules")

CLAIM_BATCH = 100
FIRES_PER_PASS = 200
"""Fire times one pass handles per schedule; the rest are the next pass's (bounded work)."""
KEEP_FIRES = 1000
"""Fire rows kept per schedule (waiting ones besides), up to PRUNE_EVERY more between prunes.
An older fire time fired again (by a backfill) meets its run's workflow id, which refuses a
second run: it fails, starting none."""
PRUNE_EVERY = 100
"""A schedule's old fire rows are pruned each time it has recorded this many more: not every
pass, which would cost an every-second schedule a statement a second."""

_ONE_WAITING = (OverlapPolicy.BUFFER_ONE, OverlapPolicy.CANCEL_OTHER)


@dataclass
class Claimed:
    """A schedule row locked by this transaction, with the counters its fires change."""

    namespace: str
    schedule_id: str
    spec: ScheduleSpec
    action: ScheduleAction
    policies: SchedulePolicies
    next_fire_at: datetime | None
    buffered_count: int
    latest_workflow_id: str | None
    fires_count: int
    rows_before: int = 0
    """Fire rows the schedule recorded before (started, skipped, failed): when to prune."""
    recorded: int = 0
    """Fire rows recorded by this transaction."""
    changes: dict[str, int] = field(default_factory=dict)
    latest: tuple[str, str, datetime] | None = None
    """(workflow id, run id, fire time) of a run a fire started here."""

    def bump(self, column: str, by: int = 1) -> None:
        """Count a change to one of the schedule's counters."""
        self.changes[column] = self.changes.get(column, 0) + by

    @property
    def started(self) -> int:
        """Runs started so far, this transaction's included."""
        return self.fires_count + self.changes.get("fires_count", 0)


def claimed_of(row: sa.Row[tuple[object, ...]]) -> Claimed:
    """The typed schedule of a locked `schedules` row."""
    m = row._mapping
    return Claimed(
        namespace=m["namespace"],
        schedule_id=m["schedule_id"],
        spec=ScheduleSpec.model_validate(m["spec"]),
        action=ScheduleAction.model_validate(m["action"]),
        policies=SchedulePolicies.model_validate(m["policies"]),
        next_fire_at=m["next_fire_at"],
        buffered_count=m["buffered_count"],
        latest_workflow_id=m["latest_workflow_id"],
        fires_count=m["fires_count"],
        rows_before=m["fires_count"] + m["skipped_count"] + m["failures_count"],
    )


def next_fire(
    schedule_id: str, spec: ScheduleSpec, policies: SchedulePolicies, after: datetime
) -> dict[str, datetime | None]:
    """`next_fire_at` and `next_due_at` (with its jitter) for the first fire after `after`."""
    found = fire_times_after(spec, after, limit=1)
    if not found:
        return {"next_fire_at": None, "next_due_at": None}
    at = found[0]
    return {
        "next_fire_at": at,
        "next_due_at": at + jitter_for(schedule_id, at, policies.jitter_seconds),
    }


async def db_now(conn: AsyncConnection) -> datetime:
    """The transaction's time: every process measures fires against the database clock."""
    now: datetime = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
    return now


async def open_run(conn: AsyncConnection, sched: Claimed) -> RunRow | None:
    """The schedule's previous run (the latest of its chain) if it is still open."""
    if sched.latest_workflow_id is None:
        return None
    run = await runs.find_run_or_none(
        conn, namespace=sched.namespace, workflow_id=sched.latest_workflow_id
    )
    return run if run is not None and run.status == RunStatus.RUNNING else None


def _fire_of(
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    outcome: FireOutcome,
    *,
    run_id: str | None = None,
    reason: str | None = None,
) -> ScheduleFire:
    return ScheduleFire(
        schedule_id=sched.schedule_id,
        fire_at=fire_at,
        kind=kind,
        outcome=outcome,
        workflow_id=scheduled_workflow_id(sched.schedule_id, fire_at),
        run_id=run_id,
        reason=reason,
    )


async def _audited(conn: AsyncConnection, sched: Claimed, fired: ScheduleFire) -> ScheduleFire:
    """`fired`, once its event is in the schedule's audit stream (store/schedule_history.py)."""
    await schedule_history.record_fire(conn, sched.namespace, fired)
    return fired


async def _record(
    conn: AsyncConnection,
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    outcome: FireOutcome,
    *,
    run_id: str | None = None,
    reason: str | None = None,
) -> bool:
    """Insert the fire's row with its outcome; False: this fire time was taken before.

    Nothing else is written for a fire before its row is: the row is what makes it once only.
    """
    stmt = (
        pg.insert(s.schedule_fires)
        .values(
            namespace=sched.namespace,
            schedule_id=sched.schedule_id,
            fire_at=fire_at,
            kind=kind.value,
            outcome=outcome.value,
            workflow_id=scheduled_workflow_id(sched.schedule_id, fire_at),
            run_id=run_id,
            reason=reason,
        )
        .on_conflict_do_nothing()
        .returning(s.schedule_fires.c.workflow_id)
    )
    recorded = (await conn.execute(stmt)).scalar() is not None
    sched.recorded += recorded
    return recorded


async def _settle(
    conn: AsyncConnection,
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    outcome: FireOutcome,
    *,
    run_id: str | None = None,
    reason: str | None = None,
) -> ScheduleFire:
    """Change the outcome of a fire recorded before (a buffered fire, a refused start)."""
    f = s.schedule_fires.c
    await conn.execute(
        sa.update(s.schedule_fires)
        .where(
            f.namespace == sched.namespace,
            f.schedule_id == sched.schedule_id,
            f.fire_at == fire_at,
        )
        .values(outcome=outcome.value, run_id=run_id, reason=reason)
    )
    return await _audited(
        conn, sched, _fire_of(sched, fire_at, kind, outcome, run_id=run_id, reason=reason)
    )


async def _start(
    txn: Txn[AsyncConnection],
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    run_id: str,
    *,
    settle: bool,
) -> ScheduleFire:
    """Create the fire's run, `run_id`; a workflow id that ever had a run is a failed fire.

    The fire's row says `started` with `run_id` already, or (`settle`) is changed to say so.
    """
    conn = txn.conn
    action = sched.action
    workflow_id = scheduled_workflow_id(sched.schedule_id, fire_at)
    new = runs.NewRun(
        namespace=sched.namespace,
        workflow_id=workflow_id,
        workflow_type=action.workflow_type,
        task_queue=action.task_queue,
        input=action.input,
        connection=action.connection,
        id_reuse_policy=IdReusePolicy.REJECT_DUPLICATE,
        run_id=run_id,
        execution_timeout_seconds=action.execution_timeout_seconds,
        run_timeout_seconds=action.run_timeout_seconds,
    )
    [outcome] = await runs.create_runs(txn, [new])
    if isinstance(outcome, runs.Refused):
        sched.bump("failures_count")
        reason = f"workflow id {workflow_id!r} already has a run"
        log.warning("schedule fire failed", schedule_id=sched.schedule_id, reason=reason)
        return await _settle(conn, sched, fire_at, kind, FireOutcome.FAILED, reason=reason)
    sched.bump("fires_count")
    sched.latest_workflow_id = workflow_id
    sched.latest = (workflow_id, outcome.run_id, fire_at)
    if settle:
        return await _settle(conn, sched, fire_at, kind, FireOutcome.STARTED, run_id=run_id)
    started = _fire_of(sched, fire_at, kind, FireOutcome.STARTED, run_id=run_id)
    return await _audited(conn, sched, started)


async def fire(
    txn: Txn[AsyncConnection],
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    *,
    overlap: OverlapPolicy | None = None,
) -> ScheduleFire:
    """Fire `sched` (locked by the caller) once for `fire_at`, under its overlap policy.

    The outcome is decided first (reads only), then recorded with the fire's row; a fire time
    recorded before does nothing. Only then are runs cancelled, terminated or started.
    """
    conn = txn.conn
    already = _fire_of(sched, fire_at, kind, FireOutcome.ALREADY_FIRED)
    limit = sched.policies.max_runs
    if limit is not None and sched.started >= limit:
        reason = f"max_runs ({limit}) reached"
        if not await _record(conn, sched, fire_at, kind, FireOutcome.SKIPPED, reason=reason):
            return already
        sched.bump("skipped_count")
        skipped = _fire_of(sched, fire_at, kind, FireOutcome.SKIPPED, reason=reason)
        return await _audited(conn, sched, skipped)
    policy = overlap or sched.policies.overlap_policy
    # allow_all starts whatever is open: no need to look.
    running = None if policy is OverlapPolicy.ALLOW_ALL else await open_run(conn, sched)
    waiting = sched.buffered_count + sched.changes.get("buffered_count", 0)
    starts = policy in (OverlapPolicy.ALLOW_ALL, OverlapPolicy.TERMINATE_OTHER) or (
        running is None and waiting == 0
    )
    if starts:
        run_id = str(uuid.uuid4())
        if not await _record(conn, sched, fire_at, kind, FireOutcome.STARTED, run_id=run_id):
            return already
        if policy is OverlapPolicy.TERMINATE_OTHER and running is not None:
            locked = await runs.lock_run(conn, run_id=running.run_id)
            if locked.status == RunStatus.RUNNING:
                why = f"schedule {sched.schedule_id!r} fired: overlap policy terminate_other"
                await children.terminate(txn, run=locked, reason=why)
        return await _start(txn, sched, fire_at, kind, run_id, settle=False)
    buffers = policy is OverlapPolicy.BUFFER_ALL or (policy in _ONE_WAITING and waiting == 0)
    held = "the previous run is still open" if running is not None else "a fire is waiting"
    skip_reason = None if buffers else f"overlap policy {policy.value}: {held}"
    outcome = FireOutcome.BUFFERED if buffers else FireOutcome.SKIPPED
    if not await _record(conn, sched, fire_at, kind, outcome, reason=skip_reason):
        return already
    if policy is OverlapPolicy.CANCEL_OTHER and running is not None:
        locked = await runs.lock_run(conn, run_id=running.run_id)
        if locked.status == RunStatus.RUNNING and not locked.cancel_requested:
            why = f"schedule {sched.schedule_id!r} fired: overlap policy cancel_other"
            await runs.request_cancel(txn, run=locked, reason=why)
    sched.bump("buffered_count" if buffers else "skipped_count")
    return await _audited(conn, sched, _fire_of(sched, fire_at, kind, outcome, reason=skip_reason))


async def start_buffered(txn: Txn[AsyncConnection], sched: Claimed) -> ScheduleFire | None:
    """Start the oldest waiting fire once the previous run has closed (buffer and cancel)."""
    conn = txn.conn
    if sched.buffered_count <= 0 or await open_run(conn, sched) is not None:
        return None
    f = s.schedule_fires.c
    row = (
        await conn.execute(
            sa.select(f.fire_at, f.kind)
            .where(
                f.namespace == sched.namespace,
                f.schedule_id == sched.schedule_id,
                f.outcome == FireOutcome.BUFFERED.value,
            )
            .order_by(f.fire_at)
            .limit(1)
        )
    ).first()
    sched.bump("buffered_count", -1)
    if row is None:
        return None
    kind = FireKind(row.kind)
    limit = sched.policies.max_runs
    if limit is not None and sched.started >= limit:
        sched.bump("skipped_count")
        reason = f"max_runs ({limit}) reached"
        return await _settle(conn, sched, row.fire_at, kind, FireOutcome.SKIPPED, reason=reason)
    return await _start(txn, sched, row.fire_at, kind, str(uuid.uuid4()), settle=True)


async def save(conn: AsyncConnection, sched: Claimed, **values: object) -> None:
    """Write the counters the fires changed, the latest run, and `values`."""
    c = s.schedules.c
    changes: dict[str, object] = {name: c[name] + by for name, by in sched.changes.items()}
    if sched.latest is not None:
        workflow_id, run_id, fired_at = sched.latest
        changes.update(latest_workflow_id=workflow_id, latest_run_id=run_id)
        changes["last_fired_at"] = sa.func.greatest(c.last_fired_at, fired_at)
    changes.update(values)
    if not changes:
        return
    await conn.execute(
        sa.update(s.schedules)
        .where(c.namespace == sched.namespace, c.schedule_id == sched.schedule_id)
        .values(updated_at=sa.func.now(), **changes)
    )


SCHEDULE_KEY = "schedules.namespace || '/' || schedules.schedule_id"
"""SQL: a schedule's key in `repair_failures` (step `schedule`), as `schedule_key` spells it."""

_CLAIM = (
    sa.select(
        s.schedules, sa.literal_column(marked(RepairStep.SCHEDULE, SCHEDULE_KEY)).label("marked")
    )
    .where(
        ~s.schedules.c.paused,
        sa.or_(s.schedules.c.next_due_at <= sa.func.now(), s.schedules.c.buffered_count > 0),
        sa.not_(sa.literal_column(held_out(RepairStep.SCHEDULE, SCHEDULE_KEY), sa.Boolean)),
    )
    .order_by(s.schedules.c.next_due_at)
    .limit(sa.bindparam("limit"))
    .with_for_update(of=s.schedules, skip_locked=True)
)


def schedule_key(namespace: str, schedule_id: str) -> str:
    """A schedule's key in `repair_failures`."""
    return f"{namespace}/{schedule_id}"


async def fire_due_schedules(
    txn: Txn[AsyncConnection], *, limit: int = CLAIM_BATCH, tally: Tally | None = None
) -> int:
    """The repair pass's step: fire every due fire time of the schedules claimed.

    A fire time found due longer than the catch-up window after it is counted as missed and
    logged, not started. Returns how many fire times were handled (started or not). The
    schedules are fired in one savepoint; if that raises, each in its own, and one that raises
    alone is rolled back, logged and held out of later passes with a backoff (isolation.py),
    so it never stops the others nor makes every pass retry it.
    """
    conn = txn.conn
    rows = (await conn.execute(_CLAIM, {"limit": limit})).all()
    if not rows:
        return 0
    now = await db_now(conn)
    claimed = {schedule_key(row.namespace, row.schedule_id): row for row in rows}
    refs = [
        RowRef(key=key, namespace=row.namespace, run_id="", marked=row.marked)
        for key, row in claimed.items()
    ]

    async def fire_each(batch: Sequence[RowRef]) -> int:
        return sum([await _fire_schedule(txn, claimed_of(claimed[ref.key]), now) for ref in batch])

    return await each_row(txn, RepairStep.SCHEDULE, refs, fire_each, tally or Tally())


async def _fire_schedule(txn: Txn[AsyncConnection], sched: Claimed, now: datetime) -> int:
    handled = 0 if await start_buffered(txn, sched) is None else 1
    return handled + await _fire_due(txn, sched, now)


async def _fire_due(txn: Txn[AsyncConnection], sched: Claimed, now: datetime) -> int:
    window = timedelta(seconds=sched.policies.catchup_window_seconds)
    jitter = sched.policies.jitter_seconds
    at = sched.next_fire_at
    handled = missed = 0
    while at is not None and handled < FIRES_PER_PASS:
        if at + jitter_for(sched.schedule_id, at, jitter) > now:
            break
        if now - at > window:
            missed += 1
        else:
            await fire(txn, sched, at, FireKind.SCHEDULED)
        handled += 1
        limit = sched.policies.max_runs
        following = fire_times_after(sched.spec, at, limit=1)
        at = following[0] if following and (limit is None or sched.started < limit) else None
    if missed:
        sched.bump("missed_count", missed)
        log.warning(
            "schedule fires missed: outside the catch-up window",
            schedule_id=sched.schedule_id,
            namespace=sched.namespace,
            missed=missed,
        )
    due = None if at is None else at + jitter_for(sched.schedule_id, at, jitter)
    if handled or sched.changes:
        await save(txn.conn, sched, next_fire_at=at, next_due_at=due)
        if (sched.rows_before + sched.recorded) // PRUNE_EVERY > sched.rows_before // PRUNE_EVERY:
            await _prune(txn.conn, sched)
    return handled


async def _prune(conn: AsyncConnection, sched: Claimed) -> None:
    f = s.schedule_fires.c
    mine = (f.namespace == sched.namespace, f.schedule_id == sched.schedule_id)
    oldest_kept = (
        sa.select(f.fire_at).where(*mine).order_by(f.fire_at.desc()).offset(KEEP_FIRES - 1).limit(1)
    ).scalar_subquery()
    await conn.execute(
        sa.delete(s.schedule_fires).where(
            *mine, f.outcome != FireOutcome.BUFFERED.value, f.fire_at < oldest_kept
        )
    )


async def next_due_at(conn: AsyncConnection) -> datetime | None:
    """When the earliest active schedule's next fire is due (the repair loop wakes for it).

    A schedule held out after a failure is left out: its due time has passed, and the loop
    would wake for it at once every pass until its retry time.
    """
    c = s.schedules.c
    not_held = sa.not_(sa.literal_column(held_out(RepairStep.SCHEDULE, SCHEDULE_KEY), sa.Boolean))
    stmt = sa.select(sa.func.min(c.next_due_at)).where(~c.paused, not_held)
    due: datetime | None = (await conn.execute(stmt)).scalar()
    return due
