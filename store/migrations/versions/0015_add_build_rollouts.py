"""build-id rollouts: a cohort's drain intent and promotion per queue, what workers declared

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "build_rollouts",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("task_queue", sa.Text(), nullable=False),
        # '' is the unversioned cohort (workers registered without a build id).
        sa.Column("build_key", sa.Text(), nullable=False),
        sa.Column("drain_intent", sa.Text(), nullable=False, server_default="active"),
        sa.Column("drained_at", TS, nullable=True),
        # The cohort fresh starts on the queue pin to (at most one per queue).
        sa.Column("promoted_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=False, server_default=sa.text("now()")),
        sa.PrimaryKeyConstraint("namespace", "task_queue", "build_key", name="pk_build_rollouts"),
    )
    op.add_column("worker_registrations", sa.Column("sdk_version", sa.Text(), nullable=True))
    op.add_column(
        "worker_registrations", sa.Column("max_workflow_tasks", sa.Integer(), nullable=True)
    )
    op.add_column(
        "worker_registrations", sa.Column("max_activity_tasks", sa.Integer(), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("worker_registrations", "max_activity_tasks")
    op.drop_column("worker_registrations", "max_workflow_tasks")
    op.drop_column("worker_registrations", "sdk_version")
    op.drop_table("build_rollouts")
