"""cooperative cancellation: the run's cleanup deadline

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("cleanup_deadline_at", sa.DateTime(timezone=True)))
    op.create_index(
        "ix_runs_cleanup_deadline",
        "runs",
        ["cleanup_deadline_at"],
        postgresql_where=sa.text("status = 'running' AND cleanup_deadline_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_cleanup_deadline", table_name="runs")
    op.drop_column("runs", "cleanup_deadline_at")
