"""child workflows, workflow deadlines and workflow retries

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _run_columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("parent_run_id", pg.UUID(as_uuid=False), nullable=True),
        sa.Column("parent_workflow_id", sa.Text, nullable=True),
        sa.Column("parent_step_seq", sa.Integer, nullable=True),
        sa.Column("has_children", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("execution_timeout_seconds", sa.Float, nullable=True),
        sa.Column("run_timeout_seconds", sa.Float, nullable=True),
        sa.Column("execution_deadline_at", TS, nullable=True),
        sa.Column("run_deadline_at", TS, nullable=True),
        sa.Column("retry_policy", pg.JSONB, nullable=True),
        sa.Column("retry_attempt", sa.Integer, nullable=False, server_default="1"),
        sa.Column("retry_of_run_id", pg.UUID(as_uuid=False), nullable=True),
    )


def upgrade() -> None:
    for column in _run_columns():
        op.add_column("runs", column)
    op.create_index(
        "ix_runs_deadline",
        "runs",
        [sa.text("least(run_deadline_at, execution_deadline_at)")],
        postgresql_where=sa.text(
            "status = 'running' AND (run_deadline_at IS NOT NULL"
            " OR execution_deadline_at IS NOT NULL)"
        ),
    )
    op.create_table(
        "child_workflows",
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
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("closed_at", TS, nullable=True),
        sa.Column("policy_applied_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("parent_run_id", "step_seq", name="pk_child_workflows"),
    )
    op.create_index(
        "ix_child_workflows_policy_pending",
        "child_workflows",
        ["parent_run_id"],
        postgresql_where=sa.text("policy_state = 'pending'"),
    )
    op.create_index(
        "ix_child_workflows_child", "child_workflows", ["namespace", "child_workflow_id"]
    )


def downgrade() -> None:
    op.drop_table("child_workflows")
    op.drop_index("ix_runs_deadline", table_name="runs")
    for column in reversed(_run_columns()):
        op.drop_column("runs", column.name)
