"""Signals: recorded once per signal id, a resend answered as a duplicate (D3)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.ext.asyncio import AsyncConnection

from burrow.protocol import events
from burrow.store import schema as s
from burrow.store.history import NewEvent
from burrow.store.models import JsonDict, RunRow, RunStatus
from burrow.store.runs import record_external_event, require_running
from burrow.store.transactions import Txn


async def _signal_delivered(txn: Txn[AsyncConnection], run: RunRow, signal_id: str) -> bool:
    found = await txn.conn.scalar(
        sa.select(s.signals.c.signal_id).where(
            s.signals.c.run_id == run.run_id, s.signals.c.signal_id == signal_id
        )
    )
    return found is not None


async def signal_run(
    txn: Txn[AsyncConnection], *, run: RunRow, signal_name: str, arguments: JsonDict, signal_id: str
) -> bool:
    """Record a signal once per signal id; False when that id was already delivered.

    A resend of a delivered id is a duplicate even once the run has closed: the sender's retry
    of a signal that landed must not turn into an error because the run finished meanwhile.
    """
    if run.status != RunStatus.RUNNING and await _signal_delivered(txn, run, signal_id):
        return False
    require_running(run)
    inserted = (
        await txn.conn.execute(
            pg.insert(s.signals)
            .values(
                run_id=run.run_id, signal_id=signal_id, signal_name=signal_name, arguments=arguments
            )
            .on_conflict_do_nothing()
            .returning(s.signals.c.signal_id)
        )
    ).first()
    if inserted is None:
        return False
    received = events.SignalReceived(
        signal_id=signal_id,
        signal_name=signal_name,
        workflow_instance_id=run.workflow_id,
        workflow_run_id=run.run_id,
        arguments=arguments,
    )
    event = NewEvent(received, f"signal:{signal_id}")
    return await record_external_event(txn, run=run, event=event)
