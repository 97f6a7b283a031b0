"""The one schema source: SQLAlchemy Core tables, used by queries and by Alembic."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from burrow.store.schema_base import NOW, TS, metadata
from burrow.store.visibility_schema import (
    run_memos,
    run_search_attributes,
    runs_list_indexes,
    search_attribute_definitions,
)

__all__ = [
    "NOW",
    "TS",
    "metadata",
    "run_memos",
    "run_search_attributes",
    "search_attribute_definitions",
]


def _routing_columns() -> list[sa.Column[object]]:
    """Namespace, connection, queue and compatibility family: on every task (M7)."""
    return [
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("connection", sa.Text, nullable=False, server_default="default"),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("build_id", sa.Text, nullable=True),
    ]


def _lease_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("state", sa.Text, nullable=False, server_default="ready"),
        sa.Column("available_at", TS, nullable=False, server_default=NOW),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_token", pg.UUID(as_uuid=False), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("created_at", TS, nullable=False, server_default=NOW),
    ]


runs = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("workflow_id", sa.Text, nullable=False),
    sa.Column("workflow_type", sa.Text, nullable=False),
    sa.Column("connection", sa.Text, nullable=False, server_default="default"),
    sa.Column("task_queue", sa.Text, nullable=False),
    sa.Column("build_id", sa.Text, nullable=True),
    sa.Column("status", sa.Text, nullable=False, server_default="running"),
    sa.Column("input", pg.JSONB, nullable=False),
    sa.Column("result", pg.JSONB, nullable=True),
    sa.Column("failure", pg.JSONB, nullable=True),
    sa.Column("last_event_seq", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_step_seq", sa.Integer, nullable=False, server_default="0"),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("continued_from_run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("continued_to_run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("sticky_worker_id", sa.Text, nullable=True),
    sa.Column("sticky_until", TS, nullable=True),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("closed_at", TS, nullable=True),
    # The broker queue of the client that started the run: its changes route to it unbound.
    sa.Column("notify_queue", sa.Text, nullable=True),
    # S8: the fingerprint of the workflow definition the run was started against.
    sa.Column("workflow_definition_fingerprint", sa.Text, nullable=True),
    # A child run names its parent and the parent's step that started it (migration 0012).
    sa.Column("parent_run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("parent_workflow_id", sa.Text, nullable=True),
    sa.Column("parent_step_seq", sa.Integer, nullable=True),
    # Set once the run starts a child: its close then goes through child_workflows.
    sa.Column("has_children", sa.Boolean, nullable=False, server_default=sa.false()),
    # Deadlines: the execution one covers the whole chain of runs, the run one this run.
    sa.Column("execution_timeout_seconds", sa.Float, nullable=True),
    sa.Column("run_timeout_seconds", sa.Float, nullable=True),
    sa.Column("execution_deadline_at", TS, nullable=True),
    sa.Column("run_deadline_at", TS, nullable=True),
    # A failed run is retried as a new run of the same id while this policy allows.
    sa.Column("retry_policy", pg.JSONB, nullable=True),
    sa.Column("retry_attempt", sa.Integer, nullable=False, server_default="1"),
    sa.Column("retry_of_run_id", pg.UUID(as_uuid=False), nullable=True),
    # The control plane's archive of a closed run: when, and the reason it was given.
    sa.Column("archived_at", TS, nullable=True),
    sa.Column("archive_reason", sa.Text, nullable=True),
    # Cooperative cancellation: cleanup code runs until then, the repair pass closes it after.
    sa.Column("cleanup_deadline_at", TS, nullable=True),
    sa.Index(
        "ix_runs_cleanup_deadline",
        "cleanup_deadline_at",
        postgresql_where=sa.text("status = 'running' AND cleanup_deadline_at IS NOT NULL"),
    ),
    sa.Index(
        "ix_runs_deadline",
        sa.text("least(run_deadline_at, execution_deadline_at)"),
        postgresql_where=sa.text(
            "status = 'running' AND (run_deadline_at IS NOT NULL"
            " OR execution_deadline_at IS NOT NULL)"
        ),
    ),
    sa.Index(
        "uq_runs_open_workflow_id",
        "namespace",
        "workflow_id",
        unique=True,
        postgresql_where=sa.text("status = 'running'"),
    ),
    *runs_list_indexes(),  # the list query's (visibility_schema.py)
    # Page room for HOT updates of a running run (migration 0025): they touch no index.
    postgresql_with={"fillfactor": 70},
)

history_events = sa.Table(
    "history_events",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("sequence", sa.Integer, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("payload", pg.JSONB, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False),
    sa.Column("workflow_task_id", pg.UUID(as_uuid=False), nullable=True),
    # D3: stamped on insert by the database (trigger history_events_stamp, migration 0011).
    sa.Column("recorded_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("run_id", "sequence"),
    sa.UniqueConstraint("run_id", "idempotency_key"),
)

# Events that happened outside a workflow task (activity results, fired timers, signals). They
# join the history when the next workflow task is claimed, so history order is the order in
# which workflow code observed them (D1) and concurrent writers never race for sequences.
inbox_events = sa.Table(
    "inbox_events",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("payload", pg.JSONB, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=False),
    sa.Column("wakes_workflow", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("applied", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.UniqueConstraint("run_id", "idempotency_key"),
    sa.Index("ix_inbox_events_pending", "run_id", "id", postgresql_where=sa.text("NOT applied")),
)

workflow_tasks = sa.Table(
    "workflow_tasks",
    metadata,
    sa.Column("task_id", pg.UUID(as_uuid=False), primary_key=True),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("workflow_type", sa.Text, nullable=False),
    *_routing_columns(),
    *_lease_columns(),
    sa.Column("last_failure", pg.JSONB, nullable=True),
    sa.Column("claimed_at", TS, nullable=True),
    sa.Column("sticky_worker_id", sa.Text, nullable=True),
    sa.Column("sticky_until", TS, nullable=True),
    sa.Column("sticky_replay_mode", sa.Text, nullable=True),
    sa.Column("sticky_claimed_at", TS, nullable=True),
    # Set when a waking event joined the run's inbox while this task was leased: its completion
    # must make the next task even if it cannot see that event yet (completion/statements.py).
    sa.Column("follow_up", sa.Boolean, nullable=False, server_default=sa.false()),
    # Store invariant 4: at most one open workflow task per run.
    sa.Index(
        "uq_workflow_tasks_open_run",
        "run_id",
        unique=True,
        postgresql_where=sa.text("state IN ('ready', 'leased')"),
    ),
    sa.Index(
        "ix_workflow_tasks_ready",
        "namespace",
        "queue",
        "available_at",
        postgresql_where=sa.text("state = 'ready'"),
    ),
    sa.Index(
        "ix_workflow_tasks_leased", "lease_expires_at", postgresql_where=sa.text("state = 'leased'")
    ),
    # S5a: a worker's claim looks for the ready tasks bound to it first.
    sa.Index(
        "ix_workflow_tasks_sticky_ready",
        "sticky_worker_id",
        "available_at",
        postgresql_where=sa.text("state = 'ready' AND sticky_worker_id IS NOT NULL"),
    ),
)

activity_tasks = sa.Table(
    "activity_tasks",
    metadata,
    sa.Column("task_id", pg.UUID(as_uuid=False), primary_key=True),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("step_seq", sa.Integer, nullable=False),
    sa.Column("activity_type", sa.Text, nullable=False),
    sa.Column("activity_execution_id", sa.Text, nullable=False),
    sa.Column("activity_attempt_id", pg.UUID(as_uuid=False), nullable=False),
    *_routing_columns(),
    *_lease_columns(),
    sa.Column("arguments", pg.JSONB, nullable=False),
    sa.Column("retry_policy", pg.JSONB, nullable=False),
    sa.Column("schedule_to_start_seconds", sa.Float, nullable=True),
    sa.Column("start_to_close_seconds", sa.Float, nullable=True),
    sa.Column("schedule_to_close_seconds", sa.Float, nullable=True),
    sa.Column("heartbeat_seconds", sa.Float, nullable=True),
    sa.Column("scheduled_at", TS, nullable=False, server_default=NOW),
    sa.Column("schedule_to_close_deadline", TS, nullable=True),
    sa.Column("started_at", TS, nullable=True),
    sa.Column("heartbeat_at", TS, nullable=True),
    sa.Column("heartbeat_details", pg.JSONB, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("last_failure", pg.JSONB, nullable=True),
    sa.Column("claimed_at", TS, nullable=True),
    # W4: the worker session the activity runs in (its id, and the options snapshot).
    sa.Column("session_id", sa.Text, nullable=True),
    sa.Column("worker_session", pg.JSONB, nullable=True),
    sa.UniqueConstraint("run_id", "step_seq"),
    sa.Index(
        "ix_activity_tasks_ready",
        "namespace",
        "queue",
        "available_at",
        postgresql_where=sa.text("state = 'ready'"),
    ),
    sa.Index(
        "ix_activity_tasks_open", "state", postgresql_where=sa.text("state IN ('ready', 'leased')")
    ),
    # W6: admission counts the leased attempts of one session.
    sa.Index(
        "ix_activity_tasks_session",
        "namespace",
        "session_id",
        postgresql_where=sa.text("session_id IS NOT NULL AND state IN ('ready', 'leased')"),
    ),
)

timers = sa.Table(
    "timers",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("step_seq", sa.Integer, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("fire_at", TS, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="pending"),
    sa.Column("delay_seconds", sa.Float, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "step_seq"),
    sa.Index("ix_timers_due", "fire_at", postgresql_where=sa.text("state = 'pending'")),
)

signals = sa.Table(
    "signals",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("signal_id", sa.Text, nullable=False),
    sa.Column("signal_name", sa.Text, nullable=False),
    sa.Column("arguments", pg.JSONB, nullable=False),
    sa.Column("received_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("run_id", "signal_id"),
)

updates = sa.Table(
    "updates",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("update_id", sa.Text, nullable=False),
    sa.Column("update_name", sa.Text, nullable=False),
    sa.Column("arguments", pg.JSONB, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="accepted"),
    sa.Column("result", pg.JSONB, nullable=True),
    sa.Column("failure", pg.JSONB, nullable=True),
    sa.Column("accepted_at", TS, nullable=False, server_default=NOW),
    sa.Column("completed_at", TS, nullable=True),
    sa.PrimaryKeyConstraint("run_id", "update_id"),
)

query_tasks = sa.Table(
    "query_tasks",
    metadata,
    sa.Column("task_id", pg.UUID(as_uuid=False), primary_key=True),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("workflow_type", sa.Text, nullable=False),
    *_routing_columns(),
    *_lease_columns(),
    # "query", or "update_validation": a validator run before an update is accepted.
    sa.Column("task_kind", sa.Text, nullable=False, server_default="query"),
    sa.Column("query_name", sa.Text, nullable=False),
    sa.Column("arguments", pg.JSONB, nullable=False),
    sa.Column("result", pg.JSONB, nullable=True),
    sa.Column("failure", pg.JSONB, nullable=True),
    sa.Column("expires_at", TS, nullable=False),
    sa.Index(
        "ix_query_tasks_ready",
        "namespace",
        "queue",
        postgresql_where=sa.text("state = 'ready'"),
    ),
)

worker_registrations = sa.Table(
    "worker_registrations",
    metadata,
    sa.Column("worker_id", sa.Text, primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("connection", sa.Text, nullable=False, server_default="default"),
    sa.Column("task_queue", sa.Text, nullable=False),
    sa.Column("build_id", sa.Text, nullable=True),
    sa.Column("runtime", sa.Text, nullable=False, server_default="python"),
    sa.Column("workflow_types", pg.ARRAY(sa.Text), nullable=False),
    sa.Column("activity_types", pg.ARRAY(sa.Text), nullable=False),
    sa.Column("capabilities", pg.ARRAY(sa.Text), nullable=False, server_default="{}"),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("sticky_cache_enabled", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("sticky_cache_capacity", sa.Integer, nullable=False, server_default="0"),
    # S10: the cache figures of the worker's last heartbeat (size, hits, misses, evictions...).
    sa.Column("sticky_cache", pg.JSONB, nullable=True),
    # W6: how many active worker sessions this registration may hold.
    sa.Column("max_concurrent_worker_sessions", sa.Integer, nullable=False, server_default="10"),
    # S8: workflow type -> definition fingerprint ("sha256:..."), as the worker registered them.
    sa.Column("workflow_fingerprints", pg.JSONB, nullable=False, server_default="{}"),
    # Workflow type -> the update names it declares a validator for, as the worker registered.
    sa.Column("update_validators", pg.JSONB, nullable=False, server_default="{}"),
    sa.Column("state", sa.Text, nullable=False, server_default="active"),
    # M8: what the fleet views report as the SDK declared it (None for Burrow's own workers).
    sa.Column("sdk_version", sa.Text, nullable=True),
    sa.Column("max_workflow_tasks", sa.Integer, nullable=True),
    sa.Column("max_activity_tasks", sa.Integer, nullable=True),
    sa.Column("registered_at", TS, nullable=False, server_default=NOW),
    sa.Column("heartbeat_at", TS, nullable=False, server_default=NOW),
    sa.Column("stopped_at", TS, nullable=True),
    sa.Index("ix_worker_registrations_queue", "namespace", "task_queue", "heartbeat_at"),
)

# M7, M8: an operator's drain intent per build-id cohort of a task queue, and which cohort fresh
# starts pin to. A draining cohort's workers take no new tasks, and a worker of it registering
# later lands draining (rollouts.py).
build_rollouts = sa.Table(
    "build_rollouts",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("task_queue", sa.Text, nullable=False),
    # '' is the unversioned cohort (workers registered without a build id).
    sa.Column("build_key", sa.Text, nullable=False),
    sa.Column("drain_intent", sa.Text, nullable=False, server_default="active"),
    sa.Column("drained_at", TS, nullable=True),
    # The cohort fresh starts on the queue pin to (at most one per queue).
    sa.Column("promoted_at", TS, nullable=True),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "task_queue", "build_key"),
)

# W1, W5: one row per worker session id of a namespace; at most one lease owner at a time.
worker_sessions = sa.Table(
    "worker_sessions",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="active"),
    sa.Column("owner_worker_id", sa.Text, nullable=True),
    sa.Column("connection", sa.Text, nullable=False, server_default="default"),
    sa.Column("queue", sa.Text, nullable=True),
    sa.Column("requirements", pg.ARRAY(sa.Text), nullable=False, server_default="{}"),
    sa.Column("lease_seconds", sa.Integer, nullable=False),
    sa.Column("ttl_seconds", sa.Integer, nullable=False),
    sa.Column("max_concurrent_activities", sa.Integer, nullable=False),
    sa.Column("create_if_missing", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column(
        "allow_reacquire_after_failure", sa.Boolean, nullable=False, server_default=sa.true()
    ),
    sa.Column("lease_expires_at", TS, nullable=False),
    sa.Column("ttl_expires_at", TS, nullable=False),
    sa.Column("last_heartbeat_at", TS, nullable=True),
    sa.Column("failure_reason", sa.Text, nullable=True),
    sa.Column("close_reason", sa.Text, nullable=True),
    sa.Column("closed_at", TS, nullable=True),
    sa.Column("reacquire_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "session_id"),
    sa.Index(
        "ix_worker_sessions_owner",
        "owner_worker_id",
        postgresql_where=sa.text("state = 'active'"),
    ),
    sa.Index("ix_worker_sessions_state", "namespace", "state"),
)

# One row per child a run started (the parent's step): its policies, and whether the parent
# close policy still has to be applied to it (the repair pass applies pending ones).
child_workflows = sa.Table(
    "child_workflows",
    metadata,
    sa.Column("parent_run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("step_seq", sa.Integer, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("child_workflow_id", sa.Text, nullable=False),
    sa.Column("child_run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("workflow_type", sa.Text, nullable=False),
    sa.Column("parent_close_policy", sa.Text, nullable=False),
    sa.Column("cancellation_policy", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="running"),
    sa.Column("policy_state", sa.Text, nullable=False, server_default="none"),
    sa.Column("closed_status", sa.Text, nullable=True),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("closed_at", TS, nullable=True),
    sa.Column("policy_applied_at", TS, nullable=True),
    sa.PrimaryKeyConstraint("parent_run_id", "step_seq"),
    sa.Index(
        "ix_child_workflows_policy_pending",
        "parent_run_id",
        postgresql_where=sa.text("policy_state = 'pending'"),
    ),
    sa.Index("ix_child_workflows_child", "namespace", "child_workflow_id"),
)

# A standalone activity (PROTOCOL.md 17, SDK `start_activity`): an activity execution run
# without workflow code, anchored by a host run (workflow type `standalone.HOST_WORKFLOW_TYPE`)
# whose one activity task ordinary activity workers claim. The host run closes with the
# activity (store/standalone.py); `settled_at` is NULL until it has.
standalone_activities = sa.Table(
    "standalone_activities",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("activity_id", sa.Text, nullable=False),
    sa.Column("activity_type", sa.Text, nullable=False),
    sa.Column("activity_class", sa.Text, nullable=True),
    sa.Column("business_key", sa.Text, nullable=True),
    sa.Column("task_queue", sa.Text, nullable=False),
    sa.Column("task_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("activity_execution_id", sa.Text, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("settled_at", TS, nullable=True),
    sa.Index("ix_standalone_activities_namespace_created_at", "namespace", "created_at", "run_id"),
    sa.Index(
        "ix_standalone_activities_unsettled",
        "run_id",
        postgresql_where=sa.text("settled_at IS NULL"),
    ),
)


# A workflow message stream (PROTOCOL.md 17, SDK `append_message_stream`): each message of a
# workflow id's named stream, numbered in append order across the id's runs (`position`, from 1)
# and kept once per message id, with the run that is to read it (`run_id`: a continue-as-new
# moves what its run had not read). The workflow receives it as a signal
# (store/message_streams.py). Positions and ids count per workflow id since migration 0020, under
# the current run's lock: older rows may repeat them across runs, so the indexes do not refuse it.
message_stream_messages = sa.Table(
    "message_stream_messages",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("stream_name", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("message_id", sa.Text, nullable=False),
    sa.Column("payload", pg.JSONB, nullable=False),
    sa.Column("appended_at", TS, nullable=False, server_default=NOW),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("workflow_id", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "stream_name", "position"),
    sa.UniqueConstraint("run_id", "stream_name", "message_id"),
    sa.Index(
        "ix_message_stream_messages_workflow_position",
        "namespace",
        "workflow_id",
        "stream_name",
        "position",
    ),
    sa.Index(
        "ix_message_stream_messages_workflow_message_id",
        "namespace",
        "workflow_id",
        "stream_name",
        "message_id",
    ),
)


# Runtime external payloads (PROTOCOL.md 10, the SDK's `/api/external-payloads/v1`): payload
# blobs a client uploaded, by reference id, kept once per namespace and content.
external_payloads = sa.Table(
    "external_payloads",
    metadata,
    sa.Column("reference_id", sa.Text, primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("codec", sa.Text, nullable=False),
    sa.Column("size_bytes", sa.Integer, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.UniqueConstraint("namespace", "sha256", "size_bytes", "codec"),
)


# Issue 25 item 1: a row the repair pass failed to repair, held out of later passes until
# `retry_after` (store/isolation.py) so one bad row never stops the rest.
# S10, S11: how much each worker's reported cache counters rose by, when it reported; the
# operator metrics sum the last minute's. Rows older than a few minutes are pruned on insert.
sticky_reports = sa.Table(
    "sticky_reports",
    metadata,
    sa.Column("report_id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("worker_id", sa.Text, nullable=False),
    sa.Column("reported_at", TS, nullable=False, server_default=NOW),
    sa.Column("hits", sa.Integer, nullable=False),
    sa.Column("misses", sa.Integer, nullable=False),
    sa.Column("forced_cold_replays", sa.Integer, nullable=False),
    sa.Column("evictions", sa.Integer, nullable=False),
    sa.Index("ix_sticky_reports_namespace_reported_at", "namespace", "reported_at"),
    sa.Index("ix_sticky_reports_reported_at", "reported_at"),
)


repair_failures = sa.Table(
    "repair_failures",
    metadata,
    sa.Column("step", sa.Text, nullable=False),
    sa.Column("row_key", sa.Text, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("failures", sa.Integer, nullable=False, server_default="1"),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("first_failed_at", TS, nullable=False, server_default=NOW),
    sa.Column("last_failed_at", TS, nullable=False, server_default=NOW),
    sa.Column("retry_after", TS, nullable=False),
    sa.PrimaryKeyConstraint("step", "row_key"),
    sa.Index("ix_repair_failures_namespace", "namespace"),
)


# A run's output streams (SDK `Client.*_workflow_stream`, the `workflow_stream` directive of
# `record_side_effect`): each stream's lifecycle (`open`, then `closed` or `errored`), how many
# items it holds (`next_offset`, offsets from 0) and the highest offset a subscriber resumed
# from (`delivered_offset`: the items below it are no longer pending).
workflow_streams = sa.Table(
    "workflow_streams",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("stream_name", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="open"),
    sa.Column("next_offset", sa.Integer, nullable=False, server_default="0"),
    sa.Column("delivered_offset", sa.Integer, nullable=False, server_default="0"),
    sa.Column("error_reason", sa.Text, nullable=True),
    sa.Column("retention_seconds", sa.Integer, nullable=True),
    sa.Column("opened_at", TS, nullable=False, server_default=NOW),
    sa.Column("last_appended_at", TS, nullable=True),
    sa.Column("closed_at", TS, nullable=True),
    sa.PrimaryKeyConstraint("run_id", "stream_name"),
)

# Each item of a run's output stream, at its offset, kept once per idempotency key.
workflow_stream_items = sa.Table(
    "workflow_stream_items",
    metadata,
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
    sa.Column("stream_name", sa.Text, nullable=False),
    sa.Column("offset", sa.Integer, nullable=False),
    sa.Column("idempotency_key", sa.Text, nullable=True),
    sa.Column("payload", pg.JSONB, nullable=True),
    sa.Column("payload_reference", sa.Text, nullable=True),
    sa.Column("payload_codec", sa.Text, nullable=True),
    sa.Column("item_type", sa.Text, nullable=True),
    sa.Column("content_type", sa.Text, nullable=True),
    sa.Column("origin", sa.Text, nullable=False),
    sa.Column("origin_reference", sa.Text, nullable=True),
    sa.Column("emitted_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("run_id", "stream_name", "offset"),
    sa.UniqueConstraint("run_id", "stream_name", "idempotency_key"),
)


# Defined beside, on this metadata; imported last, once the names they use exist.
from burrow.store.namespace_schema import namespaces as namespaces  # noqa: E402
from burrow.store.schedule_schema import schedule_fires as schedule_fires  # noqa: E402
from burrow.store.schedule_schema import schedule_history as schedule_history  # noqa: E402
from burrow.store.schedule_schema import schedules as schedules  # noqa: E402
