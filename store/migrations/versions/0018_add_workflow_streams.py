"""run output streams: their lifecycle and their ordered items (SDK `*_workflow_stream`)

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "workflow_streams",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("stream_name", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False, server_default="open"),
        sa.Column("next_offset", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("delivered_offset", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("error_reason", sa.Text(), nullable=True),
        sa.Column("retention_seconds", sa.Integer(), nullable=True),
        sa.Column("opened_at", TS, nullable=False, server_default=NOW),
        sa.Column("last_appended_at", TS, nullable=True),
        sa.Column("closed_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("run_id", "stream_name", name="pk_workflow_streams"),
    )
    op.create_table(
        "workflow_stream_items",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("stream_name", sa.Text(), nullable=False),
        sa.Column("offset", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=True),
        sa.Column("payload", pg.JSONB(), nullable=True),
        sa.Column("payload_reference", sa.Text(), nullable=True),
        sa.Column("payload_codec", sa.Text(), nullable=True),
        sa.Column("item_type", sa.Text(), nullable=True),
        sa.Column("content_type", sa.Text(), nullable=True),
        sa.Column("origin", sa.Text(), nullable=False),
        sa.Column("origin_reference", sa.Text(), nullable=True),
        sa.Column("emitted_at", TS, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("run_id", "stream_name", "offset", name="pk_workflow_stream_items"),
        sa.UniqueConstraint(
            "run_id",
            "stream_name",
            "idempotency_key",
            name="uq_workflow_stream_items_run_id_stream_name_idempotency_key",
        ),
    )


def downgrade() -> None:
    op.drop_table("workflow_stream_items")
    op.drop_table("workflow_streams")
