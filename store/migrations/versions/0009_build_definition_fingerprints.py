"""build pinning: the run's workflow definition fingerprint and the ones workers register

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("workflow_definition_fingerprint", sa.Text(), nullable=True))
    op.add_column(
        "worker_registrations",
        sa.Column(
            "workflow_fingerprints", pg.JSONB(), nullable=False, server_default=sa.text("'{}'")
        ),
    )


def downgrade() -> None:
    op.drop_column("worker_registrations", "workflow_fingerprints")
    op.drop_column("runs", "workflow_definition_fingerprint")
