"""The SQL of a workflow task completion, in its three forms, built from the same fragments.

A completion fences the task's lease and locks its run, writes its events, activity and timer
rows, then finishes: the run's last event and step, its sticky binding or its close, and the
run's next workflow task or the close of its open work. Each step is one named fragment below;
the forms compose them, so a rule changed in one changes in all:

| form                        | fence, lock run      | events and rows         | finish      |
| --------------------------- | -------------------- | ----------------------- | ----------- |
| transactional, in order     | FENCE_AND_LOCK_RUN   | INSERT_ACTIVITY, _TIMER | FINISH_     |
|                             | (FENCE_TASK)         | (history's append)      | COMPLETION  |
| COMPLETE_AT_POSITION        | RUN_AT_POSITION,     | written_work_ctes       | finish_ctes |
|                             | FENCE_TASK           |                         |             |
| COMPLETE_WITH_WORKFLOW_TASK | RUN_AT_POSITION, the | written_work_ctes       | finish_ctes |
|                             | attempt's fence      |                         |             |

Each statement is compiled once, at import (store/sql.py).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

from burrow.protocol import events
from burrow.protocol.shapes import JsonObject
from burrow.store import activities, children, claims, fragments, history, sql
from burrow.store.completion.effects import ActivityRow, Closed, Plan, TimerRow
from burrow.store.sql import statement

ACTIVITY_COLUMNS = tuple(ActivityRow.__annotations__)
TIMER_COLUMNS = tuple(TimerRow.__annotations__)

# -- fence and lock the run --------------------------------------------------------------------

FENCE_TASK = f"""UPDATE workflow_tasks
        SET state = 'completed', {fragments.RECORDED_KEEPS_TOKEN}, last_failure = NULL
        WHERE {fragments.LEASE_FENCE}"""
"""Completes the leased workflow task, only while its lease is current (store invariant 2)."""

RUN_AT_POSITION = """SELECT run_id FROM runs
        WHERE run_id = :run_id AND status = 'running'
          AND last_event_seq = :after_seq AND last_step_seq = :after_step
          AND (CAST(:status AS text) IS NULL OR (NOT has_children
               AND (retry_policy IS NULL OR CAST(:status AS text) <> 'failed')
               AND (parent_run_id IS NULL) = (CAST(:parent_event AS jsonb) IS NULL)))
        FOR NO KEY UPDATE"""
"""Locks the run only if it is still where the completing worker last saw it (RunPosition).

A close that must mark children, or a failure a retry policy may retry, is left to the
transactional path (children.run_closed, retries): the run as locked there decides. A child's
close reports to its parent here (`report_to_parent`) only when the caller brought the report.
"""

# -- write events, activity and timer rows -----------------------------------------------------


def write_events(gate: str, first_seq: str) -> str:
    """CTE `appended`: the completion's events, numbered after `first_seq` (SQL).

    Written only for the run in CTE `gate`; they belong to workflow task `:workflow_task_id`
    (`history.append_params`). No ON CONFLICT: an event already recorded fails the statement.
    """
    return f"""appended AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id)
        SELECT {gate}.run_id, {first_seq} + e.ord, e.event_type, e.payload, e.idempotency_key,
               CAST(:workflow_task_id AS uuid)
        FROM {gate}, unnest(CAST(:event_types AS text[]),
                            CAST(CAST(:payloads AS text[]) AS jsonb[]), CAST(:keys AS text[]))
             WITH ORDINALITY AS e(event_type, payload, idempotency_key, ord)
        RETURNING sequence
    )"""


def write_activities(gate: str) -> str:
    """CTEs `activities` and `started`: the scheduled attempts, for the run in CTE `gate`.

    The attempts named by `:eager_ids` are leased to the completing worker as they are written,
    as its claim would lease them (eager dispatch, no claim), and their ActivityStarted queued.
    """
    return """activities AS (
        INSERT INTO activity_tasks ({activity_columns}, state, lease_owner, lease_token,
                                    lease_expires_at, started_at, claimed_at)
        SELECT {activity_values},
               CASE WHEN a.eager THEN 'leased' ELSE 'ready' END,
               CASE WHEN a.eager THEN CAST(:eager_owner AS text) END,
               CASE WHEN a.eager THEN gen_random_uuid() END,
               CASE WHEN a.eager THEN now() + make_interval(secs => :eager_lease_seconds) END,
               CASE WHEN a.eager THEN now() END,
               CASE WHEN a.eager THEN clock_timestamp() END
        FROM {gate}, (
            SELECT r.*, r.task_id = ANY(CAST(CAST(:eager_ids AS text[]) AS uuid[])) AS eager
            FROM jsonb_to_recordset(CAST(:activities AS jsonb)) AS r(
                task_id uuid, run_id uuid, step_seq int, activity_type text,
                activity_execution_id text, activity_attempt_id uuid, namespace text,
                connection text, queue text, build_id text, arguments jsonb, retry_policy jsonb,
                schedule_to_start_seconds float8, start_to_close_seconds float8,
                schedule_to_close_seconds float8, heartbeat_seconds float8,
                schedule_to_close_deadline timestamptz, session_id text, worker_session jsonb)
        ) AS a
        RETURNING task_id, run_id, state, lease_token, lease_expires_at, scheduled_at, attempt,
                  activity_execution_id, activity_attempt_id, activity_type, step_seq,
                  started_at
    ), started AS (
        INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key, wakes_workflow)
        SELECT claimed.run_id, '{started_type}', {started},
               {started_key}, false
        FROM activities AS claimed WHERE claimed.state = 'leased'
        ON CONFLICT (run_id, idempotency_key) DO NOTHING
    )""".format(
        gate=gate,
        activity_columns=", ".join(ACTIVITY_COLUMNS),
        activity_values=", ".join(f"a.{column}" for column in ACTIVITY_COLUMNS),
        started_type=events.ActivityStarted.event_type,
        started=claims.ACTIVITY_STARTED,
        started_key=claims.ACTIVITY_STARTED_KEY,
    )


def write_timers(gate: str) -> str:
    """CTE `timers`: the started timers, for the run in CTE `gate`."""
    return f"""timers AS (
        INSERT INTO timers ({", ".join(TIMER_COLUMNS)})
        SELECT t.* FROM {gate}, jsonb_to_recordset(CAST(:timers AS jsonb)) AS t(
            run_id uuid, step_seq int, namespace text, fire_at timestamptz, delay_seconds float8)
    )"""


def written_work_ctes(gate: str, first_seq: str) -> str:
    """CTEs (no leading WITH) that write a completion's events, activities and timers.

    Each writes only for the run in CTE `gate`, so a gate that selects nothing writes nothing.
    The caller's last SELECT reports the eager leases with `EAGER_LEASES`.
    """
    return f"""
    {write_events(gate, first_seq)}, {write_activities(gate)}, {write_timers(gate)}"""


EAGER_LEASES = """(SELECT jsonb_agg(jsonb_build_object(
                'task_id', task_id, 'lease_token', lease_token,
                'lease_expires_at', lease_expires_at, 'scheduled_at', scheduled_at))
            FROM activities WHERE state = 'leased') AS eager"""
"""The last SELECT's column of the attempts `write_activities` leased (`leased_attempts`)."""

# -- finish: the run, its sticky binding or close, its next task -----------------------------


def finish_run(run_where: str, last_event_seq: str) -> str:
    """CTE `run`: the run's last event `last_event_seq` (SQL) and step, its close or binding."""
    return f"""run AS (
        UPDATE runs
        SET last_event_seq = {last_event_seq}, last_step_seq = :last_step_seq,
            status = COALESCE(CAST(:status AS text), status),
            result = COALESCE(:result, result), failure = COALESCE(:failure, failure),
            continued_to_run_id = COALESCE(CAST(:continued_to AS uuid), continued_to_run_id),
            closed_at = CASE WHEN CAST(:status AS text) IS NULL THEN closed_at ELSE now() END,
            -- S4: an open run stays bound to the worker that keeps it warm, or to nobody.
            sticky_worker_id = CASE WHEN CAST(:status AS text) IS NULL
                AND CAST(:sticky_ttl AS float8) IS NOT NULL THEN :sticky_owner END,
            sticky_until = CASE WHEN CAST(:status AS text) IS NULL
                AND CAST(:sticky_ttl AS float8) IS NOT NULL
                THEN now() + make_interval(secs => :sticky_ttl) END
        WHERE {run_where}
        RETURNING run_id, workflow_type, namespace, connection, task_queue, build_id,
                  sticky_worker_id, sticky_until
    )"""


def next_task(follow_up: str, inbox_afresh: bool = False) -> str:
    """CTE `next_task`: the open run's next workflow task, when something waits for one.

    Waiting: `:follow_up`, `follow_up` (SQL), or a waking event in the run's inbox. With
    `inbox_afresh` the inbox is read afresh (burrow_inbox_waiting, migration 0027), for a
    one-statement completion: its snapshot may predate an event whose writer, by its own older
    snapshot, saw the task still ready and so neither made a task nor flagged this one (a
    claim leased it meanwhile). Every inbox writer holds the run, so it either commits before
    the fresh read or finds this completion committed (and makes a task itself). A statement
    run after the lock in the same transaction reads afresh anyway, and one that checked
    `burrow_run_idle` under the lock has nothing left to see.
    """
    waiting = (
        "burrow_inbox_waiting(CAST(:run_id AS uuid))"
        if inbox_afresh
        else """EXISTS (SELECT 1 FROM inbox_events
                       WHERE run_id = :run_id AND NOT applied AND wakes_workflow)"""
    )
    return """next_task AS (
        {insert_task}
        WHERE CAST(:status AS text) IS NULL AND (CAST(:follow_up AS boolean) OR {follow_up}
            OR {waiting})
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    )""".format(
        follow_up=follow_up,
        waiting=waiting,
        insert_task=fragments.insert_workflow_task(":new_task_id", "run"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
    )


def report_to_parent() -> str:
    """CTEs (no leading WITH): a child run's close, queued in its parent's inbox (children.py).

    Only when `:parent_event` is given and the completion closed the run (CTE `run` wrote). As
    every inbox writer, it locks the parent's run, then makes its next workflow task or flags
    the one leased (`flag_leased_task`); the final SELECT names it with `PARENT_TASK`.
    """
    return """reported AS (
        UPDATE child_workflows AS c
        SET state = 'closed', closed_status = CAST(:status AS text), closed_at = now()
        FROM run
        WHERE CAST(:parent_event AS jsonb) IS NOT NULL AND CAST(:status AS text) IS NOT NULL
          AND c.parent_run_id = CAST(:parent_run_id AS uuid) AND c.step_seq = :parent_step
          AND c.state = 'running'
        RETURNING c.parent_run_id, c.parent_close_policy, c.cancellation_policy
    ), parent_run AS MATERIALIZED (
        SELECT runs.* FROM runs JOIN reported ON runs.run_id = reported.parent_run_id
        WHERE runs.status = 'running'
        FOR NO KEY UPDATE OF runs
    ), parent_inbox AS (
        INSERT INTO inbox_events (run_id, event_type, payload, idempotency_key)
        SELECT p.run_id, CAST(:parent_event_type AS text),
               CAST(:parent_event AS jsonb) || jsonb_build_object(
                   'parent_close_policy', r.parent_close_policy,
                   'cancellation_policy', r.cancellation_policy),
               CAST(:parent_event_key AS text)
        FROM parent_run AS p JOIN reported AS r ON r.parent_run_id = p.run_id
        ON CONFLICT (run_id, idempotency_key) DO NOTHING
        RETURNING run_id
    ), parent_task AS (
        {insert_task}
        WHERE run_id IN (SELECT run_id FROM parent_inbox)
        {one_open_task}
        RETURNING task_id, namespace, connection, queue, {sticky_owner}
    ), {flagged}""".format(
        insert_task=fragments.insert_workflow_task("CAST(:parent_task_id AS uuid)", "parent_run"),
        one_open_task=fragments.ONE_OPEN_WORKFLOW_TASK,
        sticky_owner=fragments.sticky_owner(),
        flagged=fragments.flag_leased_task(
            "(SELECT run_id FROM parent_inbox)", name="parent_flagged"
        ),
    )


_STICKY_OWNER = fragments.sticky_owner()
PARENT_TASK = f"""(SELECT to_jsonb(t) FROM (
            SELECT task_id, namespace, connection, queue, sticky_owner FROM parent_task
            UNION ALL
            -- Claims skip a locked run (SKIP LOCKED): a task already waiting is announced again.
            SELECT task_id, namespace, connection, queue, {_STICKY_OWNER} FROM workflow_tasks
            WHERE run_id IN (SELECT run_id FROM parent_inbox) AND state = 'ready'
              AND NOT EXISTS (SELECT 1 FROM parent_task)
            LIMIT 1) AS t) AS parent_task"""
"""The last SELECT's column naming the parent's ready workflow task `report_to_parent` woke."""

NO_PARENT_TASK = "NULL AS parent_task"
"""`PARENT_TASK` of a statement without `report_to_parent`: its empty CTEs are not free."""


def finish_ctes(
    *,
    run_where: str,
    close_when: str,
    except_task: str = "NULL",
    follow_up: str = "false",
    last_event_seq: str = ":last_event_seq",
    except_activity: str = "NULL",
    reports_to_parent: bool = False,
    inbox_afresh: bool = False,
) -> str:
    """The last CTEs (no leading WITH) of every completion statement.

    They update the run (its last event `last_event_seq`, SQL), then create its next workflow
    task or close its open work (but for `except_task` and `except_activity`: close_open_work);
    with `reports_to_parent`, a child's close joins its parent's inbox (`report_to_parent`).
    `inbox_afresh`: as `next_task`'s.
    """
    close = fragments.close_open_work(":run_id", close_when, except_task, except_activity)
    report = f", {report_to_parent()}" if reports_to_parent else ""
    waits = next_task(follow_up, inbox_afresh)
    return f"""
    {finish_run(run_where, last_event_seq)}, {waits}, {close}{report}"""


# -- the transactional form: statements run in order, in the caller's transaction ---------------

# Its row holds the locked run, or (no run) the `fence_columns` saying why the fence refused.
FENCE_AND_LOCK_RUN = statement(
    f"""
    WITH {fragments.fence_probe("workflow_tasks")}, task AS (
        {FENCE_TASK}
        RETURNING run_id
    ), locked AS (
        SELECT runs.*, now() AS now FROM runs JOIN task USING (run_id)
        FOR NO KEY UPDATE OF runs
    )
    SELECT locked.*, {fragments.fence_columns()}
    FROM (SELECT 1) AS one LEFT JOIN probe ON true LEFT JOIN locked ON true
    """
)

INSERT_ACTIVITY = statement(
    "INSERT INTO activity_tasks ({}) VALUES ({})".format(
        ", ".join(ACTIVITY_COLUMNS), ", ".join(f":{column}" for column in ACTIVITY_COLUMNS)
    ),
    json_params=["arguments", "retry_policy", "worker_session"],
)

INSERT_TIMER = statement(
    "INSERT INTO timers ({}) VALUES ({})".format(
        ", ".join(TIMER_COLUMNS), ", ".join(f":{column}" for column in TIMER_COLUMNS)
    )
)

# Append the task's events and update the run; then either close its open work (it ended) or,
# when events wait in its inbox (or an update task asks for a follow-up), create the next
# workflow task. One round trip.
FINISH_COMPLETION = statement(
    """
    WITH {appended}, {finish}
    SELECT next_task.*, (SELECT count(*) FROM appended) AS appended
    FROM (SELECT 1) AS one LEFT JOIN next_task ON true
    """.format(
        appended=history.APPENDED_CTE,
        finish=finish_ctes(
            run_where="run_id = :run_id", close_when="CAST(:status AS text) IS NOT NULL"
        ),
    ),
    json_params=["result", "failure"],
)

# -- the one-statement forms ---------------------------------------------------------------------


# The completion of a task whose run is where its claim left it (RunPosition), in ONE statement
# outside a transaction block: the run is locked only if it is still at that position, the
# lease fenced only then, and every write below depends on the fence, so a stale lease or a
# moved run writes nothing (the caller then takes the transactional path, which says why).
# Without ON CONFLICT: an event already recorded fails the whole statement the same way. The
# statement's snapshot may predate an event that another transaction put in the run's inbox
# while this one waited for the run's lock: that transaction flagged the task (follow_up), and
# the fence's update reads the flag from the task row as it is now.
def _complete_at_position(reporting: bool) -> sql.Statement:
    return statement(
        """
        WITH position AS (
            {run_at_position}
        ), fenced AS (
            {fence_task} AND run_id IN (SELECT run_id FROM position)
            RETURNING run_id, follow_up  -- as the last event written meanwhile left it
        ), {work}, {finish}
        SELECT (SELECT count(*) FROM fenced) AS fenced, next_task.*, {eager_leases}, {parent_task}
        FROM (SELECT 1) AS one LEFT JOIN next_task ON true
        """.format(
            run_at_position=RUN_AT_POSITION,
            fence_task=FENCE_TASK,
            work=written_work_ctes("fenced", ":after_seq"),
            eager_leases=EAGER_LEASES,
            parent_task=PARENT_TASK if reporting else NO_PARENT_TASK,
            finish=finish_ctes(
                run_where="run_id IN (SELECT run_id FROM fenced)",
                close_when="CAST(:status AS text) IS NOT NULL AND EXISTS (SELECT 1 FROM fenced)",
                except_task="CAST(:task_id AS uuid)",
                follow_up="coalesce((SELECT bool_or(follow_up) FROM fenced), false)",
                reports_to_parent=reporting,
                inbox_afresh=True,
            ),
        ),
        json_params=["result", "failure"],
    )


COMPLETE_AT_POSITION = _complete_at_position(reporting=False)
COMPLETE_AT_POSITION_REPORTING = _complete_at_position(reporting=True)
"""The same, for a child's close that reports to its parent (`report_to_parent`)."""


# An activity's result and the workflow task the warm instance ran on it (at_position.py). The
# run is locked only if it is still at the warm instance's position; `idle` then looks at its
# open work afresh (burrow_run_idle, migration 0007): this statement's own snapshot may predate
# a signal, timer or result another transaction queued while it waited for the lock. Every
# write depends on `idle` through the fenced attempt (`done`), so a moved or busy run, a stale
# lease or a session attempt (W6 announces its session after) writes nothing. The inbox then
# holds only events that feed no code (ActivityStarted): they join the history first, as a
# claim would move them, then the result, then the task's own events.
def _complete_with_workflow_task(reporting: bool) -> sql.Statement:
    return statement(
        """
        WITH position AS MATERIALIZED (
            {run_at_position}
        ), idle AS MATERIALIZED (
            SELECT run_id FROM position WHERE burrow_run_idle(run_id)
        ), done AS (
            UPDATE activity_tasks SET state = 'completed', {recorded_keeps_token}
            WHERE {lease_fence}{attempt_id_fence} AND session_id IS NULL
              AND run_id IN (SELECT run_id FROM idle)
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
                                        workflow_task_id)
            SELECT done.run_id, :after_seq + (SELECT count(*) FROM moved) + 1, '{completed_type}',
                   {completed}, {closed_key}, CAST(:workflow_task_id AS uuid)
            FROM done
            RETURNING run_id, sequence
        ), {work}, {finish}
        SELECT (SELECT count(*) FROM done) AS fenced, (SELECT count(*) FROM moved) AS moved,
               next_task.*, {eager_leases}, {parent_task}
        FROM (SELECT 1) AS one LEFT JOIN next_task ON true
        """.format(
            run_at_position=RUN_AT_POSITION,
            lease_fence=fragments.LEASE_FENCE,
            attempt_id_fence=fragments.ATTEMPT_ID_FENCE,
            recorded_keeps_token=fragments.RECORDED_KEEPS_TOKEN,
            insert_task=fragments.insert_completed_workflow_task(
                "CAST(:workflow_task_id AS uuid)", "runs"
            ),
            completed_type=events.ActivityCompleted.event_type,
            completed=activities.ACTIVITY_COMPLETED_WITH_TASK,
            closed_key=activities.ACTIVITY_CLOSED_KEY,
            work=written_work_ctes("recorded", "recorded.sequence"),
            eager_leases=EAGER_LEASES,
            parent_task=PARENT_TASK if reporting else NO_PARENT_TASK,
            finish=finish_ctes(
                run_where="run_id IN (SELECT run_id FROM done)",
                close_when="CAST(:status AS text) IS NOT NULL AND EXISTS (SELECT 1 FROM done)",
                except_activity="CAST(:task_id AS uuid)",
                last_event_seq=":after_seq + (SELECT count(*) FROM moved) + 1 + :event_count",
                reports_to_parent=reporting,
            ),
        ),
        json_params=["result", "failure"],
    )


COMPLETE_WITH_WORKFLOW_TASK = _complete_with_workflow_task(reporting=False)
COMPLETE_WITH_WORKFLOW_TASK_REPORTING = _complete_with_workflow_task(reporting=True)
"""The same, for a child's close that reports to its parent (`report_to_parent`)."""

# -- parameters ----------------------------------------------------------------------------------


def finish_params(
    plan: Plan, owner: str, sticky_ttl: timedelta | None, *, follow_up: bool
) -> dict[str, object]:
    """The parameters of the events' append and of `finish_ctes`, shared by every form.

    `owner` is the worker that ran the task: the run stays bound to it for `sticky_ttl` (S4).
    """
    run = plan.run
    return {
        **history.append_params(
            run_id=run.run_id,
            after_seq=run.last_event_seq,
            events=plan.events,
            workflow_task_id=plan.task_id,
        ),
        "last_event_seq": run.last_event_seq + len(plan.events),
        "last_step_seq": plan.last_step,
        "new_task_id": str(uuid.uuid4()),
        "sticky_owner": owner,
        "sticky_ttl": None if sticky_ttl is None else sticky_ttl.total_seconds(),
        "follow_up": follow_up,
        **_closing_params(plan.closed),
    }


def parent_report_params(plan: Plan) -> dict[str, object]:
    """The parameters of `report_to_parent`: the `ChildRun*` event of a child's close, or None.

    Its policies come from the parent's `child_workflows` row, in the statement.
    """
    run, closed = plan.run, plan.closed
    if closed is None or run.parent_run_id is None or run.parent_step_seq is None:
        return {
            "parent_event": None,
            "parent_event_type": None,
            "parent_event_key": None,
            "parent_run_id": None,
            "parent_step": None,
            "parent_task_id": None,
        }
    identity: JsonObject = {
        "sequence": run.parent_step_seq,
        "child_workflow_instance_id": run.workflow_id,
        "child_workflow_run_id": run.run_id,
        "child_workflow_type": run.workflow_type,
    }
    report = children.ClosedRun(
        closed.status,
        result=None if closed.result is None else dict(closed.result),
        failure=closed.failure,
    )
    event = children.closed_event(identity, report)
    payload = event.to_json()
    for policy in ("parent_close_policy", "cancellation_policy"):
        payload.pop(policy, None)  # the parent's row has them
    return {
        "parent_event": json.dumps(payload),
        "parent_event_type": event.event_type,
        "parent_event_key": children.closed_key(run.parent_step_seq),
        "parent_run_id": run.parent_run_id,
        "parent_step": run.parent_step_seq,
        "parent_task_id": str(uuid.uuid4()),
    }


def _closing_params(closed: Closed | None) -> dict[str, object]:
    if closed is None:  # the run stays open: every column keeps its value
        return {"status": None, "result": None, "failure": None, "continued_to": None}
    return {
        "status": closed.status.value,
        "result": closed.result,
        "failure": closed.failure,
        "continued_to": closed.continued_to_run_id,
    }


def work_params(
    plan: Plan, leased: list[ActivityRow], eager: claims.EagerClaim | None
) -> dict[str, object]:
    """The parameters of `written_work_ctes` beyond the append's (`finish_params`)."""
    return {
        "after_step": plan.run.last_step_seq,
        "activities": json.dumps(plan.activity_rows, default=datetime.isoformat),
        "timers": json.dumps(plan.timer_rows, default=datetime.isoformat),
        "eager_ids": [row["task_id"] for row in leased],
        "eager_owner": None if eager is None else eager.worker_id,
        "eager_lease_seconds": None if eager is None else eager.lease.total_seconds(),
    }
