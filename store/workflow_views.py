"""Reads of the control plane's workflow views (PROTOCOL.md 17).

A workflow id's runs, a run's place among them, and the list filters `list_workflows` sends.

A workflow id's runs are every run the namespace holds under that id, oldest first: the runs of
its continue-as-new and retry chains and of its reuses (`allow_duplicate`). A run's number is its
place in that order (1 for the first) and the current run is the newest, as the Durable Workflow
server numbers the runs of a workflow instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events as ev
from burrow.store import runs, sql
from burrow.store import schema as s
from burrow.store.models import RunInfo, RunStatus
from burrow.store.sql import statement


class OpenState(StrEnum):
    """Where an open run stands, in the Durable Workflow server's status names.

    All three are `running` runs to the store, and the server's `running` status bucket:

    * `pending`: no workflow task has moved its history past its start yet, and one waits
      (what an operator's repair recorded there does not move it);
    * `running`: a workflow task is open (ready or leased) for a run past its start: workflow
      code has input to take;
    * `waiting`: no workflow task is open; the run waits on an activity, a timer, a signal or a
      child (`RunPlace.wait_kind` says which).
    """

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class RunFilter:
    """What a workflow list keeps.

    Runs of these statuses (empty: every status), of one open state, whose id has a substring,
    archived or not (None: both).
    """

    statuses: tuple[RunStatus, ...] = ()
    open_state: OpenState | None = None
    id_contains: str | None = None
    archived: bool | None = None


_OPEN_TASK = sa.exists().where(
    s.workflow_tasks.c.run_id == s.runs.c.run_id,
    s.workflow_tasks.c.state.in_(["ready", "leased"]),
)

_CONTROL_TYPES = tuple(model.event_type for model in ev.CONTROL_EVENTS)
PAST_START_SQL = f"""(r.last_event_seq > 1 AND EXISTS (
        SELECT 1 FROM history_events h WHERE h.run_id = r.run_id AND h.sequence > 1
          AND h.event_type NOT IN ({", ".join(f"'{name}'" for name in _CONTROL_TYPES)})))"""
"""Whether the history of run `r` holds more than its start (SQL): an event past it that is not
an operator's command (a repair recorded on a fresh run leaves it where it was). The history's
primary key finds the first such event, the second event of most runs."""
_PAST_START = sa.and_(
    s.runs.c.last_event_seq > 1,
    sa.exists().where(
        s.history_events.c.run_id == s.runs.c.run_id,
        s.history_events.c.sequence > 1,
        s.history_events.c.event_type.not_in(_CONTROL_TYPES),
    ),
)


def open_state_of_run() -> sa.ColumnElement[str | None]:
    """`open_state` of a `runs` row: its OpenState value, NULL for a closed run."""
    r = s.runs.c
    return sa.case(
        (r.status != RunStatus.RUNNING.value, sa.null()),
        (~_OPEN_TASK, OpenState.WAITING.value),
        (_PAST_START, OpenState.RUNNING.value),
        else_=OpenState.PENDING.value,
    ).label("open_state")


def filter_clauses(wanted: RunFilter) -> list[sa.ColumnElement[bool]]:
    """The WHERE clauses of `wanted` on `runs` (the open-task test uses the open-task index)."""
    r = s.runs.c
    clauses: list[sa.ColumnElement[bool]] = []
    if wanted.statuses:
        clauses.append(r.status.in_([status.value for status in wanted.statuses]))
    if wanted.open_state is OpenState.PENDING:
        clauses += [r.status == RunStatus.RUNNING.value, _OPEN_TASK, ~_PAST_START]
    elif wanted.open_state is OpenState.RUNNING:
        clauses += [r.status == RunStatus.RUNNING.value, _OPEN_TASK, _PAST_START]
    elif wanted.open_state is OpenState.WAITING:
        clauses += [r.status == RunStatus.RUNNING.value, ~_OPEN_TASK]
    if wanted.id_contains:
        escaped = wanted.id_contains.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append(r.workflow_id.like(f"%{escaped}%", escape="\\"))
    if wanted.archived is not None:
        clauses.append(r.archived_at.is_not(None) if wanted.archived else r.archived_at.is_(None))
    return clauses


@dataclass(frozen=True, slots=True)
class ListedRun:
    """A run as a workflow list shows it: where an open run stands, and its archive."""

    run: RunInfo
    open_state: OpenState | None
    """None for a closed run."""
    archived_at: datetime | None = None
    archive_reason: str | None = None


def listed_run(row: sql.AnyRow) -> ListedRun:
    """The listed run of a row holding the `runs` columns and `open_state_of_run()`."""
    return ListedRun(
        run=runs.run_row(row).info(),
        open_state=None if row.open_state is None else OpenState(row.open_state),
        archived_at=row.archived_at,
        archive_reason=row.archive_reason,
    )


async def list_runs(
    conn: AsyncConnection,
    *,
    namespace: str,
    status: str | None = None,
    workflow_type: str | None = None,
    limit: int = 100,
    archived: bool | None = None,
) -> list[RunInfo]:
    """The namespace's most recent runs (of one workflow type if given), newest first.

    `archived`: only archived runs (True), none of them (False), or both (None).
    """
    r = s.runs.c
    stmt = sa.select(s.runs).where(
        r.namespace == namespace, *filter_clauses(RunFilter(archived=archived))
    )
    if status is not None:
        stmt = stmt.where(r.status == status)
    if workflow_type is not None:
        stmt = stmt.where(r.workflow_type == workflow_type)
    rows = await conn.execute(stmt.order_by(r.created_at.desc()).limit(limit))
    return [runs.run_row(row).info() for row in rows]


async def workflow_runs(
    conn: AsyncConnection, *, namespace: str, workflow_id: str
) -> list[ListedRun]:
    """Every run of the workflow id, oldest first (its namespace and id index orders them)."""
    r = s.runs.c
    rows = await conn.execute(
        sa.select(s.runs, open_state_of_run())
        .where(r.namespace == namespace, r.workflow_id == workflow_id)
        .order_by(r.created_at, r.run_id)
    )
    return [listed_run(row) for row in rows]


@dataclass(frozen=True, slots=True)
class RunPlace:
    """A run's place among its workflow id's runs, and what the runs row holds besides."""

    run_number: int
    run_count: int
    is_current_run: bool
    open_task: bool
    archived_at: datetime | None
    archive_reason: str | None
    continued_from_run_id: str | None = None
    """The run this one continues: continued as new, retried, or redriven."""
    last_progress_at: datetime | None = None
    """When the run's last history event was recorded."""
    wait_kind: str | None = None
    """What an open run with no workflow task open waits on: `activity`, `child`, `timer`, or
    `signal` (nothing of its own is open: it waits for a signal or an update)."""
    open_state: OpenState | None = None
    """Where the run stands while open (None once closed)."""


_RUN_PLACE = statement(
    f"""
    SELECT
        (SELECT count(*) FROM runs o WHERE o.namespace = r.namespace
           AND o.workflow_id = r.workflow_id
           AND (o.created_at, o.run_id) <= (r.created_at, r.run_id)) AS run_number,
        (SELECT count(*) FROM runs o WHERE o.namespace = r.namespace
           AND o.workflow_id = r.workflow_id) AS run_count,
        EXISTS (SELECT 1 FROM workflow_tasks t
                WHERE t.run_id = r.run_id AND t.state IN ('ready', 'leased')) AS open_task,
        r.archived_at, r.archive_reason, r.continued_from_run_id, r.retry_of_run_id,
        r.status, {PAST_START_SQL} AS past_start,
        (SELECT h.recorded_at FROM history_events h
         WHERE h.run_id = r.run_id AND h.sequence = r.last_event_seq) AS last_progress_at,
        CASE
            WHEN r.status <> 'running' THEN NULL
            WHEN EXISTS (SELECT 1 FROM workflow_tasks t
                         WHERE t.run_id = r.run_id AND t.state IN ('ready', 'leased')) THEN NULL
            WHEN EXISTS (SELECT 1 FROM activity_tasks a
                         WHERE a.run_id = r.run_id AND a.state IN ('ready', 'leased'))
                THEN 'activity'
            WHEN EXISTS (SELECT 1 FROM child_workflows c
                         WHERE c.parent_run_id = r.run_id AND c.state = 'running') THEN 'child'
            WHEN EXISTS (SELECT 1 FROM timers m
                         WHERE m.run_id = r.run_id AND m.state = 'pending') THEN 'timer'
            ELSE 'signal'
        END AS wait_kind
    FROM runs r WHERE r.run_id = :run_id
    """
)


async def run_place(conn: AsyncConnection, *, run_id: str) -> RunPlace:
    """The run's number, its workflow id's run count, whether it is the newest, and more."""
    row = await sql.one(conn, _RUN_PLACE, {"run_id": run_id})
    return RunPlace(
        run_number=int(row.run_number),
        run_count=int(row.run_count),
        is_current_run=row.run_number == row.run_count,
        open_task=bool(row.open_task),
        archived_at=row.archived_at,
        archive_reason=row.archive_reason,
        continued_from_run_id=row.continued_from_run_id or row.retry_of_run_id,
        last_progress_at=row.last_progress_at,
        wait_kind=row.wait_kind,
        open_state=_open_state(row.status, bool(row.open_task), bool(row.past_start)),
    )


def _open_state(status: str, open_task: bool, past_start: bool) -> OpenState | None:
    """`open_state_of_run()` of what `run_place` read."""
    if status != RunStatus.RUNNING.value:
        return None
    if not open_task:
        return OpenState.WAITING
    return OpenState.RUNNING if past_start else OpenState.PENDING
