"""history stamps: every event's recorded_at from the database's clock, monotonic in a run

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# D3: every history insert, whatever statement makes it, is stamped here, so no path can bring a
# worker's clock or a transaction's start time. The stamp is the database's clock when the row is
# written, never before the run's previous event nor after a later one already written (one
# statement may write a run's events out of sequence order: its CTEs run in no fixed order), so
# recorded_at never decreases along a run's sequence. A VOLATILE function's queries read as of
# their own start (READ COMMITTED) and see the rows its statement wrote before (migration 0007).
STAMP = """
CREATE FUNCTION burrow_stamp_history_event() RETURNS trigger
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    before_it timestamptz;
    after_it timestamptz;
BEGIN
    SELECT recorded_at INTO before_it FROM history_events
    WHERE run_id = NEW.run_id AND sequence < NEW.sequence ORDER BY sequence DESC LIMIT 1;
    SELECT recorded_at INTO after_it FROM history_events
    WHERE run_id = NEW.run_id AND sequence > NEW.sequence ORDER BY sequence LIMIT 1;
    -- GREATEST and LEAST skip NULLs: the first event of a run is simply the clock.
    NEW.recorded_at := GREATEST(before_it, LEAST(clock_timestamp(), after_it));
    RETURN NEW;
END
$$
"""
TRIGGER = """
CREATE TRIGGER history_events_stamp BEFORE INSERT ON history_events
FOR EACH ROW EXECUTE FUNCTION burrow_stamp_history_event()
"""


def upgrade() -> None:
    op.execute(STAMP)
    op.execute(TRIGGER)


def downgrade() -> None:
    op.execute("DROP TRIGGER history_events_stamp ON history_events")
    op.execute("DROP FUNCTION burrow_stamp_history_event()")
