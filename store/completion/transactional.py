"""The transactional completion: the statements run in order in the caller's transaction.

Every completion can take this path; the one-statement ones (at_position.py) fall back to it.
It alone runs what some commands need beside the completion's own rows (`InTransaction`):
cancelling an earlier timer, checking a skipped signal, an update's outcome, a successor run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.codec import Payload
from burrow.errors import InvalidSearchAttribute, PayloadError
from burrow.protocol import commands as cmd
from burrow.protocol.events import Event
from burrow.protocol.shapes import JsonObject
from burrow.store import (
    children,
    claims,
    condition_waits,
    cooperative,
    errors,
    fragments,
    history,
    message_streams,
    references,
    run_retries,
    run_visibility,
    runs,
    sql,
    visibility_upserts,
    workflow_streams,
)
from burrow.store import schema as s
from burrow.store.completion import plan as planning
from burrow.store.completion import statements
from burrow.store.completion.effects import CompletionOutcome, Plan, eager_candidates
from burrow.store.models import Fence, RunStatus
from burrow.store.references import FinishedUpdate
from burrow.store.transactions import Txn


async def complete_workflow_task(
    txn: Txn[AsyncConnection],
    *,
    lease: Fence,
    commands: Sequence[cmd.Command],
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
    update_task: bool = False,
    stream_cursors: Sequence[message_streams.StreamCursor] = (),
) -> CompletionOutcome:
    """Apply a workflow task's commands in the caller's transaction (store invariant 3).

    With `sticky_ttl`, the run is bound to the lease owner until then, and the workflow task it
    makes next inherits the binding (S4). With `update_task`, the task ran accepted updates on
    their own (an SDK worker, PROTOCOL.md 5.1): each completed one records `UpdateApplied`, so
    replay runs its handler at this point again, and the run gets a follow-up workflow task in
    which its code goes on with the update's effects. A continue-as-new carries the run's
    message streams to its successor as `stream_cursors` say it read them (message_streams).
    """
    conn = txn.conn
    locked = await sql.one(
        conn, statements.FENCE_AND_LOCK_RUN, fragments.fence_params(lease, "workflow task")
    )
    if locked.run_id is None:
        raise fragments.refused(locked, lease, "workflow task")
    run = runs.run_row(locked)
    plan = Plan(
        run=run,
        task_id=lease.task_id,
        now=locked.now,
        txn=txn,
        last_step=run.last_step_seq,
        update_task=update_task,
        stream_cursors=tuple(stream_cursors),
    )
    statements_ = _Statements(txn)
    await planning.plan_in_transaction(plan, commands, statements_)
    await statements_.start_children(plan)
    retried = await _retry_if_allowed(txn, plan)
    if plan.activity_rows:
        await sql.executemany(conn, statements.INSERT_ACTIVITY, plan.activity_rows)
    if plan.timer_rows:
        await sql.executemany(conn, statements.INSERT_TIMER, plan.timer_rows)
    params = statements.finish_params(plan, lease.lease_owner, sticky_ttl, follow_up=update_task)
    created = await sql.one(conn, statements.FINISH_COMPLETION, params)
    try:
        history.check_appended(run.run_id, run.last_event_seq, plan.events, created.appended)
    except ValueError as exc:  # raised before commit: the whole completion rolls back
        raise errors.InvalidCommands(task_id=lease.task_id, reason=str(exc)) from exc
    if plan.closed is not None and plan.closed.status != RunStatus.CONTINUED_AS_NEW and not retried:
        closed = children.ClosedRun(
            plan.closed.status,
            result=None if plan.closed.result is None else dict(plan.closed.result),
            failure=plan.closed.failure,
        )
        if await children.run_closed(txn, run, closed):
            plan.outcome.close_policies_pending = True
    if eager is not None:
        await _claim_eagerly(txn, plan, eager)
    outcome = plan.settle(run.last_event_seq + len(plan.events), created)
    outcome.task = fragments.fenced_task(locked, lease)
    return outcome


async def _retry_if_allowed(txn: Txn[AsyncConnection], plan: Plan) -> bool:
    """A failing run its retry policy retries: close it pointing at its retry (run_retries).

    Only a failure (FailWorkflow) is retried, never a cancellation or a termination. The parent
    of a retried run, if any, hears nothing yet: it waits for the chain's last run.
    """
    closed = plan.closed
    if closed is None or closed.status != RunStatus.FAILED or closed.failure is None:
        return False
    backoff = run_retries.retry_backoff(plan.run, dict(closed.failure), plan.now)
    if backoff is None:
        return False
    retry = await run_retries.start_retry(
        txn, run=plan.run, status=RunStatus.FAILED, backoff=backoff
    )
    plan.closed = replace(closed, continued_to_run_id=retry.run_id)
    run_retries.point_waiters(txn, run=plan.run, retry_run_id=retry.run_id)
    return True


async def _claim_eagerly(txn: Txn[AsyncConnection], plan: Plan, eager: claims.EagerClaim) -> None:
    ids = [row["task_id"] for row in eager_candidates(plan, eager)]
    if not ids:
        return
    claimed = await claims.claim_activity_tasks(
        txn.conn,
        flt=eager.flt,
        worker_id=eager.worker_id,
        lease=eager.lease,
        limit=eager.limit,
        task_ids=ids,
    )
    txn.retract({task.lease.task_id for task in claimed})
    plan.outcome.eager_activities = claimed


class Openings:
    """Steps opened beside a completion, on the claim it would complete (prepared local groups).

    Each is planned as its command would be in the task's completion (`open`), and its rows are
    written with the others (`write`); its events join `plan.events` for the caller to append.
    """

    def __init__(self, txn: Txn[AsyncConnection]) -> None:
        self._statements = _Statements(txn)

    async def open(self, plan: Plan, command: cmd.Command, step: int) -> None:
        """Plan `command` at `step`."""
        rule = planning.rule_of(command)
        if rule.apply is not None:
            await rule.apply(plan, command, step, self._statements)
        elif rule.plan is not None:
            rule.plan(plan, command, step)

    async def write(self, plan: Plan) -> None:
        """Write the rows of what was opened: children started, activities and timers."""
        await self._statements.start_children(plan)
        if plan.activity_rows:
            await sql.executemany(
                self._statements.txn.conn, statements.INSERT_ACTIVITY, plan.activity_rows
            )
        if plan.timer_rows:
            await sql.executemany(
                self._statements.txn.conn, statements.INSERT_TIMER, plan.timer_rows
            )


@dataclass(frozen=True, slots=True)
class _Statements:
    """`InTransaction` on the completion's connection: the run is locked, the lease fenced.

    Child starts wait in `starting` and are written together (`start_children`): before a
    command that names a child, and once the task's commands are planned.
    """

    txn: Txn[AsyncConnection]
    starting: list[children.StartedChild] = field(default_factory=list)

    async def start_children(self, plan: Plan) -> None:
        """Write the planned child starts; rewrite and report those their ids refused."""
        try:
            refused = await children.start_all(self.txn, parent=plan.run, wanted=self.starting)
        except (InvalidSearchAttribute, PayloadError) as exc:
            kind = "search_attributes" if isinstance(exc, InvalidSearchAttribute) else "memo"
            raise errors.InvalidVisibilityUpsert(
                task_id=plan.task_id, kind=kind, reason=f"a child's start: {exc}"
            ) from exc
        self.starting.clear()
        for start in refused:
            event = planning.refuse_child(plan, start)
            await self.queue_event(plan, event, children.closed_key(start.step))

    async def cancel_timer(self, plan: Plan, seq: int) -> float | None:
        return await references.cancel_timer(
            self.txn.conn, task_id=plan.task_id, run_id=plan.run.run_id, seq=seq
        )

    async def check_signal(self, plan: Plan, command: cmd.SkipSignal, skipped_key: str) -> None:
        await references.check_signal(
            self.txn.conn,
            task_id=plan.task_id,
            run_id=plan.run.run_id,
            command=command,
            skipped_key=skipped_key,
        )

    async def finish_update(
        self, plan: Plan, command: cmd.CompleteUpdate | cmd.FailUpdate
    ) -> FinishedUpdate:
        return await references.finish_update(
            self.txn.conn, task_id=plan.task_id, run_id=plan.run.run_id, command=command
        )

    async def start_child(
        self, plan: Plan, command: cmd.StartChildWorkflow, step: int
    ) -> children.StartedChild:
        started = children.planned_start(plan.run, command, step)
        self.starting.append(started)
        return started

    async def signal_child(
        self, plan: Plan, command: cmd.SignalChildWorkflow, signal_id: str
    ) -> tuple[str, bool]:
        child = await self._child(plan, command.type, command.child_sequence)
        delivered = await children.signal(
            self.txn, child=child, command=command, signal_id=signal_id
        )
        return child.workflow_id, delivered

    async def cancel_child(self, plan: Plan, step: int) -> tuple[str, bool]:
        child = await self._child(plan, "cancel_child_workflow", step)
        reason = f"cancelled by its parent {plan.run.workflow_id}"
        delivered = await children.request_cancel(self.txn, child=child, reason=reason)
        return child.workflow_id, delivered

    async def _child(self, plan: Plan, command: str, step: int) -> children.ChildRef:
        await self.start_children(plan)  # a child started by this very task is named too
        child = await children.find_child(self.txn.conn, parent=plan.run, step=step)
        if child is None:
            raise errors.InvalidCommandReference(
                task_id=plan.task_id,
                command=command,
                field="sequence",
                value=step,
                why="that step started no child workflow",
            )
        return child

    async def stop_activity(self, plan: Plan, step: int) -> bool:
        running = await cooperative.request_activity_stop(
            self.txn, run=plan.run, step=step, record_close=True
        )
        if running is None:
            raise errors.InvalidCommandReference(
                task_id=plan.task_id,
                command="cancel_activity",
                field="sequence",
                value=step,
                why="that step scheduled no queued activity",
            )
        return running

    async def queue_event(self, plan: Plan, event: Event, key: str) -> None:
        await history.add_inbox_event(
            self.txn.conn, run_id=plan.run.run_id, event=history.NewEvent(event, key)
        )

    async def move_condition_timer(self, plan: Plan, old_step: int, new_step: int) -> bool:
        return await condition_waits.move(
            self.txn.conn, run_id=plan.run.run_id, old_step=old_step, new_step=new_step
        )

    async def satisfy_condition_wait(self, plan: Plan, step: int) -> None:
        await condition_waits.satisfy(self.txn.conn, run_id=plan.run.run_id, step=step)

    async def workflow_stream(self, plan: Plan, directive: cmd.WorkflowStreamDirective) -> None:
        name = directive.stream_name
        if directive.operation != "append":
            await workflow_streams.close(
                self.txn,
                run=plan.run,
                stream_name=name,
                error_reason=directive.error_reason,
                retention_seconds=directive.retention_seconds,
            )
            return
        items = [
            workflow_streams.NewItem(
                payload=item.payload,
                payload_reference=item.payload_reference,
                payload_codec=item.payload_codec,
                idempotency_key=item.idempotency_key,
                item_type=item.item_type,
                content_type=item.content_type,
            )
            for item in directive.items
        ]
        reference = None
        if directive.command_identity is not None:
            reference = f"{directive.command_identity}:{directive.command_ordinal}"
        await workflow_streams.append(
            self.txn,
            run=plan.run,
            stream_name=name,
            items=items,
            origin=workflow_streams.ItemOrigin.WORKFLOW,
            origin_reference=reference,
            max_pending_items=directive.max_pending_items,
        )

    async def upsert_memo(self, plan: Plan, command: cmd.UpsertMemo) -> Payload:
        return await visibility_upserts.upsert_memo(self.txn.conn, plan, command)

    async def upsert_search_attributes(
        self, plan: Plan, command: cmd.UpsertSearchAttributes
    ) -> tuple[JsonObject, dict[str, str]]:
        return await visibility_upserts.upsert_search_attributes(self.txn.conn, plan, command)

    async def continue_run(self, plan: Plan, command: cmd.ContinueAsNew) -> str:
        run = plan.run
        # The old run must leave the open-id index before the new one takes its place.
        await self.txn.conn.execute(
            sa.update(s.runs)
            .where(s.runs.c.run_id == run.run_id)
            .values(status=RunStatus.CONTINUED_AS_NEW, closed_at=sa.func.now())
        )
        new_run = await runs.create_run(
            self.txn,
            runs.NewRun(
                namespace=run.namespace,
                workflow_id=run.workflow_id,
                workflow_type=command.workflow_type or run.workflow_type,
                task_queue=command.queue or run.task_queue,
                input=dict(command.arguments),
                connection=run.connection,
                build_id=run.build_id,
                continued_from_run_id=run.run_id,
                **runs.chain_fields(run),
                **await run_visibility.chain_metadata(
                    self.txn.conn, namespace=run.namespace, run_id=run.run_id
                ),
            ),
        )
        await message_streams.carry_streams(
            self.txn,
            task_id=plan.task_id,
            old=run,
            new_run_id=new_run.run_id,
            cursors=plan.stream_cursors,
        )
        return new_run.run_id
