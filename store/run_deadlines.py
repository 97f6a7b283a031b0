"""Workflow timeouts: the repair pass closes runs past their run or execution deadline.

Both deadlines are stored on the run when it is created (`runs._CREATE_RUNS`): the execution
deadline covers the whole chain (continued as new and retried runs keep it), the run deadline
one run. A run past either is closed `timed_out` with `WorkflowTimedOut` in its history, its
open work cancelled and its parent and children told (`children.run_closed`), unless it passed
only its run deadline and its retry policy retries it (store/run_retries.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import child_events
from burrow.store import children, history, ready, run_retries, runs, sql
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.isolation import RepairStep, RowRef, Tally, each_row, held_out, marked
from burrow.store.models import JsonDict, RunRow, RunStatus
from burrow.store.sql import statement
from burrow.store.transactions import Txn

BATCH = 500

# The index ix_runs_deadline is on this expression, for these rows.
_DEADLINE = "least(run_deadline_at, execution_deadline_at)"
_OPEN_WITH_DEADLINE = (
    "status = 'running' AND (run_deadline_at IS NOT NULL OR execution_deadline_at IS NOT NULL)"
)

_DUE = statement(
    f"""
    SELECT run_id, namespace, {marked(RepairStep.RUN_DEADLINE, "runs.run_id::text")} AS marked
    FROM runs
    WHERE {_OPEN_WITH_DEADLINE} AND {_DEADLINE} <= now()
      AND NOT {held_out(RepairStep.RUN_DEADLINE, "runs.run_id::text")}
    ORDER BY {_DEADLINE}
    LIMIT :limit
    """
)
# A run held out after a failure is left out: the loop would wake for it every pass until then.
_NEXT_DEADLINE = statement(
    f"SELECT min({_DEADLINE}) FROM runs WHERE {_OPEN_WITH_DEADLINE}"
    f" AND NOT {held_out(RepairStep.RUN_DEADLINE, 'runs.run_id::text')}"
)


async def next_deadline_at(conn: sql.Conn) -> datetime | None:
    """When the earliest open run deadline passes, or None."""
    due: datetime | None = await sql.scalar_one(conn, _NEXT_DEADLINE)
    return due


async def time_out_runs(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Close the runs past a deadline (or retry them); returns how many were closed."""
    candidates = await sql.fetch(txn.conn, _DUE, {"limit": BATCH})
    refs = [
        RowRef(key=str(c.run_id), namespace=c.namespace, run_id=str(c.run_id), marked=c.marked)
        for c in candidates
    ]

    async def time_out(batch: Sequence[RowRef]) -> int:
        return sum([await _time_out_run(txn, ref.run_id) for ref in batch])

    return await each_row(txn, RepairStep.RUN_DEADLINE, refs, time_out, tally or Tally())


async def _time_out_run(txn: Txn[AsyncConnection], run_id: str) -> int:
    conn = txn.conn
    run = await runs.lock_run(conn, run_id=run_id)
    now: datetime = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
    kind = _timeout_kind(run, now)
    if run.status != RunStatus.RUNNING or kind is None:
        return 0  # closed or moved on since it was selected
    deadline = run.execution_deadline_at if kind == "execution" else run.run_deadline_at
    message = f"workflow {run.workflow_id} timed out ({kind} timeout, deadline {deadline})"
    timed_out = child_events.WorkflowTimedOut(
        timeout_kind=kind,
        message=message,
        execution_deadline_at=run.execution_deadline_at,
        run_deadline_at=run.run_deadline_at,
    )
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=run.last_event_seq,
        events=[NewEvent(timed_out, "workflow-timed-out")],
        workflow_task_id=None,
    )
    failure: JsonDict = {
        "message": message,
        "exception_type": "WorkflowTimedOut",
        "failure_category": "timeout",
        "timeout_kind": kind,
    }
    # Only a run timeout is retried: past the execution deadline the whole chain is over.
    backoff = None if kind == "execution" else run_retries.retry_backoff(run, failure, now)
    retry_id = None
    if backoff is not None:
        retry = await run_retries.start_retry(
            txn, run=run, status=RunStatus.TIMED_OUT, backoff=backoff
        )
        retry_id = retry.run_id
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(
            status=RunStatus.TIMED_OUT,
            last_event_seq=last,
            failure=failure,
            closed_at=sa.func.now(),
            continued_to_run_id=retry_id,
        )
    )
    await runs.close_open_work(conn, run_id=run.run_id)
    outcome = ready.RunOutcome(
        status=RunStatus.TIMED_OUT.value, failure=failure, continued_to_run_id=retry_id
    )
    txn.notify_run(
        run.namespace, run.run_id, ready.Change.CLOSED, outcome, notify_queue=run.notify_queue
    )
    if retry_id is None:  # a retried run's parent waits for the chain's last run
        closed = children.ClosedRun(RunStatus.TIMED_OUT, failure=failure, closed_at=now)
        await children.run_closed(txn, run, closed)
    return 1


def _timeout_kind(run: RunRow, now: datetime) -> Literal["execution", "run"] | None:
    """Which deadline `run` has passed: the execution one first (it ends the chain)."""
    if run.execution_deadline_at is not None and run.execution_deadline_at <= now:
        return "execution"
    if run.run_deadline_at is not None and run.run_deadline_at <= now:
        return "run"
    return None
