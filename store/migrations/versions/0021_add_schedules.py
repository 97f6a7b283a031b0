"""schedules and their fires (issue 30)

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("schedule_id", sa.Text(), nullable=False),
        sa.Column("spec", pg.JSONB(), nullable=False),
        sa.Column("action", pg.JSONB(), nullable=False),
        sa.Column("policies", pg.JSONB(), nullable=False),
        sa.Column("workflow_type", sa.Text(), nullable=False),
        sa.Column("memo", pg.JSONB(), nullable=True),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("paused_at", TS, nullable=True),
        sa.Column("next_fire_at", TS, nullable=True),
        sa.Column("next_due_at", TS, nullable=True),
        sa.Column("buffered_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("fires_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("skipped_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("missed_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("failures_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("last_fired_at", TS, nullable=True),
        sa.Column("latest_workflow_id", sa.Text(), nullable=True),
        sa.Column("latest_run_id", pg.UUID(as_uuid=False), nullable=True),
        sa.Column("created_at", TS, nullable=False, server_default=NOW),
        sa.Column("updated_at", TS, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("namespace", "schedule_id", name="pk_schedules"),
    )
    op.create_index(
        "ix_schedules_next_due_at",
        "schedules",
        ["next_due_at"],
        postgresql_where=sa.text("NOT paused"),
    )
    op.create_index(
        "ix_schedules_buffered",
        "schedules",
        ["namespace", "schedule_id"],
        postgresql_where=sa.text("NOT paused AND buffered_count > 0"),
    )
    op.create_table(
        "schedule_fires",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("schedule_id", sa.Text(), nullable=False),
        sa.Column("fire_at", TS, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("workflow_id", sa.Text(), nullable=False),
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("recorded_at", TS, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("namespace", "schedule_id", "fire_at", name="pk_schedule_fires"),
        sa.ForeignKeyConstraint(
            ["namespace", "schedule_id"],
            ["schedules.namespace", "schedules.schedule_id"],
            name="fk_schedule_fires_namespace_schedules",
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "ix_schedule_fires_buffered",
        "schedule_fires",
        ["namespace", "schedule_id", "fire_at"],
        postgresql_where=sa.text("outcome = 'buffered'"),
    )


def downgrade() -> None:
    op.drop_table("schedule_fires")
    op.drop_table("schedules")
