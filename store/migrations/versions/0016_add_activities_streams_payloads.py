"""standalone activities, message streams and external payloads (PROTOCOL.md 10, 17)

A standalone activity is an activity execution anchored by a host run; a message stream's
messages are numbered per run and stream; an external payload is an uploaded blob.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "standalone_activities",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("activity_id", sa.Text(), nullable=False),
        sa.Column("activity_type", sa.Text(), nullable=False),
        sa.Column("activity_class", sa.Text(), nullable=True),
        sa.Column("business_key", sa.Text(), nullable=True),
        sa.Column("task_queue", sa.Text(), nullable=False),
        sa.Column("task_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("activity_execution_id", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.Column("settled_at", TS, nullable=True),
        sa.PrimaryKeyConstraint("run_id", name="pk_standalone_activities"),
    )
    op.create_index(
        "ix_standalone_activities_namespace_created_at",
        "standalone_activities",
        ["namespace", "created_at", "run_id"],
    )
    op.create_index(
        "ix_standalone_activities_unsettled",
        "standalone_activities",
        ["run_id"],
        postgresql_where=sa.text("settled_at IS NULL"),
    )
    op.create_table(
        "message_stream_messages",
        sa.Column("run_id", pg.UUID(as_uuid=False), nullable=False),
        sa.Column("stream_name", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.Text(), nullable=False),
        sa.Column("payload", pg.JSONB(), nullable=False),
        sa.Column("appended_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint(
            "run_id", "stream_name", "position", name="pk_message_stream_messages"
        ),
        sa.UniqueConstraint(
            "run_id",
            "stream_name",
            "message_id",
            name="uq_message_stream_messages_run_id_stream_name_message_id",
        ),
    )
    op.create_table(
        "external_payloads",
        sa.Column("reference_id", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("codec", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("reference_id", name="pk_external_payloads"),
        sa.UniqueConstraint(
            "namespace",
            "sha256",
            "size_bytes",
            "codec",
            name="uq_external_payloads_namespace_sha256_size_bytes_codec",
        ),
    )


def downgrade() -> None:
    op.drop_table("external_payloads")
    op.drop_table("message_stream_messages")
    op.drop_index("ix_standalone_activities_unsettled", table_name="standalone_activities")
    op.drop_index(
        "ix_standalone_activities_namespace_created_at", table_name="standalone_activities"
    )
    op.drop_table("standalone_activities")
