"""update validators: validation tasks beside query tasks, and the validators workers declare

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "query_tasks",
        sa.Column("task_kind", sa.Text(), nullable=False, server_default=sa.text("'query'")),
    )
    op.add_column(
        "worker_registrations",
        sa.Column("update_validators", pg.JSONB(), nullable=False, server_default=sa.text("'{}'")),
    )


def downgrade() -> None:
    op.drop_column("worker_registrations", "update_validators")
    op.drop_column("query_tasks", "task_kind")
