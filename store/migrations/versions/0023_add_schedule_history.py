"""schedule history (each schedule's audit stream) and schedules' search attributes (issue 30)

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The search attributes a schedule was given (the SDK's `create_schedule` sends them).
    op.add_column("schedules", sa.Column("search_attributes", pg.JSONB(), nullable=True))
    op.create_table(
        "schedule_history",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("schedule_id", sa.Text(), nullable=False),
        sa.Column("sequence", sa.BigInteger(), nullable=False),
        sa.Column(
            "id",
            pg.UUID(as_uuid=False),
            server_default=sa.text("gen_random_uuid()"),
            nullable=False,
        ),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", pg.JSONB(), server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("workflow_id", sa.Text(), nullable=True),
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=True),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("namespace", "schedule_id", "sequence", name="pk_schedule_history"),
    )


def downgrade() -> None:
    op.drop_table("schedule_history")
    op.drop_column("schedules", "search_attributes")
