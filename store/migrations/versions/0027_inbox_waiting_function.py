"""inbox waiting function: a fresh look at a run's waking inbox from inside a statement

Revision ID: 0027
Revises: 0024
"""

from __future__ import annotations

from alembic import op

revision = "0027"
down_revision = "0024"
branch_labels = None
depends_on = None

# As burrow_run_idle (0007): a VOLATILE function's query reads as of its own start, so a
# completion that calls it once it holds the run sees every event a writer committed while it
# waited, whatever the writer's own snapshot let it see of the task (store/completion).
INBOX_WAITING = """
CREATE FUNCTION burrow_inbox_waiting(p_run_id uuid) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM inbox_events
                   WHERE run_id = p_run_id AND NOT applied AND wakes_workflow);
END
$$
"""


def upgrade() -> None:
    op.execute(INBOX_WAITING)


def downgrade() -> None:
    op.execute("DROP FUNCTION burrow_inbox_waiting(uuid)")
