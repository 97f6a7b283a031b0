"""Firing schedules: each fire time starts at most one workflow (issue 30).

A fire first inserts its `schedule_fires` row, keyed by schedule and fire time: a second
attempt at the same time (another repair pass, a trigger in the same second, a backfill over
fired times) inserts nothing and does nothing. Only then does it apply the overlap policy
against the schedule's previous run and, if it starts, create the run with the deterministic
workflow id `<schedule id>-<fire time>`, in the same transaction. The repair pass claims due
schedules with `FOR UPDATE SKIP LOCKED`, so concurrent passes split them instead of waiting.
"""

from __future__ import annotations

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
from burrow.store import children, errors, runs, sql
from burrow.store import schema as s
from burrow.store.isolation import Tally
from burrow.store.models import IdReusePolicy, RunRow, RunStatus
from burrow.store.schedule_models import FireKind, FireOutcome, ScheduleFire
from burrow.store.transactions import Txn

log = structlog.get_logger("burrow.store.schedules")

CLAIM_BATCH = 100
FIRES_PER_PASS = 200
KEEP_FIRES = 1000
"""Fire rows kept per schedule (waiting ones besides). An older fire time fired again (by a
backfill) meets its run's workflow id, which refuses a second run: it fails, starting none."""
"""Fire times one pass handles per schedule; the rest are the next pass's (bounded work)."""

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


async def _record(
    conn: AsyncConnection, sched: Claimed, fire_at: datetime, kind: FireKind
) -> str | None:
    """Insert the fire's row (outcome decided after); None: this fire time was taken before."""
    workflow_id = scheduled_workflow_id(sched.schedule_id, fire_at)
    stmt = (
        pg.insert(s.schedule_fires)
        .values(
            namespace=sched.namespace,
            schedule_id=sched.schedule_id,
            fire_at=fire_at,
            kind=kind.value,
            outcome=FireOutcome.SKIPPED.value,
            workflow_id=workflow_id,
        )
        .on_conflict_do_nothing()
        .returning(s.schedule_fires.c.workflow_id)
    )
    recorded: str | None = (await conn.execute(stmt)).scalar()
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
    return ScheduleFire(
        schedule_id=sched.schedule_id,
        fire_at=fire_at,
        kind=kind,
        outcome=outcome,
        workflow_id=scheduled_workflow_id(sched.schedule_id, fire_at),
        run_id=run_id,
        reason=reason,
    )


async def _start(
    txn: Txn[AsyncConnection], sched: Claimed, fire_at: datetime, kind: FireKind
) -> ScheduleFire:
    """Create the fire's run; a workflow id that ever had a run is a failed fire."""
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
    return await _settle(conn, sched, fire_at, kind, FireOutcome.STARTED, run_id=outcome.run_id)


async def fire(
    txn: Txn[AsyncConnection],
    sched: Claimed,
    fire_at: datetime,
    kind: FireKind,
    *,
    overlap: OverlapPolicy | None = None,
) -> ScheduleFire:
    """Fire `sched` (locked by the caller) once for `fire_at`, under its overlap policy."""
    conn = txn.conn
    if await _record(conn, sched, fire_at, kind) is None:
        return ScheduleFire(
            schedule_id=sched.schedule_id,
            fire_at=fire_at,
            kind=kind,
            outcome=FireOutcome.ALREADY_FIRED,
            workflow_id=scheduled_workflow_id(sched.schedule_id, fire_at),
        )
    limit = sched.policies.max_runs
    if limit is not None and sched.started >= limit:
        sched.bump("skipped_count")
        reason = f"max_runs ({limit}) reached"
        return await _settle(conn, sched, fire_at, kind, FireOutcome.SKIPPED, reason=reason)
    policy = overlap or sched.policies.overlap_policy
    running = await open_run(conn, sched)
    waiting = sched.buffered_count + sched.changes.get("buffered_count", 0)
    if policy is OverlapPolicy.ALLOW_ALL or (running is None and waiting == 0):
        return await _start(txn, sched, fire_at, kind)
    if policy is OverlapPolicy.TERMINATE_OTHER:
        if running is not None:
            locked = await runs.lock_run(conn, run_id=running.run_id)
            if locked.status == RunStatus.RUNNING:
                reason = f"schedule {sched.schedule_id!r} fired: overlap policy terminate_other"
                await children.terminate(txn, run=locked, reason=reason)
        return await _start(txn, sched, fire_at, kind)
    if policy is OverlapPolicy.CANCEL_OTHER and running is not None:
        locked = await runs.lock_run(conn, run_id=running.run_id)
        if locked.status == RunStatus.RUNNING and not locked.cancel_requested:
            reason = f"schedule {sched.schedule_id!r} fired: overlap policy cancel_other"
            await runs.request_cancel(txn, run=locked, reason=reason)
    if policy is OverlapPolicy.BUFFER_ALL or (policy in _ONE_WAITING and waiting == 0):
        sched.bump("buffered_count")
        return await _settle(conn, sched, fire_at, kind, FireOutcome.BUFFERED)
    sched.bump("skipped_count")
    why = "the previous run is still open" if running is not None else "a fire is waiting"
    reason = f"overlap policy {policy.value}: {why}"
    return await _settle(conn, sched, fire_at, kind, FireOutcome.SKIPPED, reason=reason)


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
    return await _start(txn, sched, row.fire_at, kind)


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


_CLAIM = (
    sa.select(s.schedules)
    .where(
        ~s.schedules.c.paused,
        sa.or_(s.schedules.c.next_due_at <= sa.func.now(), s.schedules.c.buffered_count > 0),
    )
    .order_by(s.schedules.c.next_due_at)
    .limit(sa.bindparam("limit"))
    .with_for_update(skip_locked=True)
)


async def fire_due_schedules(
    txn: Txn[AsyncConnection], *, limit: int = CLAIM_BATCH, tally: Tally | None = None
) -> int:
    """The repair pass's step: fire every due fire time of the schedules claimed.

    A fire time found due longer than the catch-up window after it is counted as missed and
    logged, not started. Returns how many fire times were handled (started or not).
    """
    conn = txn.conn
    rows = (await conn.execute(_CLAIM, {"limit": limit})).all()
    if not rows:
        return 0
    now = await db_now(conn)
    handled = 0
    for row in rows:
        # A schedule whose firing raises is rolled back alone and logged; the others go on.
        checkpoint = txn.checkpoint()
        try:
            with errors.translate_db_errors():
                async with sql.driver(conn).transaction():  # a SAVEPOINT of the pass
                    handled += await _fire_schedule(txn, claimed_of(row), now)
        except (errors.StoreUnavailable, errors.DatabaseNotReady):
            raise
        except Exception as exc:
            txn.discard_after(checkpoint)
            if tally is not None:
                tally.isolated += 1
            m = row._mapping
            log.exception(
                "schedule fire raised; rolled back, retried next pass",
                namespace=m["namespace"],
                schedule_id=m["schedule_id"],
                error=str(exc),
            )
    return handled


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
    """When the earliest active schedule's next fire is due (the repair loop wakes for it)."""
    c = s.schedules.c
    stmt = sa.select(sa.func.min(c.next_due_at)).where(~c.paused)
    due: datetime | None = (await conn.execute(stmt)).scalar()
    return due
