"""worker sessions: the session table, capability admission columns (W1, W4-W6, W9)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "worker_sessions",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False, server_default="active"),
        sa.Column("owner_worker_id", sa.Text(), nullable=True),
        sa.Column("connection", sa.Text(), nullable=False, server_default="default"),
        sa.Column("queue", sa.Text(), nullable=True),
        sa.Column("requirements", pg.ARRAY(sa.Text()), nullable=False, server_default="{}"),
        sa.Column("lease_seconds", sa.Integer(), nullable=False),
        sa.Column("ttl_seconds", sa.Integer(), nullable=False),
        sa.Column("max_concurrent_activities", sa.Integer(), nullable=False),
        sa.Column("create_if_missing", sa.Boolean(), nullable=False, server_default=sa.true()),
        sa.Column(
            "allow_reacquire_after_failure",
            sa.Boolean(),
            nullable=False,
            server_default=sa.true(),
        ),
        sa.Column("lease_expires_at", TS, nullable=False),
        sa.Column("ttl_expires_at", TS, nullable=False),
        sa.Column("last_heartbeat_at", TS, nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("close_reason", sa.Text(), nullable=True),
        sa.Column("closed_at", TS, nullable=True),
        sa.Column("reacquire_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("namespace", "session_id", name="pk_worker_sessions"),
    )
    op.create_index(
        "ix_worker_sessions_owner",
        "worker_sessions",
        ["owner_worker_id"],
        postgresql_where=sa.text("state = 'active'"),
    )
    op.create_index("ix_worker_sessions_state", "worker_sessions", ["namespace", "state"])
    op.add_column("activity_tasks", sa.Column("session_id", sa.Text(), nullable=True))
    op.add_column("activity_tasks", sa.Column("worker_session", pg.JSONB(), nullable=True))
    op.create_index(
        "ix_activity_tasks_session",
        "activity_tasks",
        ["namespace", "session_id"],
        postgresql_where=sa.text("session_id IS NOT NULL AND state IN ('ready', 'leased')"),
    )
    op.add_column(
        "worker_registrations",
        sa.Column(
            "max_concurrent_worker_sessions", sa.Integer(), nullable=False, server_default="10"
        ),
    )


def downgrade() -> None:
    op.drop_column("worker_registrations", "max_concurrent_worker_sessions")
    op.drop_index("ix_activity_tasks_session", table_name="activity_tasks")
    op.drop_column("activity_tasks", "worker_session")
    op.drop_column("activity_tasks", "session_id")
    op.drop_index("ix_worker_sessions_state", table_name="worker_sessions")
    op.drop_index("ix_worker_sessions_owner", table_name="worker_sessions")
    op.drop_table("worker_sessions")
