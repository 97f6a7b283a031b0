"""What the web UI's live refresh compares to tell that something changed (issue 31).

Two index-only reads: a namespace's newest start and newest close (a new run or a closed one
changes the list), and a run's last event sequence and status (any step changes its page). The
broker's run-change wakes make the UI look at once; these make it right when a wake is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from burrow.store import schema as s
from burrow.store.facade import Facade

_r = s.runs.c


@dataclass(frozen=True, slots=True)
class ListMark:
    """A namespace's newest start and newest close."""

    newest_start: datetime | None
    newest_close: datetime | None


@dataclass(frozen=True, slots=True)
class RunMark:
    """A run's last event sequence and status."""

    last_event_seq: int
    status: str


class ChangeMarks(Facade):
    """The Store's reads for live refresh."""

    async def list_mark(self, *, namespace: str) -> ListMark:
        """The namespace's newest start and close (each one index probe)."""
        newest_start = (
            sa.select(_r.created_at)
            .where(_r.namespace == namespace)
            .order_by(_r.created_at.desc())
            .limit(1)
            .scalar_subquery()
        )
        newest_close = (
            sa.select(_r.closed_at)
            .where(_r.namespace == namespace, _r.closed_at.is_not(None))
            .order_by(_r.closed_at.desc().nulls_last())
            .limit(1)
            .scalar_subquery()
        )
        async with self.transactions.begin(commit=False) as conn:
            row = (await conn.execute(sa.select(newest_start, newest_close))).one()
        return ListMark(row[0], row[1])

    async def run_mark(self, *, run_id: str) -> RunMark | None:
        """The run's last event sequence and status; None for an unknown run."""
        query = sa.select(_r.last_event_seq, _r.status).where(_r.run_id == run_id)
        async with self.transactions.begin(commit=False) as conn:
            row = (await conn.execute(query)).one_or_none()
        return None if row is None else RunMark(int(row[0]), str(row[1]))
