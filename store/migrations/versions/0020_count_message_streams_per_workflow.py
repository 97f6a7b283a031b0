"""message streams count per workflow id: positions and message ids across continue-as-new

Each message names its run's namespace and workflow id, so a stream's positions and message
ids count across the runs of the id (PROTOCOL.md 17); rows written before keep their numbers.

Revision ID: 0020
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0018"
branch_labels = None
depends_on = None

_STREAM = ["namespace", "workflow_id", "stream_name"]


def upgrade() -> None:
    op.add_column("message_stream_messages", sa.Column("namespace", sa.Text(), nullable=True))
    op.add_column("message_stream_messages", sa.Column("workflow_id", sa.Text(), nullable=True))
    # A message of a run no longer kept has no workflow id, and no reader.
    op.execute(
        "DELETE FROM message_stream_messages AS m"
        " WHERE NOT EXISTS (SELECT 1 FROM runs AS r WHERE r.run_id = m.run_id)"
    )
    op.execute(
        "UPDATE message_stream_messages AS m SET namespace = r.namespace,"
        " workflow_id = r.workflow_id FROM runs AS r WHERE r.run_id = m.run_id"
    )
    op.alter_column("message_stream_messages", "namespace", nullable=False)
    op.alter_column("message_stream_messages", "workflow_id", nullable=False)
    op.create_index(
        "ix_message_stream_messages_workflow_position",
        "message_stream_messages",
        [*_STREAM, "position"],
    )
    op.create_index(
        "ix_message_stream_messages_workflow_message_id",
        "message_stream_messages",
        [*_STREAM, "message_id"],
    )


def downgrade() -> None:
    op.drop_index(
        "ix_message_stream_messages_workflow_message_id", table_name="message_stream_messages"
    )
    op.drop_index(
        "ix_message_stream_messages_workflow_position", table_name="message_stream_messages"
    )
    op.drop_column("message_stream_messages", "workflow_id")
    op.drop_column("message_stream_messages", "namespace")
