"""visibility indexes: every built-in list query filter, and the default order, read an index

Revision ID: 0025
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0026"
branch_labels = None
depends_on = None

_ORDER = ["created_at", "run_id"]
_PATTERN = "text_pattern_ops"


def upgrade() -> None:
    # Room on each page for a run's updates to stay HOT (no index touched): a run is updated a
    # few times while it runs, and every non-HOT update writes a tuple into each index below.
    op.execute("ALTER TABLE runs SET (fillfactor = 70)")
    # Keyword built-ins compare bytewise, so this one also serves WorkflowId STARTS_WITH.
    op.drop_index("ix_runs_namespace_workflow_id_created_at", table_name="runs")
    op.create_index(
        "ix_runs_namespace_workflow_id_created_at",
        "runs",
        ["namespace", "workflow_id", "created_at"],
        postgresql_ops={"workflow_id": _PATTERN},
    )
    op.create_index("ix_runs_namespace_created_at", "runs", ["namespace", *_ORDER])
    op.create_index("ix_runs_namespace_status", "runs", ["namespace", "status", *_ORDER])
    for column in ("workflow_type", "task_queue"):
        op.create_index(
            f"ix_runs_namespace_{column}",
            "runs",
            ["namespace", column, *_ORDER],
            postgresql_ops={column: _PATTERN},
        )
    op.create_index(
        "ix_runs_namespace_closed_at",
        "runs",
        ["namespace", sa.text("closed_at DESC NULLS LAST"), sa.text("run_id DESC")],
        postgresql_where=sa.text("closed_at IS NOT NULL"),
    )
    for column in ("build_id", "parent_workflow_id"):
        op.create_index(
            f"ix_runs_namespace_{column}",
            "runs",
            ["namespace", column],
            postgresql_ops={column: _PATTERN},
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_index(
        "ix_runs_namespace_parent_run_id",
        "runs",
        ["namespace", "parent_run_id"],
        postgresql_where=sa.text("parent_run_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.execute("ALTER TABLE runs RESET (fillfactor)")
    for name in (
        "ix_runs_namespace_parent_run_id",
        "ix_runs_namespace_parent_workflow_id",
        "ix_runs_namespace_build_id",
        "ix_runs_namespace_closed_at",
        "ix_runs_namespace_task_queue",
        "ix_runs_namespace_workflow_type",
        "ix_runs_namespace_status",
        "ix_runs_namespace_created_at",
        "ix_runs_namespace_workflow_id_created_at",
    ):
        op.drop_index(name, table_name="runs")
    op.create_index(
        "ix_runs_namespace_workflow_id_created_at",
        "runs",
        ["namespace", "workflow_id", "created_at"],
    )
