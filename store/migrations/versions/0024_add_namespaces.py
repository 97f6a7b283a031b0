"""namespaces as records with a retention window, and the indexes retention deletes by

Revision ID: 0024
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0025"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "namespaces",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("retention_days", sa.Integer(), server_default="30", nullable=True),
        sa.Column("status", sa.Text(), server_default="active", nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_namespaces"),
    )
    # Every namespace the store already uses becomes a record that keeps its runs (no window:
    # an upgrade deletes nothing until an operator sets one); a new store's `default` gets the
    # reference's 30 days. The default namespace works with no setup, as it did before.
    op.execute(
        "INSERT INTO namespaces (name, retention_days)"
        " SELECT namespace, CAST(NULL AS integer) FROM runs"
        " UNION SELECT namespace, NULL FROM schedules"
        " UNION SELECT namespace, NULL FROM worker_registrations"
        " UNION SELECT namespace, NULL FROM search_attribute_definitions"
        " ON CONFLICT DO NOTHING"
    )
    op.execute("INSERT INTO namespaces (name) VALUES ('default') ON CONFLICT DO NOTHING")
    # A closed task's run: an entry only once the task is done (open ones have
    # uq_workflow_tasks_open_run), so the claim path's non-HOT updates never write here. The
    # retention scan reads ix_runs_namespace_closed_at (migration 0025).
    op.create_index(
        "ix_workflow_tasks_closed_run_id",
        "workflow_tasks",
        ["run_id"],
        postgresql_where=sa.text("state NOT IN ('ready', 'leased')"),
    )
    op.create_index("ix_query_tasks_run_id", "query_tasks", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_query_tasks_run_id", table_name="query_tasks")
    op.drop_index("ix_workflow_tasks_closed_run_id", table_name="workflow_tasks")
    op.drop_table("namespaces")
