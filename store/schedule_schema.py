"""The schedule tables (issue 30), on the one schema's metadata (store/schema.py)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from burrow.store.schema import NOW, TS, metadata

# Schedules (issue 30): a spec, the workflow start a fire makes, and its policies, with the next
# fire time the repair pass claims on (`next_due_at`: the fire time plus its jitter).
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("schedule_id", sa.Text, nullable=False),
    sa.Column("spec", pg.JSONB, nullable=False),
    sa.Column("action", pg.JSONB, nullable=False),
    sa.Column("policies", pg.JSONB, nullable=False),
    sa.Column("workflow_type", sa.Text, nullable=False),
    sa.Column("memo", pg.JSONB, nullable=True),
    sa.Column("search_attributes", pg.JSONB, nullable=True),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("note", sa.Text, nullable=True),
    sa.Column("paused_at", TS, nullable=True),
    sa.Column("next_fire_at", TS, nullable=True),
    sa.Column("next_due_at", TS, nullable=True),
    sa.Column("buffered_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("fires_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("skipped_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("missed_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("failures_count", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("last_fired_at", TS, nullable=True),
    sa.Column("latest_workflow_id", sa.Text, nullable=True),
    sa.Column("latest_run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "schedule_id"),
    sa.Index("ix_schedules_next_due_at", "next_due_at", postgresql_where=sa.text("NOT paused")),
    sa.Index(
        "ix_schedules_buffered",
        "namespace",
        "schedule_id",
        postgresql_where=sa.text("NOT paused AND buffered_count > 0"),
    ),
)

# One row per fire time of a schedule: the key that makes each fire time start at most one
# workflow, whichever process fires it (issue 30). `outcome`: started, buffered, skipped, failed.
schedule_fires = sa.Table(
    "schedule_fires",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("schedule_id", sa.Text, nullable=False),
    sa.Column("fire_at", TS, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("workflow_id", sa.Text, nullable=False),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("recorded_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "schedule_id", "fire_at"),
    sa.ForeignKeyConstraint(
        ["namespace", "schedule_id"],
        ["schedules.namespace", "schedules.schedule_id"],
        ondelete="CASCADE",
    ),
    sa.Index(
        "ix_schedule_fires_buffered",
        "namespace",
        "schedule_id",
        "fire_at",
        postgresql_where=sa.text("outcome = 'buffered'"),
    ),
)

# A schedule's audit stream (issue 30; the reference's `workflow_schedule_history_events`): one
# row per lifecycle change and per fire, numbered per schedule id from 1. No foreign key: the
# stream outlives the schedule, so `ScheduleDeleted` stays readable after a delete.
schedule_history = sa.Table(
    "schedule_history",
    metadata,
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("schedule_id", sa.Text, nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column(
        "id", pg.UUID(as_uuid=False), nullable=False, server_default=sa.text("gen_random_uuid()")
    ),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("payload", pg.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("workflow_id", sa.Text, nullable=True),
    sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
    sa.Column("recorded_at", TS, nullable=False, server_default=NOW),
    sa.PrimaryKeyConstraint("namespace", "schedule_id", "sequence"),
)
