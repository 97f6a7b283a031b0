"""Namespaces as records, and the indexes retention deletes by (issue 30).

A namespace holds its description and the days a closed run is kept (`retention_days`); the
repair pass deletes closed runs older than that (store/retention.py). The indexes below let it
find the oldest closed runs of a namespace, and the task rows of a run, without a scan.
"""

from __future__ import annotations

import sqlalchemy as sa

from burrow.store.schema import NOW, TS, metadata, query_tasks, workflow_tasks

DEFAULT_RETENTION_DAYS = 30
"""The reference server's `server.history.retention_days`: kept for a namespace made without one."""

namespaces = sa.Table(
    "namespaces",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("description", sa.Text, nullable=True),
    # NULL: no window set, runs are kept (the namespaces a store held before it had records).
    sa.Column(
        "retention_days", sa.Integer, nullable=True, server_default=str(DEFAULT_RETENTION_DAYS)
    ),
    # `active`; the reference's other states (deprecated...) are not used yet.
    sa.Column("status", sa.Text, nullable=False, server_default="active"),
    sa.Column("created_at", TS, nullable=False, server_default=NOW),
    sa.Column("updated_at", TS, nullable=False, server_default=NOW),
)

# A closed task's run: an entry only once the task is done (open ones have uq_workflow_tasks_
# open_run), so the claim path's non-HOT updates never write here. The retention scan of runs
# reads ix_runs_namespace_closed_at (visibility_schema.py).
ix_workflow_tasks_closed_run_id = sa.Index(
    "ix_workflow_tasks_closed_run_id",
    workflow_tasks.c.run_id,
    postgresql_where=sa.text("state NOT IN ('ready', 'leased')"),
)
ix_query_tasks_run_id = sa.Index("ix_query_tasks_run_id", query_tasks.c.run_id)
