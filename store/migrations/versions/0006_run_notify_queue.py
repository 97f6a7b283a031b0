"""run notify queue: where the client that started a run hears of its close

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("notify_queue", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "notify_queue")
