"""Child workflows: starting one, its close reaching its parent, and parent close policies.

A child is a run like any other whose row names its parent's run and step (`runs.parent_*`,
kept by every run of the child's chain), plus one `child_workflows` row per child the parent
started. Everything here runs in the transaction that changes the run:

- `start_all` creates the children's first runs in the parent's completion, all in one
  statement (never twice: the completion is atomic and a child's id is derived from the
  parent's run and step);
- `run_closed` is called by every path that finally closes a run (a completion, termination,
  a timeout): it queues the child's `ChildRun*` event in the parent's inbox, which wakes the
  parent, and marks the run's own open children whose close policy must now be applied;
- `apply_close_policies` applies those marks: the repair pass runs it, so a policy is applied
  exactly once even when the closing worker died just after its commit. The marking
  transaction records a `ClosePoliciesPending` notice, which runs a sweeping process's next
  pass at once after the commit.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.protocol.shapes import ExceptionInfo, Failure, JsonDict
from burrow.store import runs, signals
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import ChildInfo, IdReusePolicy, RunInfo, RunRow, RunStatus
from burrow.store.ready import ClosePoliciesPending
from burrow.store.transactions import Txn

POLICY_NONE = "none"
POLICY_PENDING = "pending"
POLICY_APPLIED = "applied"
CLOSE_POLICY_BATCH = 100


def child_workflow_id(parent: RunRow, step: int) -> str:
    """The id of a child started without one: unique per parent run and step, so deterministic."""
    return f"{parent.run_id}:child:{step}"


def closed_key(step: int) -> str:
    """The once-only key of the event that reports the child of `step` closed (D3)."""
    return f"child:{step}:closed"


@dataclass(frozen=True, slots=True)
class StartedChild:
    """A child start as planned: its id and its first run's id (which `start_all` creates).

    `in_the_way` is the run that kept it from starting, once `start_all` found one.
    """

    workflow_id: str
    run_id: str
    command: cmd.StartChildWorkflow
    step: int
    in_the_way: RunInfo | None = None


def planned_start(parent: RunRow, command: cmd.StartChildWorkflow, step: int) -> StartedChild:
    """The child a start command names, with a new run id for its first run."""
    workflow_id = command.workflow_id or child_workflow_id(parent, step)
    return StartedChild(workflow_id, str(uuid.uuid4()), command, step)


async def start_all(
    txn: Txn[AsyncConnection], *, parent: RunRow, wanted: Sequence[StartedChild]
) -> list[StartedChild]:
    """Create the children's first runs (one statement), their rows, and mark the parent.

    Returns the starts refused because their id had a running run (`in_the_way` set): those
    started nothing, and their parent records them as failed (`ChildWorkflowAlreadyStarted`).
    """
    if not wanted:
        return []
    news = [_new_run(parent, child) for child in wanted]
    outcomes = await runs.create_runs(txn, news)
    refused: list[StartedChild] = []
    rows: list[dict[str, object]] = []
    for child, outcome in zip(wanted, outcomes, strict=True):
        if isinstance(outcome, runs.Refused):
            refused.append(dataclasses.replace(child, in_the_way=outcome.latest))
            continue
        rows.append(
            {
                "parent_run_id": parent.run_id,
                "step_seq": child.step,
                "namespace": parent.namespace,
                "child_workflow_id": child.workflow_id,
                "child_run_id": outcome.run_id,
                "workflow_type": child.command.workflow_type,
                "parent_close_policy": child.command.parent_close_policy,
                "cancellation_policy": child.command.cancellation_policy,
            }
        )
    if rows:
        await txn.conn.execute(pg.insert(s.child_workflows), rows)
        if not parent.has_children:
            await txn.conn.execute(
                sa.update(s.runs).where(s.runs.c.run_id == parent.run_id).values(has_children=True)
            )
    return refused


def _new_run(parent: RunRow, child: StartedChild) -> runs.NewRun:
    command = child.command
    return runs.NewRun(
        namespace=parent.namespace,
        workflow_id=child.workflow_id,
        workflow_type=command.workflow_type,
        task_queue=command.queue,
        input=dict(command.arguments),
        connection=command.connection or parent.connection,
        build_id=parent.build_id,  # M7: a run's compatibility family is inherited by children
        parent=runs.ParentLink(parent.run_id, parent.workflow_id, child.step),
        id_reuse_policy=IdReusePolicy.ALLOW_DUPLICATE,
        run_id=child.run_id,
        execution_timeout_seconds=command.execution_timeout_seconds,
        run_timeout_seconds=command.run_timeout_seconds,
        retry_policy=None if command.retry_policy is None else command.retry_policy.to_json(),
        memo=command.memo,
        search_attributes=command.search_attributes,
    )


@dataclass(frozen=True, slots=True)
class ClosedRun:
    """How a run finally closed, as its parent hears it."""

    status: RunStatus
    result: JsonDict | None = None
    failure: JsonDict | None = None
    closed_at: datetime | None = None


_CHILD_ROW_CLOSED = sa.text(
    """UPDATE child_workflows
    SET state = 'closed', closed_status = :status, closed_at = now()
    WHERE parent_run_id = :parent_run_id AND step_seq = :step AND state = 'running'
    RETURNING child_workflow_id, workflow_type, parent_close_policy, cancellation_policy"""
)

_MARK_POLICIES = sa.text(
    """UPDATE child_workflows SET policy_state = 'pending'
    WHERE parent_run_id = :run_id AND state = 'running' AND policy_state = 'none'
      AND parent_close_policy <> 'abandon'
    RETURNING step_seq"""
)


async def run_closed(txn: Txn[AsyncConnection], run: RunRow, closed: ClosedRun) -> bool:
    """A run closed for good: tell its parent, and mark its children's close policies.

    Not for a run continued as new or retried (its chain goes on: the parent waits for the
    last run). Returns whether a close policy is now pending (the repair pass applies it).
    """
    if run.parent_run_id is not None and run.parent_step_seq is not None:
        await _report_to_parent(txn, run, run.parent_run_id, run.parent_step_seq, closed)
    # Not gated on run.has_children: the closing task may itself have started the children.
    marked = (await txn.conn.execute(_MARK_POLICIES, {"run_id": run.run_id})).all()
    if marked:
        txn.notices.append(ClosePoliciesPending(run.run_id))  # the sweeper applies them now
    return bool(marked)


async def _report_to_parent(
    txn: Txn[AsyncConnection], run: RunRow, parent_run_id: str, step: int, closed: ClosedRun
) -> None:
    row = (
        await txn.conn.execute(
            _CHILD_ROW_CLOSED,
            {"status": closed.status.value, "parent_run_id": parent_run_id, "step": step},
        )
    ).first()
    if row is None:
        return  # already reported (a retried transaction), or the parent row is gone
    identity = events.ChildRunStarted(
        sequence=step,
        child_workflow_instance_id=run.workflow_id,
        child_workflow_run_id=run.run_id,
        child_workflow_type=run.workflow_type,
        parent_close_policy=row.parent_close_policy,
        cancellation_policy=row.cancellation_policy,
    ).model_dump(exclude={"event_type"})
    event = closed_event(identity, closed)
    # Locked as any writer of a run's inbox locks it: a completion of the parent then either
    # sees this event (and makes the next task) or commits first, and the event makes one.
    parent = await runs.lock_run_if_present(txn.conn, run_id=parent_run_id)
    if parent is None or parent.status != RunStatus.RUNNING:
        return  # a closed parent has no code left to hear it (its policy already applied)
    await runs.record_external_event(txn, run=parent, event=NewEvent(event, closed_key(step)))


def closed_event(identity: JsonDict, closed: ClosedRun) -> events.ChildClosed:
    """The `ChildRun*` event for a child that closed as `closed` (`identity`: its ids)."""
    common = {
        **identity,
        "child_status": closed.status.value,
        "closed_reason": closed.status.value,
        "closed_at": closed.closed_at,
    }
    failure = Failure.of(closed.failure or {})
    match closed.status:
        case RunStatus.COMPLETED:
            result = closed.result or {}
            return events.ChildRunCompleted.model_validate(
                {**common, "output": result.get("blob", ""), "payload_codec": result.get("codec")}
            )
        case RunStatus.CANCELLED:
            return events.ChildRunCancelled.model_validate({**common, "message": failure.message})
        case RunStatus.TERMINATED:
            return events.ChildRunTerminated.model_validate({**common, "message": failure.message})
    return events.ChildRunFailed.model_validate(
        {
            **common,
            "failure_category": failure.failure_category
            or ("timeout" if closed.status == RunStatus.TIMED_OUT else "application"),
            "exception_type": failure.exception_type,
            "exception_class": failure.exception_type,
            "message": failure.message,
            "non_retryable": failure.non_retryable or None,
            "exception": ExceptionInfo.of(failure),
        }
    )


def start_refused_event(started: StartedChild) -> events.ChildRunFailed:
    """The parent's record of a child it could not start: its id had a running run."""
    command = started.command
    in_the_way = "" if started.in_the_way is None else started.in_the_way.run_id
    return events.ChildRunFailed(
        sequence=started.step,
        child_workflow_instance_id=started.workflow_id,
        child_workflow_run_id=in_the_way,
        child_workflow_type=command.workflow_type,
        parent_close_policy=command.parent_close_policy,
        cancellation_policy=command.cancellation_policy,
        child_status="start_failed",
        closed_reason="start_failed",
        failure_category="start_failed",
        exception_type="ChildWorkflowAlreadyStarted",
        exception_class="ChildWorkflowAlreadyStarted",
        message=f"workflow id {started.workflow_id!r} already has a running run",
        non_retryable=True,
    )


# -- the parent's requests to a child it started -------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildRef:
    """A child the parent started at a step, and its chain's running run if it has one."""

    workflow_id: str
    running: RunRow | None


async def find_child(conn: AsyncConnection, *, parent: RunRow, step: int) -> ChildRef | None:
    """The child the parent started at `step`, or None if that step started none."""
    c = s.child_workflows.c
    row = (
        await conn.execute(
            sa.select(c.child_workflow_id).where(
                c.parent_run_id == parent.run_id, c.step_seq == step
            )
        )
    ).first()
    if row is None:
        return None
    latest = await runs.find_run_or_none(
        conn, namespace=parent.namespace, workflow_id=row.child_workflow_id
    )
    running = latest if latest is not None and latest.status == RunStatus.RUNNING else None
    if running is not None and running.parent_run_id != parent.run_id:
        running = None  # the id was reused by a run that is not this parent's child
    return ChildRef(row.child_workflow_id, running)


async def signal(
    txn: Txn[AsyncConnection], *, child: ChildRef, command: cmd.SignalChildWorkflow, signal_id: str
) -> bool:
    """Deliver the parent's signal to its running child; False when the child is closed."""
    if child.running is None:
        return False
    locked = await runs.lock_run(txn.conn, run_id=child.running.run_id)
    if locked.status != RunStatus.RUNNING:
        return False
    await signals.signal_run(
        txn,
        run=locked,
        signal_name=command.signal_name,
        arguments=dict(command.arguments),
        signal_id=signal_id,
    )
    return True


async def request_cancel(txn: Txn[AsyncConnection], *, child: ChildRef, reason: str) -> bool:
    """Ask the running child to cancel; False when it is closed."""
    if child.running is None:
        return False
    locked = await runs.lock_run(txn.conn, run_id=child.running.run_id)
    if locked.status != RunStatus.RUNNING:
        return False
    await runs.request_cancel(txn, run=locked, reason=reason)
    return True


async def terminate(txn: Txn[AsyncConnection], *, run: RunRow, reason: str) -> bool:
    """Terminate the run (runs.terminate_run) and tell its parent and children (`run_closed`)."""
    await runs.terminate_run(txn, run=run, reason=reason)
    failure = {"message": reason, "exception_type": "Terminated"}
    return await run_closed(txn, run, ClosedRun(RunStatus.TERMINATED, failure=failure))


# -- parent close policies (the repair pass) ---------------------------------------------------

_PENDING = sa.text(
    """SELECT parent_run_id, step_seq, namespace, child_workflow_id, parent_close_policy
    FROM child_workflows WHERE policy_state = 'pending'
    ORDER BY created_at LIMIT :limit FOR UPDATE SKIP LOCKED"""
)

_APPLIED = sa.text(
    """UPDATE child_workflows SET policy_state = 'applied', policy_applied_at = now()
    WHERE parent_run_id = :parent_run_id AND step_seq = :step"""
)


async def apply_close_policies(
    txn: Txn[AsyncConnection], *, limit: int = CLOSE_POLICY_BATCH
) -> int:
    """Apply pending parent close policies: terminate or ask to cancel each child still running.

    Terminating a child closes it, which marks its own children in turn: a later batch (or the
    next pass) applies theirs. Returns how many policies were applied.
    """
    rows = (await txn.conn.execute(_PENDING, {"limit": limit})).all()
    for row in rows:
        await _apply(txn, row)
        await txn.conn.execute(_APPLIED, {"parent_run_id": row.parent_run_id, "step": row.step_seq})
    return len(rows)


async def _apply(txn: Txn[AsyncConnection], row: sa.Row[tuple[object, ...]]) -> None:
    latest = await runs.find_run_or_none(
        txn.conn, namespace=str(row.namespace), workflow_id=str(row.child_workflow_id)
    )
    if latest is None or latest.status != RunStatus.RUNNING:
        return
    if latest.parent_run_id != str(row.parent_run_id):
        return  # its id now belongs to a run that is no child of this parent
    locked = await runs.lock_run(txn.conn, run_id=latest.run_id)
    if locked.status != RunStatus.RUNNING:
        return
    reason = (
        f"parent run {row.parent_run_id} closed (parent close policy {row.parent_close_policy})"
    )
    if row.parent_close_policy == "terminate":
        await terminate(txn, run=locked, reason=reason)
    else:
        await runs.request_cancel(txn, run=locked, reason=reason)


async def children_of(conn: AsyncConnection, *, run_ids: Sequence[str]) -> list[ChildInfo]:
    """The children the runs started, oldest first (describe and the history export)."""
    c = s.child_workflows.c
    rows = await conn.execute(
        sa.select(s.child_workflows)
        .where(c.parent_run_id.in_(list(run_ids)))
        .order_by(c.created_at, c.step_seq)
    )
    return [
        ChildInfo(
            parent_run_id=str(row.parent_run_id),
            step=row.step_seq,
            workflow_id=row.child_workflow_id,
            first_run_id=None if row.child_run_id is None else str(row.child_run_id),
            workflow_type=row.workflow_type,
            parent_close_policy=row.parent_close_policy,
            cancellation_policy=row.cancellation_policy,
            state=row.state,
            closed_status=row.closed_status,
            policy_state=row.policy_state,
        )
        for row in rows
    ]
