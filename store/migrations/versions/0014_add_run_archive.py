"""runs: when and why a closed run was archived (the control plane's archive command)

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("archive_reason", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "archive_reason")
    op.drop_column("runs", "archived_at")
