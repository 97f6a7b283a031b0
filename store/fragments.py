"""The SQL rules several statements share, each written once.

Statements compose these by string formatting when their module is imported, so each one is
still a single prepared statement and a single round trip (store/sql.py). A unit test checks
that the rules are written nowhere else in the store.
"""

from __future__ import annotations

import uuid
from enum import StrEnum

import sqlalchemy as sa

from burrow.store import errors, schema, sql
from burrow.store.models import ClaimFence, Fence, FencedTask, Lease

# Store invariant 2: a completion, failure or heartbeat changes the task only while the lease it
# names is still the current one. A worker names it by its token; the server by owner, attempt
# and namespace (PROTOCOL.md 5.6), and then an expired lease is refused too. Binds the names
# fence_params() gives; a NULL parameter checks nothing.
LEASE_FENCE = (
    "task_id = :task_id AND state = 'leased' AND lease_owner = :lease_owner"
    " AND lease_token = coalesce(CAST(:lease_token AS uuid), lease_token)"
    " AND attempt = coalesce(CAST(:attempt AS integer), attempt)"
    " AND namespace = coalesce(CAST(:fence_namespace AS text), namespace)"
    " AND run_id = coalesce(CAST(:fence_run_id AS uuid), run_id)"
    " AND (CAST(:lease_token AS uuid) IS NOT NULL OR lease_expires_at > now())"
)

# A worker's completion or failure keeps its lease token on the row it takes out of `leased`
# (RECORDED_KEEPS_TOKEN), so the same call repeated with that token, its first commit's reply
# lost, is refused as `already_recorded` rather than as a lost lease (fence_columns). A hand-back
# by anyone else (an expired lease, a closed run) clears the token.
RECORDED_KEEPS_TOKEN = "lease_token = lease_token"
"""The SET item of a fenced outcome: the token stays (a no-op, written to say so)."""

# LEASE_FENCE's addition for activity attempts, which the server names by attempt id (6.2).
ATTEMPT_ID_FENCE = (
    " AND CAST(activity_attempt_id AS text)"
    " = coalesce(CAST(:fence_attempt_id AS text), CAST(activity_attempt_id AS text))"
)


def fence_probe(table: str) -> str:
    """CTE `probe`: the fenced task's row as the statement's snapshot has it, with its run.

    A primary key lookup; the statement reports from it why its fence matched nothing
    (`fence_columns`). It reads the row before the statement changes it.
    """
    attempt_id = "t.activity_attempt_id" if table == "activity_tasks" else "NULL"
    return f"""probe AS (
        SELECT t.task_id, t.run_id, t.namespace, t.queue, t.attempt,
               CAST({attempt_id} AS text) AS activity_attempt_id, t.state, t.lease_owner,
               t.lease_token, t.lease_expires_at, r.status AS run_status
        FROM {table} t LEFT JOIN runs r ON r.run_id = t.run_id
        WHERE t.task_id = :task_id
    )"""


def fence_columns(*, expiry_before_owner: bool = False) -> str:
    """The columns that report the fenced task (`fence_` ones) and the refusal, from `probe`.

    `fence_refusal` (store.errors.LeaseRefusal) is what the documented checks find first
    (PROTOCOL.md 5.6, 6.2): unknown task, attempt, closed run, not leased, owner, expiry; query
    tasks check expiry before the owner (6.3). The caller reads it only when the fence matched
    nothing; the statement must reach `probe` (`FROM (SELECT 1) AS one LEFT JOIN probe ON true`).
    """
    owner = ("owner_mismatch", "probe.lease_owner <> :lease_owner")
    expired = ("expired", "CAST(:lease_token AS uuid) IS NULL AND probe.lease_expires_at <= now()")
    checks = [
        (
            "task_not_found",
            "probe.task_id IS NULL"
            " OR probe.namespace <> coalesce(CAST(:fence_namespace AS text), probe.namespace)",
        ),
        # The named token's own outcome is recorded (RECORDED_KEEPS_TOKEN): a repeated call.
        (
            "already_recorded",
            "probe.state <> 'leased' AND probe.lease_token = CAST(:lease_token AS uuid)",
        ),
        (
            "attempt_mismatch",
            "probe.attempt <> coalesce(CAST(:attempt AS integer), probe.attempt)"
            " OR probe.activity_attempt_id"
            " <> coalesce(CAST(:fence_attempt_id AS text), probe.activity_attempt_id)",
        ),
        ("run_closed", "probe.run_status <> 'running' AND probe.state <> 'leased'"),
        ("not_leased", "probe.state <> 'leased' OR probe.lease_token IS NULL"),
        *([expired, owner] if expiry_before_owner else [owner, expired]),
        ("run_mismatch", "probe.run_id <> coalesce(CAST(:fence_run_id AS uuid), probe.run_id)"),
    ]
    cases = " ".join(f"WHEN {check} THEN '{reason}'" for reason, check in checks)
    return (
        "probe.run_id AS fence_run_id, probe.namespace AS fence_namespace,"
        " probe.queue AS fence_queue, probe.attempt AS fence_attempt,"
        " probe.activity_attempt_id AS fence_attempt_id, probe.state AS fence_state,"
        " probe.run_status AS fence_run_status, probe.lease_owner AS fence_lease_owner,"
        " probe.lease_expires_at AS fence_lease_expires_at,"
        f" CASE {cases} ELSE 'stale_token' END AS fence_refusal"
    )


def state_is(column: sa.ColumnElement[str], *states: StrEnum) -> sa.ColumnElement[bool]:
    """`column` is one of `states`, with the states written into the SQL rather than bound.

    The store's connections plan each statement once (engine.py, generic plans); a plan can use
    a partial index (`WHERE state = 'ready'`) only when the statement names the same literal.
    """
    literals = [sa.literal(state.value, literal_execute=True) for state in states]
    return column == literals[0] if len(literals) == 1 else column.in_(literals)


# Store invariant 4: a run has at most one open workflow task, so a second insert coalesces
# into the task already open (the partial unique index uq_workflow_tasks_open_run).
# Array parameters go over the wire as text[]: a uuid[] or jsonb[] parameter (types whose codecs
# the engine replaces) makes asyncpg introspect types on every new connection, a query Postgres
# spends about 11 ms planning.
TASK_IDS = "CAST(CAST(:task_ids AS text[]) AS uuid[])"
"""The `:task_ids` parameter (a list of str) as uuid[]."""

ONE_OPEN_WORKFLOW_TASK = "ON CONFLICT (run_id) WHERE state IN ('ready', 'leased') DO NOTHING"


def flag_leased_task(run_id: str, when: str = "true", name: str = "flagged") -> str:
    """A CTE (no leading WITH) that flags the leased workflow task of run `run_id`, if `when`.

    For statements that put a waking event in the run's inbox (both arguments are SQL): a task
    leased meanwhile must be followed by another. Its completion may be one statement whose
    snapshot predates this event (it waited for the run's lock); the flag reaches it through
    the task row it updates, which Postgres re-reads.
    """
    return f"""{name} AS (
        UPDATE workflow_tasks SET follow_up = true
        WHERE run_id = {run_id} AND state = 'leased' AND {when}
    )"""


# Which `activity_tasks` column each attempt event field comes from: every event about one
# attempt (ActivityStarted, -Completed, -Failed, -RetryScheduled, ...) carries these.
ATTEMPT_COLUMNS = {
    "activity_execution_id": "activity_execution_id",
    "activity_attempt_id": "activity_attempt_id",
    "activity_type": "activity_type",
    "sequence": "step_seq",
    "attempt_number": "attempt",
}


def attempt_columns(alias: str) -> dict[str, str]:
    """ATTEMPT_COLUMNS as SQL expressions on the row named `alias` (for `jsonb_object`)."""
    return {field: f"{alias}.{column}" for field, column in ATTEMPT_COLUMNS.items()}


def fence_params(fence: Fence, kind: str = "task") -> dict[str, object]:
    """The parameters LEASE_FENCE, ATTEMPT_ID_FENCE and fence_columns bind, from `fence`.

    A task id that is no uuid names no task: StaleLease (task_not_found, about a `kind`)
    before any statement.
    """
    try:
        uuid.UUID(fence.task_id)
    except ValueError:
        raise errors.StaleLease(
            task_id=fence.task_id,
            lease_token=None,
            kind=kind,
            reason=errors.LeaseRefusal.TASK_NOT_FOUND,
        ) from None
    if isinstance(fence, Lease):
        return {
            "task_id": fence.task_id,
            "lease_token": fence.lease_token,
            "lease_owner": fence.lease_owner,
            "attempt": fence.attempt,
            "fence_namespace": None,
            "fence_run_id": None,
            "fence_attempt_id": None,
        }
    return {
        "task_id": fence.task_id,
        "lease_token": None,
        "lease_owner": fence.lease_owner,
        "attempt": fence.attempt,
        "fence_namespace": fence.namespace,
        "fence_run_id": fence.run_id,
        "fence_attempt_id": fence.activity_attempt_id,
    }


def refused(row: sql.AnyRow, fence: Fence, kind: str) -> errors.StaleLease:
    """The StaleLease a fenced statement reports in its `fence_columns`."""
    held = fence if isinstance(fence, Lease) else None
    claim = fence if isinstance(fence, ClaimFence) else None
    return errors.StaleLease(
        task_id=fence.task_id,
        lease_token=None if held is None else held.lease_token,
        kind=kind,
        reason=errors.LeaseRefusal(row.fence_refusal),
        run_id=row.fence_run_id,
        run_status=row.fence_run_status,
        task_status=row.fence_state,
        current_attempt=row.fence_attempt,
        activity_attempt_id=row.fence_attempt_id,
        lease_owner=row.fence_lease_owner,
        lease_expires_at=row.fence_lease_expires_at,
        named_attempt=fence.attempt,
        named_attempt_id=None if claim is None else claim.activity_attempt_id,
        named_run_id=None if claim is None else claim.run_id,
    )


def fenced_task(row: sql.AnyRow, fence: Fence) -> FencedTask:
    """The task a fenced statement changed, from its `fence_columns`."""
    return FencedTask(
        task_id=fence.task_id,
        run_id=row.fence_run_id,
        namespace=row.fence_namespace,
        queue=row.fence_queue,
    )


def token_kept_when(by_holder: str) -> str:
    """SET item: the token stays when `by_holder` (SQL), else it is cleared.

    `by_holder`: the lease's holder reports its own outcome (RECORDED_KEEPS_TOKEN); not so a
    repair's timeout, say.
    """
    return f"lease_token = CASE WHEN {by_holder} THEN lease_token END"


def return_to_ready(available_at: str, *, by_holder: str = "false") -> str:
    """SET clause that hands a lease back as the next attempt, claimable at `available_at`.

    `available_at` is a SQL expression; the clause binds `:last_failure` (JSONB): why the
    attempt ended, as describe shows it. `by_holder` (SQL): the lease's holder reported the
    failure itself, so its token stays until the next claim replaces it (token_kept_when).
    """
    return (
        f"state = 'ready', attempt = attempt + 1, lease_owner = NULL,"
        f" {token_kept_when(by_holder)}, lease_expires_at = NULL, available_at = {available_at},"
        " last_failure = :last_failure"
    )


def insert_workflow_task(task_id: str, runs: str) -> str:
    """INSERT of a ready workflow task `task_id` (SQL) for each run read FROM `runs`.

    `runs` must yield the `runs` columns the task inherits (run_id, workflow_type, namespace,
    connection, task_queue, build_id, and the sticky binding: S4); the caller may append a WHERE
    clause, and appends ONE_OPEN_WORKFLOW_TASK unless the run is new. RETURNING
    `sticky_owner()` gives the ready notice its sticky owner.
    """
    return (
        "INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection,"
        " queue, build_id, sticky_worker_id, sticky_until)"
        f" SELECT {task_id}, run_id, workflow_type, namespace, connection, task_queue, build_id,"
        # An expired binding is not inherited: the task is then no one's (S5b, cold_replay).
        " CASE WHEN sticky_until > now() THEN sticky_worker_id END,"
        " CASE WHEN sticky_until > now() THEN sticky_until END"
        f" FROM {runs}"
    )


def insert_completed_workflow_task(task_id: str, runs: str) -> str:
    """INSERT of workflow task `task_id` (SQL), run and completed by `:sticky_owner`.

    For a task written by the statement that records what woke it (completion/statements.py):
    its events name it, and describe lists it as a claimed task's row would be. One per run read
    FROM `runs` (the `runs` columns insert_workflow_task takes).
    """
    return (
        "INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection,"
        " queue, build_id, state, lease_owner, claimed_at, sticky_worker_id, sticky_until,"
        " sticky_replay_mode, sticky_claimed_at)"
        f" SELECT {task_id}, run_id, workflow_type, namespace, connection, task_queue, build_id,"
        " 'completed', :sticky_owner, clock_timestamp(),"
        " CASE WHEN sticky_until > now() THEN sticky_worker_id END,"
        " CASE WHEN sticky_until > now() THEN sticky_until END,"
        " 'sticky_hit_expected', clock_timestamp()"
        f" FROM {runs}"
    )


def replay_mode(task: str) -> str:
    """S7: the replay mode a claim by `:worker_id` records, as the binding of `task` stands."""
    return f"""CASE
                WHEN NOT :sticky_enabled OR {task}.sticky_worker_id IS NULL THEN 'cold_replay'
                WHEN {task}.sticky_worker_id = :worker_id AND {task}.sticky_until > now()
                    THEN 'sticky_hit_expected'
                ELSE 'forced_cold_replay' END"""


def insert_leased_workflow_task(task_id: str, runs: str) -> str:
    """`insert_workflow_task`, the task leased at once to `:worker_id` as a claim leases it.

    For eager dispatch: the lease lasts `:lease_seconds`, and the replay mode is recorded as the
    claim would record it (S7). Each run read FROM `runs` (already filtered) gets one task;
    the caller appends ONE_OPEN_WORKFLOW_TASK and its RETURNING.
    """
    return (
        "INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection,"
        " queue, build_id, sticky_worker_id, sticky_until, state, lease_owner, lease_token,"
        " lease_expires_at, claimed_at, sticky_claimed_at, sticky_replay_mode)"
        " SELECT t.*, 'leased', :worker_id, gen_random_uuid(),"
        " now() + make_interval(secs => :lease_seconds), clock_timestamp(), clock_timestamp(),"
        f" {replay_mode('t')}"
        f" FROM (SELECT {task_id}, run_id, workflow_type, namespace, connection, task_queue,"
        " build_id,"
        " CASE WHEN sticky_until > now() THEN sticky_worker_id END AS sticky_worker_id,"
        " CASE WHEN sticky_until > now() THEN sticky_until END AS sticky_until"
        f" FROM {runs}) AS t"
    )


def _active_sticky_worker(owner: str, *, heard_recently: bool) -> str:
    """EXISTS: `owner` (SQL) is registered active with a sticky cache (S3).

    With `heard_recently`, also heard from within `:owner_stale_seconds` (bound by the caller).
    """
    heartbeat = (
        " AND o.heartbeat_at > now() - make_interval(secs => :owner_stale_seconds)"
        if heard_recently
        else ""
    )
    return (
        "EXISTS (SELECT 1 FROM worker_registrations o"
        f" WHERE o.worker_id = {owner} AND o.state = 'active' AND o.sticky_cache_enabled"
        f"{heartbeat})"
    )


def owner_gone(owner: str) -> str:
    """True when the sticky owner `owner` (SQL) can no longer take its bound tasks (S5c).

    Gone: never registered, registered without a cache, draining, stopped, or silent for longer
    than `:owner_stale_seconds` (bound by the caller).
    """
    return "NOT " + _active_sticky_worker(owner, heard_recently=True)


def sticky_owner(table: str = "") -> str:
    """`sticky_owner`: the worker a ready workflow task's wake should reach (S4, C1).

    Its sticky owner while the binding holds and the owner is an active sticky worker, else NULL
    (any worker): a draining or stopped owner takes no new tasks (S8), so its wake would only
    wait in a queue nobody reads. For RETURNING lists and SELECTs of `workflow_tasks` rows
    (`table`: their alias, if the statement needs one).
    """
    p = f"{table}." if table else ""
    active = _active_sticky_worker(f"{p}sticky_worker_id", heard_recently=False)
    return (
        f"CASE WHEN {p}sticky_until > now() AND {active}"
        f" THEN {p}sticky_worker_id END AS sticky_owner"
    )


def session_holder_gone(owner: str) -> str:
    """True when the session holder `owner` (a LEFT JOINed registration alias) is gone (W5).

    Gone: never registered, stopped, or silent for longer than `:owner_stale_seconds` (bound by
    the caller); its active sessions are then orphaned.
    """
    return (
        f"({owner}.worker_id IS NULL OR {owner}.state = 'stopped'"
        f" OR {owner}.heartbeat_at <= now() - make_interval(secs => :owner_stale_seconds))"
    )


def session_done(session: str) -> str:
    """True when the `worker_sessions` row `session` ended for good (W5).

    Closed, failed, or past its TTL: no worker may take its activities again.
    """
    return (
        f"({session}.state IN ('closed', 'failed')"
        f" OR ({session}.state = 'expired' AND {session}.failure_reason = 'ttl_expired'))"
    )


def close_open_work(
    run_id: str, when: str = "true", except_task: str = "NULL", except_activity: str = "NULL"
) -> str:
    """CTEs (no leading WITH) that stop the open work of the closed run `run_id`, if `when`.

    The arguments are SQL expressions. Open workflow tasks, ready activities and pending timers
    are cancelled; a leased activity keeps its lease, flagged cancel_requested, so its worker
    learns of the cancel at its next heartbeat. `except_task` and `except_activity` name a
    workflow task and an activity attempt to leave alone: those a statement completes itself (a
    row must not be updated twice in one statement).
    """
    return f"""
    closed_tasks AS (
        UPDATE workflow_tasks SET state = 'cancelled', lease_token = NULL
        WHERE run_id = {run_id} AND state IN ('ready', 'leased') AND {when}
          AND task_id IS DISTINCT FROM {except_task}
    ), closed_ready_activities AS (
        UPDATE activity_tasks SET state = 'cancelled', cancel_requested = true
        WHERE run_id = {run_id} AND state = 'ready' AND {when}
    ), cancelled_leased_activities AS (
        UPDATE activity_tasks SET cancel_requested = true
        WHERE run_id = {run_id} AND state = 'leased' AND {when}
          AND task_id IS DISTINCT FROM {except_activity}
    ), closed_timers AS (
        UPDATE timers SET state = 'cancelled'
        WHERE run_id = {run_id} AND state = 'pending' AND {when}
    )"""


def abandoned_activity(a: sa.ColumnCollection[str, sa.ColumnElement[object]]) -> sa.Exists:
    """Whether the activity row `a` (activity_tasks columns) was scheduled with policy abandon.

    Its ActivityScheduled records the policy its code chose (PROTOCOL.md 7): the run's
    cancellation leaves such an activity running.
    """
    h = schema.history_events.c
    return (
        sa.select(h.sequence)
        .where(
            h.run_id == a.run_id,
            h.event_type == "ActivityScheduled",
            h.payload["sequence"].as_integer() == a.step_seq,
            h.payload["activity"]["cancellation_policy"].as_string() == "abandon",
        )
        .exists()
    )
