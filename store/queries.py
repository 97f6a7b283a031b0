"""Query tasks: submit one for a run, store a worker's answer (fenced), read it back.

Workers lease query tasks with claims.claim_query_task, like any other task.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol.shapes import Failure
from burrow.store import fragments, payloads, ready, sql
from burrow.store import schema as s
from burrow.store.models import (
    Fence,
    FencedTask,
    JsonDict,
    QueryTaskInfo,
    QueryTaskStatus,
    RunRow,
    TaskState,
    WorkerState,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

QUERY = "query"
UPDATE_VALIDATION = "update_validation"

# The half of the answer that is absent (result or failure) is stored as JSON null, not SQL
# NULL (plain JSONB, not sql.JSONB); get_query reads either as None. Query tasks check the
# lease's expiry before its owner (PROTOCOL.md 6.3).
_ANSWER_QUERY = sa.text(
    f"""
    WITH {fragments.fence_probe("query_tasks")}, answered AS (
        UPDATE query_tasks SET state = :state, result = :result, failure = :failure,
            lease_token = NULL
        WHERE {fragments.LEASE_FENCE}
        RETURNING task_id, namespace
    )
    SELECT answered.*, {fragments.fence_columns(expiry_before_owner=True)}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN answered ON true
    """
).bindparams(sa.bindparam("result", type_=pg.JSONB), sa.bindparam("failure", type_=pg.JSONB))


# A query claim as its holder observes it: the fence of an answer, nothing changed (6.3).
_OBSERVE_QUERY = statement(
    f"""
    WITH {fragments.fence_probe("query_tasks")}, held AS (
        SELECT task_id, attempt, lease_owner, lease_expires_at, created_at, expires_at,
               now() AS server_time
        FROM query_tasks
        WHERE {fragments.LEASE_FENCE}
    )
    SELECT held.*, {fragments.fence_columns(expiry_before_owner=True)}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN held ON true
    """
)


async def observe_query(conn: AsyncConnection, *, lease: Fence) -> QueryTaskStatus:
    """The live claim `lease` names; StaleLease says why it is not (as an answer would be)."""
    row = await sql.one(conn, _OBSERVE_QUERY, fragments.fence_params(lease, "query"))
    if row.task_id is None:
        raise fragments.refused(row, lease, "query")
    return QueryTaskStatus(
        query_task_id=str(row.task_id),
        attempt=row.attempt,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        admitted_at=row.created_at,
        deadline_at=row.expires_at,
        server_time=row.server_time,
    )


async def submit_query(
    txn: Txn[AsyncConnection],
    *,
    run: RunRow,
    query_name: str,
    arguments: JsonDict,
    timeout: timedelta,
    task_kind: str = QUERY,
) -> str:
    """Create a query task on the run's queue, expiring after `timeout`; returns its id.

    `task_kind` UPDATE_VALIDATION makes it an update validation: the worker runs the update's
    validator against the replayed run (read-only) and approves or rejects the update.
    """
    task_id = str(uuid.uuid4())
    await txn.conn.execute(
        sa.insert(s.query_tasks).values(
            task_id=task_id,
            run_id=run.run_id,
            workflow_type=run.workflow_type,
            namespace=run.namespace,
            connection=run.connection,
            queue=run.task_queue,
            build_id=run.build_id,
            task_kind=task_kind,
            query_name=query_name,
            arguments=arguments,
            expires_at=sa.func.now() + timeout,
        )
    )
    txn.notify(run.namespace, run.connection, run.task_queue, "query", task_id)
    if task_kind == UPDATE_VALIDATION:  # SDK workers take them on their workflow task poll
        txn.notify(run.namespace, run.connection, run.task_queue, "workflow", task_id)
    return task_id


async def answer_query(
    txn: Txn[AsyncConnection],
    *,
    lease: Fence,
    result: JsonDict | None,
    failure: Failure | None,
) -> FencedTask:
    """Store a query's answer (failed when `failure` is given); StaleLease says why if refused."""
    params = {
        **fragments.fence_params(lease, "query"),
        "state": (TaskState.FAILED if failure else TaskState.COMPLETED).value,
        "result": result,
        "failure": None if failure is None else payloads.failure_record(failure),
    }
    row = (await txn.conn.execute(_ANSWER_QUERY, params)).one()
    if row.task_id is None:
        raise fragments.refused(row, lease, "query")
    txn.notify_run(row.namespace, str(row.task_id), ready.Change.QUERY)
    return fragments.fenced_task(row, lease)


_CLOSED_RUNS = statement(
    """
    SELECT run_id, status, continued_to_run_id,
           CASE WHEN octet_length(result::text) <= :max_bytes THEN result END AS result,
           CASE WHEN octet_length(failure::text) <= :max_bytes THEN failure END AS failure,
           coalesce(octet_length(result::text), 0) > :max_bytes
               OR coalesce(octet_length(failure::text), 0) > :max_bytes AS oversized
    FROM runs WHERE run_id = ANY(CAST(CAST(:run_ids AS text[]) AS uuid[])) AND status <> 'running'
    """
)


async def closed_runs(
    conn: AsyncConnection, *, run_ids: Sequence[str]
) -> dict[str, ready.RunOutcome | None]:
    """Which of these runs are no longer running, and how they closed: one query for every waiter.

    The outcome is None when it is too large to carry (the waiter reads the run itself).
    """
    if not run_ids:
        return {}
    rows = await sql.fetch(
        conn, _CLOSED_RUNS, {"run_ids": list(run_ids), "max_bytes": ready.MAX_OUTCOME_BYTES}
    )
    return {
        str(row.run_id): None
        if row.oversized
        else ready.RunOutcome(
            status=row.status,
            result=row.result,
            failure=row.failure,
            continued_to_run_id=row.continued_to_run_id,
        )
        for row in rows
    }


async def get_query(conn: AsyncConnection, *, task_id: str) -> QueryTaskInfo | None:
    """The query task's state, result and failure, or None (also for an id no task could have)."""
    try:
        uuid.UUID(task_id)
    except ValueError:
        return None
    stmt = sa.select(s.query_tasks).where(s.query_tasks.c.task_id == task_id)
    row = (await conn.execute(stmt)).first()
    if row is None:
        return None
    return QueryTaskInfo(
        task_id=str(row.task_id),
        run_id=str(row.run_id),
        query_name=row.query_name,
        task_kind=row.task_kind,
        state=TaskState(row.state),
        result=row.result,
        failure=row.failure,
    )


async def validators_declared(conn: AsyncConnection, *, run: RunRow, update_name: str) -> bool:
    """Whether an active worker of the run's queue declares a validator for this update."""
    w = s.worker_registrations.c
    stmt = sa.select(sa.literal(1)).where(
        w.namespace == run.namespace,
        w.connection == run.connection,
        w.task_queue == run.task_queue,
        w.state.in_([WorkerState.ACTIVE, WorkerState.DRAINING]),
        w.update_validators[run.workflow_type].contains([update_name]),
    )
    return (await conn.execute(stmt.limit(1))).first() is not None
