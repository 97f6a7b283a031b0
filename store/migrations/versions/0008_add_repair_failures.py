"""add repair failures: rows the repair pass isolated, held out until their retry time

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "repair_failures",
        sa.Column("step", sa.Text(), nullable=False),
        sa.Column("row_key", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("first_failed_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("last_failed_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("retry_after", TS, nullable=False),
        sa.PrimaryKeyConstraint("step", "row_key", name="pk_repair_failures"),
    )
    op.create_index("ix_repair_failures_namespace", "repair_failures", ["namespace"])


def downgrade() -> None:
    op.drop_index("ix_repair_failures_namespace", table_name="repair_failures")
    op.drop_table("repair_failures")
