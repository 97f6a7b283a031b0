"""sticky execution: worker cache figures and the index a sticky claim reads (S5, S10)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("worker_registrations", sa.Column("sticky_cache", pg.JSONB(), nullable=True))
    op.create_index(
        "ix_workflow_tasks_sticky_ready",
        "workflow_tasks",
        ["sticky_worker_id", "available_at"],
        postgresql_where=sa.text("state = 'ready' AND sticky_worker_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_tasks_sticky_ready", table_name="workflow_tasks")
    op.drop_column("worker_registrations", "sticky_cache")
