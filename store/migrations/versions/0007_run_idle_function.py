"""run idle function: a fresh look at a run's open work from inside a statement

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# A statement reads every table as of its start, even after waiting for a lock. A VOLATILE
# function's queries read as of their own start instead (READ COMMITTED), so a statement that
# calls this after locking the run sees what a writer committed while it waited
# (store/completion/statements.py).
RUN_IDLE = """
CREATE FUNCTION burrow_run_idle(p_run_id uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN NOT EXISTS (SELECT 1 FROM workflow_tasks
                       WHERE run_id = p_run_id AND state IN ('ready', 'leased'))
       AND NOT EXISTS (SELECT 1 FROM inbox_events
                       WHERE run_id = p_run_id AND NOT applied AND wakes_workflow);
END
$$
"""


def upgrade() -> None:
    op.execute(RUN_IDLE)


def downgrade() -> None:
    op.execute("DROP FUNCTION burrow_run_idle(uuid)")
