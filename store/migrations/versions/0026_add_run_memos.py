"""run memos: each run's memo as one JSON object, written only for runs that have one

Revision ID: 0026
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0026"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_memos",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("memo", pg.JSONB(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_run_memos"),
    )


def downgrade() -> None:
    op.drop_table("run_memos")
