"""Runs: start, lock, signals, updates, cancellation, termination and reads."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events, visibility_values
from burrow.protocol.shapes import RetrySpec
from burrow.store import errors, fragments, history, ready, run_visibility, sql
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import (
    IdReusePolicy,
    JsonDict,
    RunInfo,
    RunRow,
    RunStatus,
    TaskState,
    UpdateInfo,
    UpdateState,
)
from burrow.store.sql import statement
from burrow.store.transactions import Txn

OPEN_TASK_STATES = (TaskState.READY, TaskState.LEASED)


def run_row(row: sql.AnyRow) -> RunRow:
    """The typed run from a row holding the `runs` columns (other columns are ignored)."""
    return RunRow(
        run_id=row.run_id,
        namespace=row.namespace,
        workflow_id=row.workflow_id,
        workflow_type=row.workflow_type,
        task_queue=row.task_queue,
        connection=row.connection,
        build_id=row.build_id,
        status=RunStatus(row.status),
        input=row.input,
        result=row.result,
        failure=row.failure,
        last_event_seq=row.last_event_seq,
        last_step_seq=row.last_step_seq,
        cancel_requested=row.cancel_requested,
        continued_from_run_id=row.continued_from_run_id,
        continued_to_run_id=row.continued_to_run_id,
        created_at=row.created_at,
        closed_at=row.closed_at,
        notify_queue=row.notify_queue,
        # Statements that return named columns of a run leave these out (0012's too).
        workflow_definition_fingerprint=getattr(row, "workflow_definition_fingerprint", None),
        parent_workflow_id=getattr(row, "parent_workflow_id", None),
        parent_run_id=getattr(row, "parent_run_id", None),
        parent_step_seq=getattr(row, "parent_step_seq", None),
        has_children=getattr(row, "has_children", False),
        execution_timeout_seconds=getattr(row, "execution_timeout_seconds", None),
        run_timeout_seconds=getattr(row, "run_timeout_seconds", None),
        execution_deadline_at=getattr(row, "execution_deadline_at", None),
        run_deadline_at=getattr(row, "run_deadline_at", None),
        retry_policy=getattr(row, "retry_policy", None),
        retry_attempt=getattr(row, "retry_attempt", 1),
        retry_of_run_id=getattr(row, "retry_of_run_id", None),
    )


async def lock_run(conn: AsyncConnection, *, run_id: str) -> RunRow:
    """Lock a run row: the serialisation point for every change to one run's history."""
    row = (
        await conn.execute(
            sa.select(s.runs).where(s.runs.c.run_id == run_id).with_for_update(key_share=True)
        )
    ).first()
    if row is None:
        raise errors.WorkflowNotFoundError(namespace="?", run_id=run_id)
    return run_row(row)


async def find_run(
    conn: AsyncConnection, *, namespace: str, workflow_id: str, run_id: str | None = None
) -> RunRow:
    """The named run, or the latest run of the workflow id, in this namespace."""
    r = s.runs.c
    stmt = sa.select(s.runs).where(r.namespace == namespace, r.workflow_id == workflow_id)
    if run_id is not None:
        stmt = stmt.where(r.run_id == run_id)
    row = (await conn.execute(stmt.order_by(r.created_at.desc()).limit(1))).first()
    if row is None:
        raise errors.WorkflowNotFoundError(
            namespace=namespace, workflow_id=workflow_id, run_id=run_id or ""
        )
    return run_row(row)


async def find_run_or_none(
    conn: AsyncConnection, *, namespace: str, workflow_id: str
) -> RunRow | None:
    """The latest run of the workflow id in this namespace, or None."""
    r = s.runs.c
    stmt = sa.select(s.runs).where(r.namespace == namespace, r.workflow_id == workflow_id)
    row = (await conn.execute(stmt.order_by(r.created_at.desc()).limit(1))).first()
    return None if row is None else run_row(row)


async def lock_run_if_present(conn: AsyncConnection, *, run_id: str) -> RunRow | None:
    """`lock_run`, or None when no run has this id."""
    stmt = sa.select(s.runs).where(s.runs.c.run_id == run_id).with_for_update(key_share=True)
    row = (await conn.execute(stmt)).first()
    return None if row is None else run_row(row)


# Runs, each with `WorkflowStarted` as event 1 and its first workflow task, in one statement.
# The id-reuse policy is applied by the INSERT itself, never read first: the partial unique index
# on running runs refuses a second running run of an id (also twice in one batch, or against a
# start committed meanwhile), and the other policies also refuse an id any run of which the
# statement sees. A start that inserts nothing gets the latest run of its id it saw, if any.
_CREATE_RUNS = statement(
    """
    WITH asked AS (
        SELECT * FROM jsonb_to_recordset(CAST(:runs AS jsonb)) AS w(
            ord int, run_id uuid, task_id uuid, namespace text, workflow_id text,
            workflow_type text, connection text, task_queue text, build_id text, input jsonb,
            continued_from_run_id uuid, notify_queue text, policy text, started jsonb,
            fingerprint text, parent_run_id uuid, parent_workflow_id text, parent_step_seq int,
            execution_timeout_seconds float8, run_timeout_seconds float8,
            execution_deadline_at timestamptz, retry_policy jsonb, retry_attempt int,
            retry_of_run_id uuid)
    ), pinned AS (
        -- M7: a fresh start (not continued, retried or a child) naming no build pins to the
        -- build an operator promoted on its queue (store/rollouts.py), if any.
        SELECT asked.*, coalesce(asked.build_id, (
            SELECT NULLIF(p.build_key, '') FROM build_rollouts p
            WHERE p.namespace = asked.namespace AND p.task_queue = asked.task_queue
              AND p.promoted_at IS NOT NULL AND asked.continued_from_run_id IS NULL
              AND asked.retry_of_run_id IS NULL AND asked.parent_run_id IS NULL))
            AS pinned_build_id
        FROM asked
    ), wanted AS (
        -- S8: a start that does not know the definition takes the fingerprint the active worker
        -- of its queue (and build, when pinned) heard from last registered for the type.
        SELECT pinned.*, coalesce(pinned.fingerprint, (
            SELECT reg.workflow_fingerprints ->> pinned.workflow_type FROM worker_registrations reg
            WHERE reg.namespace = pinned.namespace AND reg.task_queue = pinned.task_queue
              AND reg.state = 'active' AND reg.workflow_fingerprints ? pinned.workflow_type
              AND (pinned.pinned_build_id IS NULL OR reg.build_id = pinned.pinned_build_id)
            ORDER BY reg.heartbeat_at DESC LIMIT 1)) AS definition_fingerprint,
            -- The execution deadline covers the chain: a continued or retried run keeps it.
            coalesce(pinned.execution_deadline_at,
                     now() + make_interval(secs => pinned.execution_timeout_seconds))
                AS execution_deadline,
            now() + make_interval(secs => pinned.run_timeout_seconds) AS run_deadline
        FROM pinned
    ), run AS (
        INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, connection, task_queue,
                          build_id, input, last_event_seq, continued_from_run_id,
                          notify_queue, workflow_definition_fingerprint, parent_run_id,
                          parent_workflow_id, parent_step_seq, execution_timeout_seconds,
                          run_timeout_seconds, execution_deadline_at, run_deadline_at,
                          retry_policy, retry_attempt, retry_of_run_id)
        SELECT run_id, namespace, workflow_id, workflow_type, connection, task_queue,
               pinned_build_id, input, 1, continued_from_run_id, notify_queue,
               definition_fingerprint, parent_run_id, parent_workflow_id, parent_step_seq,
               execution_timeout_seconds, run_timeout_seconds, execution_deadline, run_deadline,
               retry_policy, coalesce(retry_attempt, 1), retry_of_run_id
        FROM wanted
        -- allow-duplicate reads nothing: the index alone decides (OR stops at the first true).
        WHERE wanted.policy = 'allow-duplicate' OR NOT EXISTS (
            SELECT 1 FROM runs AS r
            WHERE r.namespace = wanted.namespace AND r.workflow_id = wanted.workflow_id)
        ORDER BY ord
        ON CONFLICT (namespace, workflow_id) WHERE status = 'running' DO NOTHING
        RETURNING *
    ), started AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id)
        SELECT run.run_id, 1, CAST(:started_type AS text),
               wanted.started || jsonb_strip_nulls(jsonb_build_object(
                   'workflow_definition_fingerprint', wanted.definition_fingerprint,
                   'execution_deadline_at', wanted.execution_deadline,
                   'run_deadline_at', wanted.run_deadline)),
               'workflow-started',
               wanted.task_id
        FROM run JOIN wanted USING (run_id)
    ), task AS (
        {insert_task}
    )
    SELECT run.*, wanted.ord, wanted.task_id AS first_task_id, true AS created
    FROM run JOIN wanted USING (run_id)
    UNION ALL
    SELECT latest.*, wanted.ord, NULL, false
    FROM wanted CROSS JOIN LATERAL (
        SELECT * FROM runs AS r
        WHERE r.namespace = wanted.namespace AND r.workflow_id = wanted.workflow_id
        ORDER BY r.created_at DESC LIMIT 1
    ) AS latest
    WHERE wanted.run_id NOT IN (SELECT run_id FROM run)
    """.format(
        insert_task=fragments.insert_workflow_task(
            "first_task_id",
            "(SELECT run.*, wanted.task_id AS first_task_id"
            " FROM run JOIN wanted USING (run_id)) AS created",
        )
    ),
)


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create: what `Store.start_workflow` (or a continue-as-new) asks for."""

    namespace: str
    workflow_id: str
    workflow_type: str
    task_queue: str
    input: JsonDict
    connection: str = "default"
    build_id: str | None = None
    continued_from_run_id: str | None = None
    notify_queue: str | None = None
    """The starting client's broker queue, which hears the run's changes unbound."""
    id_reuse_policy: IdReusePolicy = IdReusePolicy.ALLOW_DUPLICATE
    run_id: str | None = None
    """The new run's id; None: a new UUID."""
    workflow_definition_fingerprint: str | None = None
    """S8: the definition's fingerprint; None: the one the active worker of the queue (and build)
    heard from last registered for the type."""
    parent: ParentLink | None = None
    """The parent's run and step, for a child run (and every run of the child's chain)."""
    execution_timeout_seconds: float | None = None
    run_timeout_seconds: float | None = None
    execution_deadline_at: datetime | None = None
    """The chain's deadline, for a run continuing a chain; None: now + execution timeout."""
    retry_policy: JsonDict | None = None
    retry_attempt: int = 1
    retry_of_run_id: str | None = None
    memo: JsonDict | None = None
    """Any JSON object within `visibility_values.MAX_MEMO_BYTES` (checked as it is created)."""
    search_attributes: Mapping[str, object] | None = None
    """Typed against the namespace's registry as the run is created (run_visibility)."""


class ChainFields(TypedDict):
    """What every run of a chain (continued as new, or retried) takes from the run before."""

    parent: ParentLink | None
    execution_timeout_seconds: float | None
    run_timeout_seconds: float | None
    execution_deadline_at: datetime | None
    retry_policy: JsonDict | None


def chain_fields(run: RunRow) -> ChainFields:
    """The parent, the timeouts (and the chain's deadline) and the retry policy of `run`."""
    parent = None
    if run.parent_run_id is not None and run.parent_step_seq is not None:
        parent = ParentLink(run.parent_run_id, run.parent_workflow_id or "", run.parent_step_seq)
    return {
        "parent": parent,
        "execution_timeout_seconds": run.execution_timeout_seconds,
        "run_timeout_seconds": run.run_timeout_seconds,
        "execution_deadline_at": run.execution_deadline_at,
        "retry_policy": run.retry_policy,
    }


@dataclass(frozen=True, slots=True)
class ParentLink:
    """The run, workflow id and step of the parent that started a child."""

    run_id: str
    workflow_id: str
    step_seq: int


@dataclass(frozen=True, slots=True)
class Refused:
    """A start that created no run: the latest run of its id the statement saw, if it saw one.

    None when the run in the way was created concurrently (after the statement began) or
    earlier in the same batch.
    """

    latest: RunInfo | None


async def create_runs(txn: Txn[sql.Conn], wanted: Sequence[NewRun]) -> list[RunInfo | Refused]:
    """Insert runs, each with `WorkflowStarted` as event 1 and its first task, in ONE statement.

    Returns, in order, each created run, or `Refused` where its id-reuse policy (or a run of its
    id started earlier in the same batch) kept it from being created.
    """
    rows: list[JsonDict] = []
    conn = txn.conn
    visible = any(new.memo or new.search_attributes for new in wanted)
    if visible and not isinstance(conn, AsyncConnection):
        raise TypeError("a start with a memo or search attributes needs a store transaction")
    for new in wanted:
        if new.memo:
            visibility_values.check_memo(new.memo)  # PayloadError, PayloadTooLarge
    values = [
        await run_visibility.typed_start_values(conn, new.namespace, new.search_attributes)
        if isinstance(conn, AsyncConnection)
        else []
        for new in wanted
    ]
    for ord_, new in enumerate(wanted):
        run_id = new.run_id or str(uuid.uuid4())
        started = events.WorkflowStarted(
            workflow_type=new.workflow_type,
            workflow_instance_id=new.workflow_id,
            workflow_run_id=run_id,
            continued_from_run_id=new.continued_from_run_id,
            parent_workflow_instance_id=None if new.parent is None else new.parent.workflow_id,
            parent_workflow_run_id=None if new.parent is None else new.parent.run_id,
            parent_sequence=None if new.parent is None else new.parent.step_seq,
            execution_timeout_seconds=new.execution_timeout_seconds,
            run_timeout_seconds=new.run_timeout_seconds,
            retry_policy=None
            if new.retry_policy is None
            else RetrySpec.from_json(new.retry_policy),
            retry_attempt=None if new.retry_attempt == 1 else new.retry_attempt,
            retry_of_run_id=new.retry_of_run_id,
            memo=new.memo or None,
            search_attributes=dict(new.search_attributes or {}) if values[ord_] else None,
        )
        rows.append(
            {
                "ord": ord_,
                "run_id": run_id,
                "task_id": str(uuid.uuid4()),
                "namespace": new.namespace,
                "workflow_id": new.workflow_id,
                "workflow_type": new.workflow_type,
                "connection": new.connection,
                "task_queue": new.task_queue,
                "build_id": new.build_id,
                "input": new.input,
                "continued_from_run_id": new.continued_from_run_id,
                "notify_queue": new.notify_queue,
                "policy": new.id_reuse_policy.value,
                "started": started.to_json(),
                "fingerprint": new.workflow_definition_fingerprint,
                "parent_run_id": None if new.parent is None else new.parent.run_id,
                "parent_workflow_id": None if new.parent is None else new.parent.workflow_id,
                "parent_step_seq": None if new.parent is None else new.parent.step_seq,
                "execution_timeout_seconds": new.execution_timeout_seconds,
                "run_timeout_seconds": new.run_timeout_seconds,
                "execution_deadline_at": (
                    None
                    if new.execution_deadline_at is None
                    else new.execution_deadline_at.isoformat()
                ),
                "retry_policy": new.retry_policy,
                "retry_attempt": new.retry_attempt,
                "retry_of_run_id": new.retry_of_run_id,
            }
        )
    found = await sql.fetch(
        txn.conn,
        _CREATE_RUNS,
        {"runs": json.dumps(rows), "started_type": events.WorkflowStarted.event_type},
    )
    by_ord = {row.ord: row for row in found}
    outcomes: list[RunInfo | Refused] = []
    for ord_ in range(len(rows)):
        row = by_ord.get(ord_)
        if row is None or not row.created:
            outcomes.append(Refused(None if row is None else run_row(row).info()))
            continue
        txn.notify(row.namespace, row.connection, row.task_queue, "workflow", row.first_task_id)
        if isinstance(conn, AsyncConnection) and (wanted[ord_].memo or values[ord_]):
            await run_visibility.write_start(
                conn,
                namespace=row.namespace,
                run_id=str(row.run_id),
                memo=wanted[ord_].memo,
                values=values[ord_],
            )
        outcomes.append(run_row(row).info())
    return outcomes


def answer_start(new: NewRun, outcome: RunInfo | Refused) -> RunInfo:
    """The run a start returns: the created one, or under `USE_EXISTING` the running one.

    Raises:
        WorkflowAlreadyStartedError: the start was refused, naming the run in the way if seen.
    """
    if not isinstance(outcome, Refused):
        return outcome
    latest = outcome.latest
    if latest is not None and latest.status == RunStatus.RUNNING:
        if new.id_reuse_policy is IdReusePolicy.USE_EXISTING:
            return latest
    elif new.id_reuse_policy is IdReusePolicy.ALLOW_DUPLICATE:
        latest = None  # only a running run refuses it: one begun after the statement did
    raise errors.WorkflowAlreadyStartedError(
        namespace=new.namespace,
        workflow_id=new.workflow_id,
        run_id="" if latest is None else latest.run_id,
        status=RunStatus.RUNNING.value if latest is None else latest.status.value,
    )


async def create_run(txn: Txn[sql.Conn], new: NewRun) -> RunInfo:
    """`create_runs` for one run, answered by `answer_start` (a run continued as new)."""
    [outcome] = await create_runs(txn, [new])
    return answer_start(new, outcome)


_ENSURE_WORKFLOW_TASK = statement(
    """
    WITH created AS (
        {insert_task}
        WHERE run_id = :run_id AND status = 'running'
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    ), {flagged}
    SELECT task_id, namespace, connection, queue, sticky_owner, true AS created FROM created
    UNION ALL
    -- Claims skip a run while a transaction holds it (SKIP LOCKED), so a task already waiting
    -- is announced again once this one commits.
    SELECT task_id, namespace, connection, queue, {sticky_owner}, false FROM workflow_tasks
    WHERE run_id = :run_id AND state = 'ready' AND NOT EXISTS (SELECT 1 FROM created)
    """.format(
        insert_task=fragments.insert_workflow_task(":task_id", "runs"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
        flagged=fragments.flag_leased_task(":run_id"),
    )
)


async def ensure_workflow_task(
    txn: Txn[AsyncConnection], *, run: RunRow, task_id: str | None = None
) -> str | None:
    """Create a ready workflow task unless one is open; returns the new task id if created.

    The caller holds the run. Whether created or already waiting, a ready task is announced
    after commit.
    """
    row = await sql.first(
        txn.conn,
        _ENSURE_WORKFLOW_TASK,
        {"task_id": task_id or str(uuid.uuid4()), "run_id": run.run_id},
    )
    if row is None:
        return None
    txn.notify_workflow_task(row)
    return str(row.task_id) if row.created else None


async def record_external_event(
    txn: Txn[AsyncConnection], *, run: RunRow, event: NewEvent, wakes_workflow: bool = True
) -> bool:
    """Queue an event for the run's next workflow task and make sure one exists."""
    recorded = await history.add_inbox_event(
        txn.conn, run_id=run.run_id, event=event, wakes_workflow=wakes_workflow
    )
    if recorded and wakes_workflow and run.status == RunStatus.RUNNING:
        await ensure_workflow_task(txn, run=run)
    return recorded


def require_running(run: RunRow) -> None:
    """Raise WorkflowNotRunningError unless the run is open."""
    if run.status != RunStatus.RUNNING:
        raise errors.WorkflowNotRunningError(run_id=run.run_id, status=run.status.value)


async def accept_update(
    txn: Txn[AsyncConnection], *, run: RunRow, update_name: str, arguments: JsonDict, update_id: str
) -> bool:
    """Accept an update once per update id; False when that id was already accepted."""
    require_running(run)
    inserted = (
        await txn.conn.execute(
            pg.insert(s.updates)
            .values(
                run_id=run.run_id, update_id=update_id, update_name=update_name, arguments=arguments
            )
            .on_conflict_do_nothing()
            .returning(s.updates.c.update_id)
        )
    ).first()
    if inserted is None:
        return False
    accepted = events.UpdateAccepted(
        update_id=update_id,
        update_name=update_name,
        workflow_instance_id=run.workflow_id,
        workflow_run_id=run.run_id,
        arguments=arguments,
    )
    event = NewEvent(accepted, f"update:{update_id}")
    return await record_external_event(txn, run=run, event=event)


async def get_update(conn: AsyncConnection, *, run_id: str, update_id: str) -> UpdateInfo | None:
    """The update's state, result and failure, or None."""
    u = s.updates.c
    stmt = sa.select(s.updates).where(u.run_id == run_id, u.update_id == update_id)
    row = (await conn.execute(stmt)).first()
    if row is None:
        return None
    return UpdateInfo(
        run_id=str(row.run_id),
        update_id=row.update_id,
        update_name=row.update_name,
        state=UpdateState(row.state),
        result=row.result,
        failure=row.failure,
    )


async def request_cancel(txn: Txn[AsyncConnection], *, run: RunRow, reason: str) -> bool:
    """Ask the workflow to cancel; its code decides how (it sees a cancellation)."""
    conn = txn.conn
    require_running(run)
    await conn.execute(
        sa.update(s.runs).where(s.runs.c.run_id == run.run_id).values(cancel_requested=True)
    )
    a = s.activity_tasks.c
    # W8, except an activity whose code chose to abandon it: its policy leaves it running.
    open_work = (a.run_id == run.run_id, fragments.state_is(a.state, *OPEN_TASK_STATES))
    await conn.execute(
        sa.update(s.activity_tasks)
        .where(*open_work, ~fragments.abandoned_activity(a))
        .values(cancel_requested=True)
    )
    requested = events.CancelRequested(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, reason=reason
    )
    event = NewEvent(requested, "cancel-requested")
    return await record_external_event(txn, run=run, event=event)


_CLOSE_OPEN_WORK = statement(f"WITH {fragments.close_open_work(':run_id')} SELECT 1")


async def close_open_work(conn: AsyncConnection, *, run_id: str) -> None:
    """Cancel a closed run's open tasks and timers so nothing runs for it again."""
    await sql.execute(conn, _CLOSE_OPEN_WORK, {"run_id": run_id})


async def terminate_run(txn: Txn[AsyncConnection], *, run: RunRow, reason: str) -> None:
    """Close the run at once, without running workflow code."""
    conn = txn.conn
    require_running(run)
    terminated = events.WorkflowTerminated(
        workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, reason=reason
    )
    event = NewEvent(terminated, "workflow-terminated")
    last = await history.append_events(
        conn, run_id=run.run_id, after_seq=run.last_event_seq, events=[event], workflow_task_id=None
    )
    failure = {"message": reason, "exception_type": "Terminated"}
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(
            status=RunStatus.TERMINATED,
            last_event_seq=last,
            failure=failure,
            closed_at=sa.func.now(),
        )
    )
    await close_open_work(conn, run_id=run.run_id)
    outcome = ready.RunOutcome(status=RunStatus.TERMINATED.value, failure=failure)
    txn.notify_run(
        run.namespace, run.run_id, ready.Change.CLOSED, outcome, notify_queue=run.notify_queue
    )
