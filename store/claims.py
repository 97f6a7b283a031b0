"""The SQL that claims workflow and query tasks (SKIP LOCKED) and renews leases.

Activity attempts are claimed in activity_claims.py; the fence is in fragments.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.store import fragments, history, leasing, runs, sql
from burrow.store import schema as s

# Re-exported: callers name every claim through this module.
from burrow.store.activity_claims import ACTIVITY_STARTED as ACTIVITY_STARTED
from burrow.store.activity_claims import ACTIVITY_STARTED_KEY as ACTIVITY_STARTED_KEY
from burrow.store.activity_claims import claim_activity_tasks as claim_activity_tasks
from burrow.store.leasing import QueueFilter as QueueFilter
from burrow.store.models import (
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    HistoryEvent,
    JsonDict,
    Lease,
    ReplayMode,
    RunPosition,
    StickyDiagnostics,
    TaskState,
)
from burrow.store.sql import statement


@dataclass(frozen=True, slots=True)
class StickyClaim:
    """How a workflow task claim treats sticky bindings (S5), and what history it returns.

    `tail_when_bound`: a task bound to the claimer returns only the events after the run's last
    committed sequence, where the claimer's warm instance stands if it still holds one (the
    claimer reads the rest itself otherwise). Without it, every claim returns the whole history
    (SDK workers decide about their caches themselves: S10 `resume_if_present`).
    """

    enabled: bool = True
    owner_stale: timedelta = timedelta(seconds=30)
    tail_when_bound: bool = False
    gone_owners: tuple[str, ...] = ()
    """Owners whose sticky queue the broker found gone (broker invariant 4): treated as gone
    here whatever their heartbeat says. A wrong guess costs only a cold replay (S1)."""


NO_CACHE: StickyClaim = StickyClaim()

# S5: (a) tasks bound to the claimer come first; (b) unbound tasks go to anyone; (c) a task bound
# to another live sticky worker is held for it until the binding expires or the owner is gone
# (stale heartbeat, draining, stopped, registered without a cache (S3), or its sticky queue found
# gone by the broker: `gone_owners`); (d) with sticky
# execution off, bindings are ignored. Both branches keep every namespace, queue, type and build
# check. The run row is locked here too, skipping runs another transaction holds: waiting for it
# while holding the task row could deadlock with an activity completion.
_PICK = """
        SELECT w.task_id FROM workflow_tasks w JOIN runs r ON r.run_id = w.run_id
        WHERE w.state = 'ready' AND w.namespace = :namespace AND w.queue = :queue AND {only}
          AND w.connection = :connection AND w.available_at <= now()
          AND w.workflow_type = ANY(:types)
          AND (w.build_id IS NULL OR w.build_id = :build_id)
          AND {sticky}
        ORDER BY w.available_at
        LIMIT {limit}
        FOR UPDATE OF w SKIP LOCKED
        FOR NO KEY UPDATE OF r SKIP LOCKED
"""
_OWN = "w.sticky_worker_id = :worker_id AND w.sticky_until > now() AND :sticky_enabled"
_OTHERS = f"""(NOT :sticky_enabled OR w.sticky_worker_id IS NULL OR w.sticky_until <= now()
               OR w.sticky_worker_id = ANY(CAST(:gone_owners AS text[]))
               OR {fragments.owner_gone("w.sticky_worker_id")})
          AND w.task_id NOT IN (SELECT task_id FROM own)"""
# What the claim statement RETURNs of each task it leases (the CTE named `claimed`).
CLAIMED_COLUMNS = """task_id, run_id, lease_token, lease_owner, attempt, lease_expires_at,
                  sticky_worker_id, sticky_until, sticky_replay_mode"""


def open_runs_sql(pending: str = "SELECT * FROM pending", runs: str = "runs") -> str:
    """The CTEs (no leading WITH) and SELECT that open the runs of the tasks in CTE `claimed`.

    They move each run's inbox into its history (numbered after the run's last event) and
    select, per task, the run with its history as one JSON array: the whole history, or for a
    task bound to the claimer (S7 `sticky_hit_expected`) and with `:tail_when_bound`, only the
    events after the run's last committed sequence. `pending` selects the inbox events to move
    (run_id, id, event_type, payload, idempotency_key): by default those the statement marked
    applied in CTE `pending`; a statement that queues an event itself adds it there.
    `runs` is where the runs' rows are read: a statement that locked them in a CTE of its own
    names that CTE, whose rows are the latest. The table, read in the statement's snapshot, may
    predate a commit the lock waited for, and its stale `last_event_seq` would number the moved
    events over ones already written.
    """
    return f"""
    run AS (  -- locked by the claimer
        SELECT runs.*, claimed.task_id AS claimed_task_id,
               CASE WHEN :tail_when_bound AND claimed.sticky_replay_mode = 'sticky_hit_expected'
                    THEN runs.last_event_seq ELSE 0 END AS history_after
        FROM {runs} AS runs JOIN claimed USING (run_id)
    ), pending AS (
        UPDATE inbox_events i SET applied = true
        FROM claimed WHERE i.run_id = claimed.run_id AND NOT i.applied
        RETURNING i.run_id, i.id, i.event_type, i.payload, i.idempotency_key
    ), inserted AS (
        INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key,
                                    workflow_task_id)
        SELECT run.run_id,
               run.last_event_seq + row_number() OVER (PARTITION BY run.run_id ORDER BY p.id),
               p.event_type, p.payload, p.idempotency_key, run.claimed_task_id
        FROM ({pending}) AS p JOIN run USING (run_id)
        RETURNING run_id, sequence, event_type, payload, recorded_at, workflow_task_id
    ), bumped AS (
        UPDATE runs SET last_event_seq = runs.last_event_seq + moved.count
        FROM (SELECT run_id, count(*) FROM inserted GROUP BY run_id) AS moved
        WHERE runs.run_id = moved.run_id
    ), events AS (
        SELECT h.run_id, h.sequence, h.event_type, h.payload, h.recorded_at, h.workflow_task_id,
               run.history_after
        FROM history_events h JOIN run ON h.run_id = run.run_id AND h.sequence > run.history_after
        UNION ALL
        SELECT i.run_id, i.sequence, i.event_type, i.payload, i.recorded_at, i.workflow_task_id,
               run.history_after
        FROM inserted i JOIN run USING (run_id)
    ), histories AS (
        -- Only the first page of a long history: the claimer reads the rest page by page.
        -- Sequences run without gaps, so the page is the events up to history_after + page.
        SELECT run_id,
               jsonb_agg(jsonb_build_object(
                   'sequence', sequence, 'event_type', event_type, 'payload', payload,
                   'recorded_at', recorded_at, 'workflow_task_id', workflow_task_id)
                   ORDER BY sequence)
                   FILTER (WHERE sequence <= history_after + :history_page) AS history,
               -- What the events weigh as stored: a cache bounds its memory by it.
               sum(pg_column_size(payload)) AS history_bytes,
               max(sequence) AS last_sequence
        FROM events GROUP BY run_id
    ), opened AS (
        SELECT run.*, claimed.task_id, claimed.lease_token, claimed.lease_owner, claimed.attempt,
               claimed.lease_expires_at, claimed.sticky_worker_id AS task_sticky_worker_id,
               claimed.sticky_until AS task_sticky_until, claimed.sticky_replay_mode,
               histories.history, coalesce(histories.history_bytes, 0) AS history_bytes,
               greatest(run.last_event_seq, histories.last_sequence) AS position_event_seq,
               now() AS claimed_at
        FROM claimed JOIN run ON run.claimed_task_id = claimed.task_id
        LEFT JOIN histories ON histories.run_id = claimed.run_id
    )"""


# One statement leases the tasks and opens their runs (open_runs_sql), so it needs no
# transaction block of its own.
_CLAIM_WORKFLOW_TASKS_SQL = """
    WITH own AS ({own}), others AS ({others}), picked AS (
        SELECT task_id FROM own UNION ALL SELECT task_id FROM others
    ), claimed AS (
        UPDATE workflow_tasks t
        SET state = 'leased', lease_owner = :worker_id, lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => :lease_seconds),
            claimed_at = clock_timestamp(), sticky_claimed_at = clock_timestamp(),
            follow_up = false,  -- this claim moves the inbox it sees
            sticky_replay_mode = {replay_mode}  -- S7, as the binding stood when claimed
        FROM picked WHERE t.task_id = picked.task_id
        RETURNING {claimed_columns}
    ), {open_runs}
    SELECT * FROM opened
"""


def _claim_sql(only: str) -> str:
    return _CLAIM_WORKFLOW_TASKS_SQL.format(
        own=_PICK.format(only=only, sticky=_OWN, limit=":limit"),
        others=_PICK.format(only=only, sticky=_OTHERS, limit=":limit - (SELECT count(*) FROM own)"),
        replay_mode=fragments.replay_mode("t"),
        claimed_columns=", ".join(f"t.{c.strip()}" for c in CLAIMED_COLUMNS.split(",")),
        open_runs=open_runs_sql(),
    )


_CLAIM_WORKFLOW_TASKS = statement(_claim_sql("true"))
_CLAIM_WORKFLOW_TASK_BY_ID = statement(_claim_sql("w.task_id = CAST(:task_id AS uuid)"))


@dataclass(frozen=True, slots=True)
class EagerClaim:
    """Lease follow-up work to the completing worker in the same transaction (eager dispatch).

    Same filters and fencing as a claim, one round trip fewer.
    """

    flt: QueueFilter
    worker_id: str
    lease: timedelta
    limit: int = 1
    sticky: StickyClaim = NO_CACHE


def events_from_json(run_id: str, records: list[JsonDict] | None) -> list[HistoryEvent]:
    """History events from the JSON array the claim statement returns."""
    return [
        HistoryEvent.from_record(
            run_id=run_id,
            sequence=record["sequence"],
            event_type=record["event_type"],
            payload=record["payload"],
            recorded_at=datetime.fromisoformat(record["recorded_at"]),
            workflow_task_id=record["workflow_task_id"],
        )
        for record in records or []
    ]


@dataclass(frozen=True, slots=True)
class LeasedRun:
    """What a workflow task claim read, typed only after its statement.

    Building the run and parsing its history into event models takes CPU; done before the claim
    is committed it would hold the run's row lock (and a pooled connection) that much longer.
    """

    row: sql.Row
    """The claim's row: the run's columns, the task's lease and sticky diagnostics (`task_`
    names where they clash with the run's), and the run's (new) history as JSON with its size."""

    @property
    def lease(self) -> Lease:
        """The lease the claim took."""
        return leasing.lease_of(self.row)

    def claimed(self) -> ClaimedWorkflowTask:
        """The typed claim: run info plus the parsed history (or its new part)."""
        row = self.row
        run = runs.run_row(row)
        return ClaimedWorkflowTask(
            lease=self.lease,
            run=run.info(),
            history=events_from_json(row.run_id, row.history),
            attempt=row.attempt,
            sticky=StickyDiagnostics(
                worker_id=row.task_sticky_worker_id,
                until=row.task_sticky_until,
                replay_mode=ReplayMode(row.sticky_replay_mode),
            ),
            history_after=row.history_after,
            history_bytes=row.history_bytes,
            position=RunPosition(
                run=dataclasses.replace(run, last_event_seq=row.position_event_seq),
                claimed_at=row.claimed_at,
                claimed_monotonic=time.monotonic(),
            ),
        )


async def claim_workflow_task(
    conn: sql.Conn,
    *,
    flt: QueueFilter,
    worker_id: str,
    lease: timedelta,
    task_id: str | None = None,
    sticky: StickyClaim = NO_CACHE,
) -> LeasedRun | None:
    """Lease one ready workflow task (that one, if named), move its inbox into its history."""
    stmt, params = _CLAIM_WORKFLOW_TASKS, workflow_claim_params(flt, worker_id, lease, 1, sticky)
    if task_id is not None:
        stmt, params["task_id"] = _CLAIM_WORKFLOW_TASK_BY_ID, task_id
    claimed = await sql.fetch(conn, stmt, params)
    return LeasedRun(claimed[0]) if claimed else None


async def claim_workflow_tasks(
    conn: sql.Conn,
    *,
    flt: QueueFilter,
    worker_id: str,
    lease: timedelta,
    limit: int,
    sticky: StickyClaim = NO_CACHE,
) -> list[LeasedRun]:
    """Lease up to `limit` ready workflow tasks of different runs, each with its history.

    One statement for the batch: a wake standing for several tasks costs one commit, and a
    batch smaller than `limit` tells the poller the queue is drained. Sticky rules (S5) decide
    which tasks this worker may take and in what order.
    """
    params = workflow_claim_params(flt, worker_id, lease, limit, sticky)
    return [LeasedRun(row) for row in await sql.fetch(conn, _CLAIM_WORKFLOW_TASKS, params)]


def workflow_claim_params(
    flt: QueueFilter, worker_id: str, lease: timedelta, limit: int, sticky: StickyClaim
) -> dict[str, object]:
    """The parameters a workflow task claim binds (and `open_runs_sql` with it)."""
    return {
        **leasing.claim_params(flt, worker_id, lease, limit=limit),
        "sticky_enabled": sticky.enabled,
        "owner_stale_seconds": sticky.owner_stale.total_seconds(),
        "tail_when_bound": sticky.tail_when_bound,
        "gone_owners": list(sticky.gone_owners),
        "history_page": history.HISTORY_PAGE_EVENTS,
    }


async def claim_query_task(
    conn: AsyncConnection,
    *,
    flt: QueueFilter,
    worker_id: str,
    lease: timedelta,
    kinds: Sequence[str] = ("query",),
) -> ClaimedQueryTask | None:
    """Lease one ready query task of `kinds` with the history to answer it from."""
    q = s.query_tasks.c
    pick = (
        sa.select(q.task_id)
        .where(
            *leasing.ready_where(s.query_tasks, flt, "workflow_type"),
            q.expires_at > sa.func.now(),
            q.task_kind.in_(list(kinds)),
        )
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    row = (
        await conn.execute(
            sa.update(s.query_tasks)
            .where(q.task_id == pick)
            # An answer after the caller's deadline is worth nothing: the lease ends by then.
            .values(
                **{
                    **leasing.lease_values(worker_id, lease),
                    "lease_expires_at": sa.func.least(sa.func.now() + lease, q.expires_at),
                }
            )
            .returning(s.query_tasks)
        )
    ).first()
    if row is None:
        return None
    run = (await conn.execute(sa.select(s.runs).where(s.runs.c.run_id == row.run_id))).one()
    events = await history.read_history(conn, run_id=row.run_id)
    return ClaimedQueryTask(
        lease=leasing.lease_of(row),
        run=runs.run_row(run).info(),
        history=events,
        query_name=row.query_name,
        arguments=row.arguments,
        task_kind=row.task_kind,
        admitted_at=row.created_at,
        deadline_at=row.expires_at,
    )


async def renew_leases(
    conn: AsyncConnection, *, table: sa.Table, leases: Sequence[Lease], lease: timedelta
) -> set[str]:
    """Extend the leases still held; returns the task ids whose lease is still current."""
    if not leases:
        return set()
    c = table.c
    held = sa.or_(
        *(sa.and_(c.task_id == item.task_id, c.lease_token == item.lease_token) for item in leases)
    )
    rows = await conn.execute(
        sa.update(table)
        .where(held, fragments.state_is(c.state, TaskState.LEASED))
        .values(lease_expires_at=sa.func.now() + lease)
        .returning(c.task_id)
    )
    return {row.task_id for row in rows}


async def recorded_leases(
    conn: AsyncConnection, *, table: sa.Table, leases: Sequence[Lease]
) -> set[str]:
    """The task ids among `leases` whose holder's outcome is recorded under that very token.

    A completion or failure keeps its token (fragments.RECORDED_KEEPS_TOKEN): such a lease was
    not lost, its outcome was written (perhaps by a try whose reply never arrived).
    """
    if not leases:
        return set()
    c = table.c
    named = sa.or_(
        *(sa.and_(c.task_id == item.task_id, c.lease_token == item.lease_token) for item in leases)
    )
    rows = await conn.execute(sa.select(c.task_id).where(named, c.state != TaskState.LEASED))
    return {row.task_id for row in rows}
