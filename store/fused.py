"""An activity's result and the workflow task that consumes it, written in one statement.

The worker that completes an activity often holds the run warm (sticky execution): it can run
the workflow code on with the result before writing anything, and write the attempt's
completion, the `ActivityCompleted` event and that workflow task's commands at once. That
saves the follow-up workflow task's own claim-and-completion commit. It is only done when the
result is all the task would observe: the run is still where the warm instance left it, has no
open workflow task and no waking event in its inbox. Otherwise nothing is written, and the
worker completes the activity the usual way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from burrow.protocol import commands as cmd
from burrow.protocol import events
from burrow.store import activities, claims, fragments, sql, tasks
from burrow.store.models import JsonDict, Lease, RunRow
from burrow.store.sql import statement
from burrow.store.tasks import CompletionOutcome

# The run is locked only if it is still at the warm instance's position; `idle` then looks at
# its open work afresh (burrow_run_idle, migration 0007): this statement's own snapshot may
# predate a signal, timer or result another transaction queued while it waited for the lock.
# Every write depends on `idle` through the fenced attempt (`done`), so a moved or busy run, a
# stale lease or a session attempt (W6 announces its session after) writes nothing. The inbox
# then holds only events that feed no code (ActivityStarted): they join the history first, as
# a claim would move them, then the result, then the task's own events.
_COMPLETE_WITH_WORKFLOW_TASK = statement(
    """
    WITH position AS MATERIALIZED (
        SELECT run_id FROM runs
        WHERE run_id = :run_id AND status = 'running'
          AND last_event_seq = :after_seq AND last_step_seq = :after_step
        FOR NO KEY UPDATE
    ), idle AS MATERIALIZED (
        SELECT run_id FROM position WHERE burrow_run_idle(run_id)
    ), done AS (
        UPDATE activity_tasks SET state = 'completed', lease_token = NULL
        WHERE {lease_fence} AND session_id IS NULL AND run_id IN (SELECT run_id FROM idle)
        RETURNING run_id, step_seq, activity_type, activity_execution_id, activity_attempt_id,
                  attempt
    ), task AS (
        {insert_task} WHERE run_id IN (SELECT run_id FROM done)
    ), moved AS (
        UPDATE inbox_events i SET applied = true
        FROM done WHERE i.run_id = done.run_id AND NOT i.applied
        RETURNING i.id, i.event_type, i.payload, i.idempotency_key
    ), inbox AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id)
        SELECT CAST(:run_id AS uuid), :after_seq + row_number() OVER (ORDER BY id), event_type,
               payload, idempotency_key, CAST(:workflow_task_id AS uuid)
        FROM moved
    ), recorded AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id, recorded_at)
        SELECT done.run_id, :after_seq + (SELECT count(*) FROM moved) + 1, '{completed_type}',
               {completed}, {closed_key}, CAST(:workflow_task_id AS uuid),
               CAST(:recorded_at AS timestamptz)
        FROM done
        RETURNING run_id, sequence
    ), {work}, {finish}
    SELECT (SELECT count(*) FROM done) AS fenced, (SELECT count(*) FROM moved) AS moved,
           next_task.*, {eager_leases}
    FROM (SELECT 1) AS one LEFT JOIN next_task ON true
    """.format(
        lease_fence=fragments.LEASE_FENCE,
        insert_task=fragments.insert_completed_workflow_task(
            "CAST(:workflow_task_id AS uuid)", "runs"
        ),
        completed_type=events.ActivityCompleted.event_type,
        completed=activities.ACTIVITY_COMPLETED,
        closed_key=activities.ACTIVITY_CLOSED_KEY,
        work=tasks.written_work_ctes("recorded", "recorded.sequence"),
        eager_leases=tasks.EAGER_LEASES,
        finish=tasks.finish_ctes(
            run_where="run_id IN (SELECT run_id FROM done)",
            close_when="CAST(:status AS text) IS NOT NULL AND EXISTS (SELECT 1 FROM done)",
            except_activity="CAST(:task_id AS uuid)",
            last_event_seq=":after_seq + (SELECT count(*) FROM moved) + 1 + :event_count",
        ),
    ),
    json_params=["result", "failure"],
)


@dataclass(frozen=True, slots=True)
class WorkflowTaskRun:
    """A workflow task the completing worker ran on its warm instance, to write with the result.

    `run` is the run as that instance last left it (its `last_event_seq` and `last_step_seq`
    are the position the statement checks); `recorded_at` is when the result is recorded,
    which the code saw as its current time; `commands` are what the code did with the result.
    """

    workflow_task_id: str
    run: RunRow
    recorded_at: datetime
    commands: Sequence[cmd.Command]


async def complete_with_workflow_task(
    conn: sql.Conn,
    *,
    lease: Lease,
    result: JsonDict,
    task: WorkflowTaskRun,
    eager: claims.EagerClaim | None = None,
    sticky_ttl: timedelta | None = None,
) -> CompletionOutcome:
    """Complete the attempt and the workflow task `task` in ONE statement, or write nothing.

    With `eager`, the activities the task schedules that the caller's claim would take are
    written leased to it; with `sticky_ttl`, the run stays bound to the caller (S4).

    Raises:
        NotAtPosition: nothing was written (the run moved, is busy, or the lease is stale); the
            caller completes the attempt on its own (`activities.complete_activity`).
    """
    state, leased = await tasks.plan_at_position(
        conn,
        task_id=task.workflow_task_id,
        run=task.run,
        now=task.recorded_at,
        commands=task.commands,
        eager=eager,
    )
    params = {
        **tasks.finish_params(state, lease.lease_owner, sticky_ttl, follow_up=False),
        **fragments.fence_params(lease),
        **tasks.work_params(state, leased, eager),
        "blob": result["blob"],
        "codec": result["codec"],
        "recorded_at": task.recorded_at,
        "event_count": len(state.events),
    }
    row = await tasks.written_at_position(conn, _COMPLETE_WITH_WORKFLOW_TASK, params)
    last = task.run.last_event_seq + row.moved + 1 + len(state.events)
    return await tasks.finished_at_position(conn, state, leased, eager, row, last_event_seq=last)
