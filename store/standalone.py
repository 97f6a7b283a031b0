"""Standalone activities: an activity execution without workflow code (PROTOCOL.md 17).

One is a host run (workflow type HOST_WORKFLOW_TYPE, workflow id = the activity id) holding ONE
activity task at step 1, claimed by ordinary activity workers of its queue, with the usual
retries, timeouts, heartbeats and cancellation (store/activities.py). No worker runs the host's
workflow tasks: the first is cancelled at the start, and when the activity closes, `settle`
moves the run's inbox into its history and closes the run with the activity's outcome, in the
closing transaction (a failure or timeout) or in the statement right after it (a completion);
the repair pass settles any host left open (`settle_pending`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.store import history, ready, runs, sql
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.isolation import RepairStep, RowRef, Tally, each_row, held_out, marked
from burrow.store.models import IdReusePolicy, JsonDict, RunRow, RunStatus, TaskState
from burrow.store.sql import statement
from burrow.store.transactions import Txn

HOST_WORKFLOW_TYPE = "burrow.standalone_activity"
"""The workflow type of a standalone activity's host run; no worker declares it."""
HOST_STEP = 1
SETTLE_BATCH = 500

_CLOSING = {
    events.ActivityCompleted.event_type: RunStatus.COMPLETED,
    events.ActivityFailed.event_type: RunStatus.FAILED,
    events.ActivityTimedOut.event_type: RunStatus.FAILED,
    events.ActivityCancelled.event_type: RunStatus.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class NewStandaloneActivity:
    """What `Store.start_activity` asks for; the options are validated by the caller."""

    namespace: str
    activity_id: str
    activity_type: str
    task_queue: str
    arguments: JsonDict
    retry_policy: JsonDict
    activity_class: str | None = None
    business_key: str | None = None
    connection: str = "default"
    schedule_to_start_seconds: float | None = None
    start_to_close_seconds: float | None = None
    schedule_to_close_seconds: float | None = None
    heartbeat_seconds: float | None = None
    notify_queue: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class StandaloneActivityInfo:
    """One standalone activity: its host run and its execution, as described to clients."""

    activity_id: str
    run_id: str
    namespace: str
    activity_type: str
    activity_class: str | None
    business_key: str | None
    task_queue: str
    activity_execution_id: str
    status: RunStatus
    """The host run's status."""
    activity_status: str
    """The activity task's state (ready, leased, completed, failed, timed_out, cancelled)."""
    attempt: int
    arguments: JsonDict
    result: JsonDict | None
    failure: JsonDict | None
    last_failure: JsonDict | None
    created_at: datetime
    closed_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    schedule_to_start_seconds: float | None
    schedule_to_close_deadline: datetime | None


@dataclass(frozen=True, slots=True)
class StandalonePage:
    """A page of standalone activities, newest first, and the key the next page starts after."""

    activities: list[StandaloneActivityInfo]
    next_after: tuple[datetime, str] | None


async def start(txn: Txn[AsyncConnection], new: NewStandaloneActivity) -> StandaloneActivityInfo:
    """Create the host run, its activity task and the standalone row, in the caller's txn.

    Activity ids share the workflow id space of the namespace and are never reused.

    Raises:
        WorkflowAlreadyStartedError: a run of that id exists; nothing was written.
    """
    conn = txn.conn
    wanted = runs.NewRun(
        namespace=new.namespace,
        workflow_id=new.activity_id,
        workflow_type=HOST_WORKFLOW_TYPE,
        task_queue=new.task_queue,
        input=new.arguments,
        connection=new.connection,
        notify_queue=new.notify_queue,
        id_reuse_policy=IdReusePolicy.REJECT_DUPLICATE,
        run_id=new.run_id,
    )
    [outcome] = await runs.create_runs(txn, [wanted])
    run = runs.answer_start(wanted, outcome)
    # The host's first workflow task has nothing to run: cancelled before anything claims it.
    await runs.close_open_work(conn, run_id=run.run_id)
    task_id = str(uuid.uuid4())
    execution_id = f"{run.run_id}:{HOST_STEP}"
    s2close = new.schedule_to_close_seconds
    now = (await conn.execute(sa.select(sa.func.now()))).scalar_one()
    await conn.execute(
        sa.insert(s.activity_tasks).values(
            task_id=task_id,
            run_id=run.run_id,
            step_seq=HOST_STEP,
            activity_type=new.activity_type,
            activity_execution_id=execution_id,
            activity_attempt_id=str(uuid.uuid4()),
            namespace=new.namespace,
            connection=new.connection,
            queue=new.task_queue,
            build_id=None,
            arguments=new.arguments,
            retry_policy=new.retry_policy,
            schedule_to_start_seconds=new.schedule_to_start_seconds,
            start_to_close_seconds=new.start_to_close_seconds,
            schedule_to_close_seconds=s2close,
            heartbeat_seconds=new.heartbeat_seconds,
            schedule_to_close_deadline=None
            if s2close is None
            else now + timedelta(seconds=s2close),
            session_id=None,
        )
    )
    await conn.execute(
        sa.update(s.runs).where(s.runs.c.run_id == run.run_id).values(last_step_seq=HOST_STEP)
    )
    await conn.execute(
        sa.insert(s.standalone_activities).values(
            run_id=run.run_id,
            namespace=new.namespace,
            activity_id=new.activity_id,
            activity_type=new.activity_type,
            activity_class=new.activity_class,
            business_key=new.business_key,
            task_queue=new.task_queue,
            task_id=task_id,
            activity_execution_id=execution_id,
        )
    )
    txn.notify(new.namespace, new.connection, new.task_queue, "activity", task_id)
    found = await describe(conn, namespace=new.namespace, run_id=run.run_id)
    assert found is not None  # written above, in this transaction
    return found


def _described() -> sa.Select[tuple[object, ...]]:
    sa_ = s.standalone_activities.c
    r = s.runs.c
    a = s.activity_tasks.c
    return sa.select(
        sa_.activity_id,
        sa_.run_id,
        sa_.namespace,
        sa_.activity_type,
        sa_.activity_class,
        sa_.business_key,
        sa_.task_queue,
        sa_.activity_execution_id,
        sa_.created_at,
        r.status,
        r.input,
        r.result,
        r.failure,
        r.closed_at,
        a.state.label("activity_status"),
        a.attempt,
        a.last_failure,
        a.started_at,
        a.heartbeat_at,
        a.schedule_to_start_seconds,
        a.schedule_to_close_deadline,
    ).select_from(
        s.standalone_activities.join(s.runs, r.run_id == sa_.run_id).join(
            s.activity_tasks, a.task_id == sa_.task_id
        )
    )


def _info(row: sql.AnyRow) -> StandaloneActivityInfo:
    return StandaloneActivityInfo(
        activity_id=row.activity_id,
        run_id=str(row.run_id),
        namespace=row.namespace,
        activity_type=row.activity_type,
        activity_class=row.activity_class,
        business_key=row.business_key,
        task_queue=row.task_queue,
        activity_execution_id=row.activity_execution_id,
        status=RunStatus(row.status),
        activity_status=row.activity_status,
        attempt=row.attempt,
        arguments=row.input,
        result=row.result,
        failure=row.failure,
        last_failure=row.last_failure,
        created_at=row.created_at,
        closed_at=row.closed_at,
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        schedule_to_start_seconds=row.schedule_to_start_seconds,
        schedule_to_close_deadline=row.schedule_to_close_deadline,
    )


async def describe(
    conn: AsyncConnection,
    *,
    namespace: str,
    activity_id: str | None = None,
    run_id: str | None = None,
) -> StandaloneActivityInfo | None:
    """The standalone activity of that id (its latest), or of that host run; None if none."""
    sa_ = s.standalone_activities.c
    stmt = _described().where(sa_.namespace == namespace)
    if run_id is not None:
        stmt = stmt.where(sa_.run_id == run_id)
    if activity_id is not None:
        stmt = stmt.where(sa_.activity_id == activity_id)
    row = (await conn.execute(stmt.order_by(sa_.created_at.desc()).limit(1))).first()
    return None if row is None else _info(row)


async def list_page(
    conn: AsyncConnection,
    *,
    namespace: str,
    statuses: Sequence[RunStatus] | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> StandalonePage:
    """Standalone activities of the namespace, newest first, after a (created_at, run_id) key."""
    sa_ = s.standalone_activities.c
    stmt = _described().where(sa_.namespace == namespace)
    if statuses is not None:
        stmt = stmt.where(s.runs.c.status.in_([status.value for status in statuses]))
    if after is not None:
        created_at, run_id = after
        key = sa.tuple_(
            sa.literal(created_at, sa_.created_at.type), sa.literal(run_id, sa_.run_id.type)
        )
        stmt = stmt.where(sa.tuple_(sa_.created_at, sa_.run_id) < key)
    stmt = stmt.order_by(sa_.created_at.desc(), sa_.run_id.desc()).limit(limit + 1)
    rows = (await conn.execute(stmt)).all()
    shown = rows[:limit]
    last = shown[-1] if len(rows) > limit and shown else None
    return StandalonePage(
        activities=[_info(row) for row in shown],
        next_after=None if last is None else (last.created_at, str(last.run_id)),
    )


_PENDING_INBOX = statement(
    """
    UPDATE inbox_events SET applied = true
    WHERE run_id = :run_id AND NOT applied
    RETURNING id, event_type, payload, idempotency_key
    """
)


async def settle(txn: Txn[AsyncConnection], *, run_id: str) -> bool:
    """Close a host run whose activity closed; True if it was closed now.

    The run's inbox (started, retried, closed events) joins its history, then the run's own
    closing event. Nothing happens to a run that is not a host, is closed, or whose activity
    is still open.
    """
    conn = txn.conn
    run = await runs.lock_run_if_present(conn, run_id=run_id)
    if run is None or run.workflow_type != HOST_WORKFLOW_TYPE or run.status != RunStatus.RUNNING:
        return False
    a = s.activity_tasks.c
    state = (
        await conn.execute(sa.select(a.state).where(a.run_id == run_id, a.step_seq == HOST_STEP))
    ).scalar()
    if state is None or TaskState(str(state)) in runs.OPEN_TASK_STATES:
        return False
    pending = sorted(await sql.fetch(conn, _PENDING_INBOX, {"run_id": run_id}), key=lambda r: r.id)
    closing = [row for row in pending if row.event_type in _CLOSING]
    if not closing:
        return False
    last = await history.append_recorded(
        conn,
        run_id=run_id,
        after_seq=run.last_event_seq,
        recorded=[(row.event_type, row.payload, row.idempotency_key) for row in pending],
    )
    await _close(txn, run=run, closed=closing[-1], after_seq=last)
    return True


async def _close(
    txn: Txn[AsyncConnection], *, run: RunRow, closed: sql.AnyRow, after_seq: int
) -> None:
    conn = txn.conn
    status = _CLOSING[closed.event_type]
    payload: JsonDict = closed.payload
    result: JsonDict | None = None
    failure: JsonDict | None = None
    event: events.Event
    if status == RunStatus.COMPLETED:
        codec = str(payload.get("payload_codec") or "avro")
        blob = str(payload.get("result") or "")
        result = {"codec": codec, "blob": blob}
        event = events.WorkflowCompleted(output=blob, payload_codec=codec)
    elif status == RunStatus.CANCELLED:
        message = str(payload.get("message") or "standalone activity cancelled")
        failure = {"message": message, "exception_type": "CancelledError"}
        event = events.WorkflowCancelled(
            workflow_instance_id=run.workflow_id, workflow_run_id=run.run_id, message=message
        )
    else:
        failure = {
            key: payload[key]
            for key in (
                "exception_type",
                "message",
                "non_retryable",
                "failure_category",
                "timeout_kind",
                "details",
            )
            if payload.get(key) is not None
        }
        event = events.WorkflowFailed(
            exception_type=failure.get("exception_type"),
            message=failure.get("message"),
            non_retryable=bool(failure.get("non_retryable")),
        )
    last = await history.append_events(
        conn,
        run_id=run.run_id,
        after_seq=after_seq,
        events=[NewEvent(event, "workflow-closed")],
        workflow_task_id=None,
    )
    await conn.execute(
        sa.update(s.runs)
        .where(s.runs.c.run_id == run.run_id)
        .values(
            status=status,
            result=result,
            failure=failure,
            last_event_seq=last,
            closed_at=sa.func.now(),
        )
    )
    await runs.close_open_work(conn, run_id=run.run_id)
    await conn.execute(
        sa.update(s.standalone_activities)
        .where(s.standalone_activities.c.run_id == run.run_id)
        .values(settled_at=sa.func.now())
    )
    outcome = ready.RunOutcome(status=status.value, result=result, failure=failure)
    txn.notify_run(
        run.namespace, run.run_id, ready.Change.CLOSED, outcome, notify_queue=run.notify_queue
    )


_UNSETTLED = statement(
    f"""
    SELECT sa.run_id, sa.namespace,
           {marked(RepairStep.STANDALONE_SETTLE, "sa.run_id::text")} AS marked
    FROM standalone_activities sa
    JOIN activity_tasks a ON a.task_id = sa.task_id
    WHERE sa.settled_at IS NULL AND a.state NOT IN ('ready', 'leased')
      AND NOT {held_out(RepairStep.STANDALONE_SETTLE, "sa.run_id::text")}
    LIMIT {SETTLE_BATCH}
    """
)
_CLOSED_ELSEWHERE = statement(
    """
    UPDATE standalone_activities sa SET settled_at = now()
    FROM runs r WHERE r.run_id = sa.run_id AND sa.settled_at IS NULL AND r.status <> 'running'
    """
)


async def settle_pending(txn: Txn[AsyncConnection], *, tally: Tally | None = None) -> int:
    """Repair: settle hosts whose activity closed without it (the follow-up statement failed).

    Hosts closed another way (cancelled or terminated through the control plane) are marked
    settled too, so the pass never looks at them again. A host whose settling raises is
    isolated as any repair row is (store/isolation.py).
    """
    await sql.execute(txn.conn, _CLOSED_ELSEWHERE, {})
    refs = [
        RowRef(
            key=str(row.run_id), namespace=row.namespace, run_id=str(row.run_id), marked=row.marked
        )
        for row in await sql.fetch(txn.conn, _UNSETTLED, {})
    ]

    async def settle_all(batch: Sequence[RowRef]) -> int:
        return sum([await settle(txn, run_id=ref.run_id) for ref in batch])

    return await each_row(txn, RepairStep.STANDALONE_SETTLE, refs, settle_all, tally or Tally())
