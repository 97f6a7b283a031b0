"""sticky reports: what workers' cache counters rose by, and when (S10, S11)

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sticky_reports",
        sa.Column("report_id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("worker_id", sa.Text(), nullable=False),
        sa.Column("reported_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("hits", sa.Integer(), nullable=False),
        sa.Column("misses", sa.Integer(), nullable=False),
        sa.Column("forced_cold_replays", sa.Integer(), nullable=False),
        sa.Column("evictions", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("report_id", name="pk_sticky_reports"),
    )
    op.create_index(
        "ix_sticky_reports_namespace_reported_at", "sticky_reports", ["namespace", "reported_at"]
    )
    op.create_index("ix_sticky_reports_reported_at", "sticky_reports", ["reported_at"])


def downgrade() -> None:
    op.drop_index("ix_sticky_reports_reported_at", table_name="sticky_reports")
    op.drop_index("ix_sticky_reports_namespace_reported_at", table_name="sticky_reports")
    op.drop_table("sticky_reports")
