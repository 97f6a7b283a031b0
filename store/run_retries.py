"""Workflow retries: a failed (or run-timed-out) run retried as a new run of its workflow id.

The retry policy has the activity retry shape (RetrySpec) and its rules: `max_attempts` 0 or
absent is unlimited, a non-retryable failure or error type ends the chain, and the backoff is
the activities' own (`activities.backoff_seconds`). The chain's execution deadline bounds it
all: a retry that could only start after it is not made. The closing run points at its retry
through `continued_to_run_id` (as a run continued as new does), so result waiters follow it;
the retry's first workflow task is claimable only once its backoff has passed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import shapes
from burrow.store import activities, ready, run_visibility, runs, sql
from burrow.store import schema as s
from burrow.store.models import JsonDict, RunInfo, RunRow, RunStatus
from burrow.store.sql import statement
from burrow.store.transactions import Txn


def retry_backoff(run: RunRow, failure: JsonDict, now: datetime) -> float | None:
    """Seconds before the retry of `run`, closing with `failure` at `now`; None: no retry."""
    policy = run.retry_policy
    if policy is None:
        return None
    if failure.get("non_retryable"):
        return None
    if failure.get("exception_type") in (policy.get("non_retryable_error_types") or []):
        return None
    limit = activities.max_attempts(policy)
    if limit != shapes.UNLIMITED_ATTEMPTS and run.retry_attempt >= limit:
        return None
    backoff = activities.backoff_seconds(policy, run.retry_attempt)
    deadline = run.execution_deadline_at
    if deadline is not None and now + timedelta(seconds=backoff) >= deadline:
        return None  # the retry could not start before the whole chain times out
    return backoff


_DELAY_FIRST_TASK = statement(
    """
    UPDATE workflow_tasks SET available_at = now() + make_interval(secs => :backoff)
    WHERE run_id = :run_id AND state = 'ready'
    RETURNING task_id, available_at
    """
)


async def start_retry(
    txn: Txn[AsyncConnection], *, run: RunRow, status: RunStatus, backoff: float
) -> RunInfo:
    """Close `run` as `status` and create its retry, whose first task waits `backoff` seconds.

    The caller holds the run and writes the rest of its close (its event, failure, and
    `continued_to_run_id`: the returned run's id).
    """
    conn = txn.conn
    # The closing run must leave the open-id index before its retry takes its place.
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(status=status, closed_at=sa.func.now())
    )
    retry = await runs.create_run(
        txn,
        runs.NewRun(
            namespace=run.namespace,
            workflow_id=run.workflow_id,
            workflow_type=run.workflow_type,
            task_queue=run.task_queue,
            input=run.input,
            connection=run.connection,
            build_id=run.build_id,
            notify_queue=run.notify_queue,
            workflow_definition_fingerprint=run.workflow_definition_fingerprint,
            retry_attempt=run.retry_attempt + 1,
            retry_of_run_id=run.run_id,
            **runs.chain_fields(run),
            **await run_visibility.chain_metadata(conn, namespace=run.namespace, run_id=run.run_id),
        ),
    )
    delayed = await sql.fetch(conn, _DELAY_FIRST_TASK, {"run_id": retry.run_id, "backoff": backoff})
    _delay_notices(txn, {str(row.task_id): row.available_at for row in delayed})
    return retry


def _delay_notices(txn: Txn[object], due: dict[str, datetime]) -> None:
    """Announce the delayed tasks when due (a later wake, as for an activity's backoff)."""
    for i, notice in enumerate(txn.notices):
        if isinstance(notice, ready.ReadyTask) and notice.task_id in due:
            txn.notices[i] = ready.ReadyTask(
                notice.namespace,
                notice.connection,
                notice.queue,
                notice.kind,
                notice.task_id,
                due[notice.task_id],
                notice.sticky_worker_id,
            )


def point_waiters(txn: Txn[object], *, run: RunRow, retry_run_id: str) -> None:
    """Make the run's recorded close notice name its retry, so waiters follow it."""
    for i, notice in enumerate(txn.notices):
        if (
            isinstance(notice, ready.RunChanged)
            and notice.key == run.run_id
            and notice.change == ready.Change.CLOSED
            and notice.outcome is not None
        ):
            outcome = notice.outcome.model_copy(update={"continued_to_run_id": retry_run_id})
            txn.notices[i] = ready.RunChanged(
                notice.namespace, notice.key, notice.change, outcome, notice.notify_queue
            )
