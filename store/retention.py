"""History retention (issue 30): closed runs older than their namespace's window are deleted.

A run is expired when it is closed (`closed_at` set, not running), not archived (an archive is
an operator's wish to keep it, as in the reference server), closed more than its namespace's
`retention_days` ago, and holds no parent close policy still to apply. Deleting it removes every
row keyed by it: history, inbox, tasks, timers, signals, updates, streams, children records,
visibility rows (search attribute values, memo) and repair marks (RUN_TABLES), then the run.

Kept on purpose: `schedule_fires`, `schedule_history` and `schedules.latest_run_id` (a fire row
is the key that makes its fire time start one workflow, and a schedule's recent actions name
runs the way Temporal's do, whether or not they are still kept); `external_payloads` (shared by
content across a namespace's runs, not owned by one); other runs' `continued_*`/`retry_of` links.

Exactly once under concurrent passes: the runs are selected `FOR UPDATE SKIP LOCKED`, so a
second pass skips the runs the first is deleting, and finds them gone once it commits. The
repair pass deletes at most SWEEP_BATCH runs a pass, in its own short transaction's savepoint,
and never touches a ready or leased task of a live run, so claims are never blocked.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
import structlog
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import errors, sql
from burrow.store import schema as s
from burrow.store.namespace_schema import namespaces
from burrow.store.transactions import Txn

log = structlog.get_logger("burrow.store.retention")

KEEP_DAYS = 1_000_000
"""A window no closed run is past: a namespace with no window set keeps its runs."""
SWEEP_BATCH = 100
"""Runs the repair pass deletes at most per pass, across namespaces."""
SCAN_LIMIT = 100
"""The reference server's bound on one status scan or operator pass."""

_r = s.runs.c
_n = namespaces.c

RUN_TABLES: tuple[tuple[str, sa.Table, sa.Column[str]], ...] = (
    ("history_events", s.history_events, s.history_events.c.run_id),
    ("inbox_events", s.inbox_events, s.inbox_events.c.run_id),
    ("workflow_tasks", s.workflow_tasks, s.workflow_tasks.c.run_id),
    ("activity_tasks", s.activity_tasks, s.activity_tasks.c.run_id),
    ("query_tasks", s.query_tasks, s.query_tasks.c.run_id),
    ("timers", s.timers, s.timers.c.run_id),
    ("signals", s.signals, s.signals.c.run_id),
    ("updates", s.updates, s.updates.c.run_id),
    ("child_workflows", s.child_workflows, s.child_workflows.c.parent_run_id),
    ("standalone_activities", s.standalone_activities, s.standalone_activities.c.run_id),
    ("message_stream_messages", s.message_stream_messages, s.message_stream_messages.c.run_id),
    ("workflow_stream_items", s.workflow_stream_items, s.workflow_stream_items.c.run_id),
    ("workflow_streams", s.workflow_streams, s.workflow_streams.c.run_id),
    ("run_search_attributes", s.run_search_attributes, s.run_search_attributes.c.run_id),
    ("run_memos", s.run_memos, s.run_memos.c.run_id),
    ("run_memos", s.run_memos, s.run_memos.c.run_id),
    ("repair_failures", s.repair_failures, s.repair_failures.c.run_id),
)
"""Every table whose rows belong to one run, by the column naming it."""

TASK_TABLES = ("workflow_tasks", "activity_tasks", "query_tasks")


@dataclass
class Pruned:
    """What deleting some runs removed: rows per table, and per run when asked."""

    run_ids: list[str]
    rows: Counter[str] = field(default_factory=Counter)
    per_run: dict[str, Counter[str]] = field(default_factory=dict)


def cutoff_of(now: datetime, retention_days: int) -> datetime:
    """Runs closed before this are expired."""
    return now - timedelta(days=retention_days)


def _expired(namespace: str, retention_days: int, limit: int) -> sa.Select[tuple[str]]:
    pending_policy = sa.exists().where(
        s.child_workflows.c.parent_run_id == _r.run_id,
        s.child_workflows.c.policy_state == "pending",
    )
    return (
        sa.select(_r.run_id)
        .where(
            _r.namespace == namespace,
            _r.closed_at.is_not(None),
            _r.archived_at.is_(None),
            _r.status != "running",
            _r.closed_at < sa.func.now() - _days(retention_days),
            ~pending_policy,
        )
        # ix_runs_namespace_closed_at's order read backwards (NULLS FIRST: none is null), so
        # a backlog of expired runs is read from its oldest end, not sorted whole every pass.
        .order_by(_r.closed_at.asc().nulls_first(), _r.run_id)
        .limit(limit)
    )


def _days(days: int) -> sa.TextClause:
    """An interval of `days` written into the statement, not bound.

    Bound, it made the cutoff a parameter: once the driver's prepared statement went generic,
    the planner guessed a third of all runs expired and read the whole `runs` table every pass.
    """
    return sa.text(f"make_interval(days => {int(days)})")


async def retention_days(conn: AsyncConnection, *, namespace: str) -> int | None:
    """The namespace's window in days; None when it keeps its runs (or there is no such one)."""
    found = await conn.scalar(sa.select(_n.retention_days).where(_n.name == namespace))
    return None if found is None else int(found)


async def namespace_exists(conn: AsyncConnection, *, namespace: str) -> bool:
    """Whether the store holds the namespace."""
    found = await conn.scalar(sa.select(sa.literal(1)).where(_n.name == namespace))
    return found is not None


async def expired_run_ids(
    conn: AsyncConnection, *, namespace: str, retention_days: int, limit: int, lock: bool = False
) -> list[str]:
    """The namespace's expired runs, oldest close first; with `lock`, locked (others skipped)."""
    query = _expired(namespace, retention_days, limit)
    if lock:
        query = query.with_for_update(of=s.runs, skip_locked=True)
    return [str(row) for row in (await conn.scalars(query))]


async def delete_runs(
    conn: AsyncConnection, run_ids: Sequence[str], *, per_run: bool = False
) -> Pruned:
    """Delete the runs and every row that belongs to them (the caller holds their locks)."""
    pruned = Pruned(run_ids=list(run_ids))
    if not run_ids:
        return pruned
    ids = list(run_ids)
    for name, table, column in (*RUN_TABLES, ("runs", s.runs, _r.run_id)):
        for statement in _deletes(name, table, column, ids):
            if per_run:
                rows = await conn.execute(statement.returning(column))
                for (run_id,) in rows:
                    pruned.per_run.setdefault(str(run_id), Counter())[name] += 1
                    pruned.rows[name] += 1
            else:
                pruned.rows[name] += int((await conn.execute(statement)).rowcount)
    return pruned


_OPEN_TASK = sa.text("state IN ('ready', 'leased')")
_CLOSED_TASK = sa.text("state NOT IN ('ready', 'leased')")


def _deletes(name: str, table: sa.Table, column: sa.Column[str], ids: list[str]) -> list[sa.Delete]:
    """The deletes of a table's rows of `ids`.

    Workflow tasks take two, each reading the partial index of its states
    (uq_workflow_tasks_open_run, ix_workflow_tasks_closed_run_id).
    """
    if name != "workflow_tasks":
        return [sa.delete(table).where(column.in_(ids))]
    return [sa.delete(table).where(column.in_(ids), where) for where in (_CLOSED_TASK, _OPEN_TASK)]


async def purge_expired(txn: Txn[AsyncConnection], *, batch: int = SWEEP_BATCH) -> int:
    """The repair pass's step: delete up to `batch` expired runs, oldest namespaces' first.

    Runs in a savepoint of the pass: a failure here is logged and rolled back, and the rest of
    the pass stands. Returns how many runs were deleted.
    """
    conn = txn.conn
    try:
        with errors.translate_db_errors():
            async with sql.driver(conn).transaction():  # a SAVEPOINT of the pass
                return await _purge(conn, batch)
    except (errors.StoreUnavailable, errors.DatabaseNotReady, errors.CredentialsRejected):
        raise
    except Exception as exc:  # a bad row must not stop the repair pass
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # a cancel that broke the savepoint: never swallow it
        log.error("retention_purge_failed", error=str(exc))
        return 0


async def _purge(conn: AsyncConnection, batch: int) -> int:
    windows = await conn.execute(sa.select(_n.name, _n.retention_days).order_by(_n.name))
    left = batch
    total = 0
    for name, days in windows.all():
        if left <= 0:
            break
        if days is None:
            continue  # no window set: the namespace keeps its runs
        ids = await expired_run_ids(
            conn, namespace=name, retention_days=int(days), limit=left, lock=True
        )
        if not ids:
            continue
        pruned = await delete_runs(conn, ids)
        log.info(
            "retention_pruned_runs",
            namespace=name,
            runs=len(ids),
            history_events=pruned.rows["history_events"],
        )
        left -= len(ids)
        total += len(ids)
    return total


@dataclass(frozen=True)
class RunOutcome:
    """One run of an operator's pass: `pruned`, or `skipped` with a reason."""

    run_id: str
    outcome: str
    reason: str | None = None
    deleted: dict[str, int] = field(default_factory=dict)


async def run_pass(
    conn: AsyncConnection, *, namespace: str, limit: int, run_ids: Sequence[str] = ()
) -> list[RunOutcome]:
    """The operator's pass over one namespace: the named runs, else its expired ones.

    A named run is skipped when it is not in the namespace (`run_not_found`), still running
    (`run_not_terminal`), archived (`run_archived`), not yet past the window
    (`run_not_expired`), or being deleted by another pass (`run_busy`).
    """
    days = await retention_days(conn, namespace=namespace)
    if days is None:
        days = KEEP_DAYS  # no window set: nothing has expired
    if not run_ids:
        ids = await expired_run_ids(
            conn, namespace=namespace, retention_days=days, limit=limit, lock=True
        )
        pruned = await delete_runs(conn, ids, per_run=True)
        return [_pruned(run_id, pruned) for run_id in ids]
    wanted = list(dict.fromkeys(run_ids))
    normal = {run_id: _normal_uuid(run_id) for run_id in wanted}
    known = sorted({n for n in normal.values() if n is not None})
    found = await conn.execute(
        sa.select(_r.run_id, _r.status, _r.closed_at, _r.archived_at).where(
            _r.namespace == namespace, _r.run_id.in_(known)
        )
    )
    rows = {str(row.run_id): row for row in found}
    locked = await conn.scalars(
        _expired(namespace, days, len(known) or 1)
        .where(_r.run_id.in_(known))
        .with_for_update(of=s.runs, skip_locked=True)
    )
    expired = {str(run_id) for run_id in locked}
    pruned = await delete_runs(conn, sorted(expired), per_run=True)
    outcomes = []
    for run_id in wanted:
        key = normal[run_id] or ""
        row = rows.get(key)
        if key in expired:
            outcomes.append(_pruned(run_id, pruned, key))
        elif row is None:
            outcomes.append(RunOutcome(run_id, "skipped", "run_not_found"))
        elif row.status == "running" or row.closed_at is None:
            outcomes.append(RunOutcome(run_id, "skipped", "run_not_terminal"))
        elif row.archived_at is not None:
            outcomes.append(RunOutcome(run_id, "skipped", "run_archived"))
        elif row.closed_at >= cutoff_of(await now_of(conn), days):
            outcomes.append(RunOutcome(run_id, "skipped", "run_not_expired"))
        else:
            outcomes.append(RunOutcome(run_id, "skipped", "run_busy"))
    return outcomes


def _pruned(run_id: str, pruned: Pruned, key: str | None = None) -> RunOutcome:
    counts = pruned.per_run.get(key or run_id, Counter())
    return RunOutcome(run_id, "pruned", None, {name: counts[name] for name in sorted(counts)})


def _normal_uuid(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


async def now_of(conn: AsyncConnection) -> datetime:
    """The database's clock, as its statements read now()."""
    now = await conn.scalar(sa.select(sa.func.now()))
    assert isinstance(now, datetime)
    return now
