"""An activity completion that leases its follow-up task numbers events after the latest ones.

Its one statement starts (and takes its snapshot), then waits for the run's lock. Whatever
committed meanwhile (another completion of the same run moving events into the history) is in
the locked row, not in the snapshot: the moved events must be numbered after it. Reading the
run from the snapshot numbered them over events already written (a unique violation on
history_events, and a fan-out of parallel activities stalled until its leases ran out).
"""

from __future__ import annotations

import asyncio

import asyncpg

from burrow.store import Store
from burrow.store.claims import EagerClaim
from burrow.testing import assert_eventually
from tests.support.store import ACT, LEASE, WF, blob, claim_wf, schedule, start


async def _blocked_on_a_lock(admin: asyncpg.Connection) -> None:
    async def waiting() -> object:
        return await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
        )

    await assert_eventually(waiting, timeout=10, message="the completion never waited")


async def test_a_completion_that_waited_for_the_run_lock_numbers_after_what_committed(
    store: Store, database_url: str
) -> None:
    """D1, D3: events moved by an eager completion follow the ones committed while it waited."""
    run_id = await start(store, workflow_id="race")
    first = await claim_wf(store)
    outcome = await store.complete_workflow_task(
        lease=first.lease,
        commands=[schedule(1), schedule(2)],
        eager=EagerClaim(flt=ACT, worker_id="w1", lease=LEASE, limit=2),
        position=first.position,
    )
    _, two = outcome.eager_activities
    plain = database_url.replace("postgresql+asyncpg://", "postgresql://")
    holder, admin = await asyncpg.connect(plain), await asyncpg.connect(plain)
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", run_id)
        completing = asyncio.ensure_future(
            store.complete_activity_task(
                lease=two.lease,
                result=blob(2),
                eager=EagerClaim(flt=WF, worker_id="w2", lease=LEASE),
            )
        )
        await _blocked_on_a_lock(admin)
        # What another writer commits meanwhile: an event moved into the history.
        last = await holder.fetchval("SELECT last_event_seq FROM runs WHERE run_id = $1", run_id)
        await holder.execute(
            "INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key)"
            " SELECT run_id, $2, event_type, payload, 'meanwhile' FROM history_events"
            " WHERE run_id = $1 AND sequence = 1",
            run_id,
            last + 1,
        )
        await holder.execute(
            "UPDATE runs SET last_event_seq = last_event_seq + 1 WHERE run_id = $1", run_id
        )
        await transaction.commit()
        done = await completing
        assert done.follow_up is not None
        sequences = [
            r["sequence"]
            for r in await admin.fetch(
                "SELECT sequence FROM history_events WHERE run_id = $1 ORDER BY sequence", run_id
            )
        ]
        assert sequences == list(range(1, len(sequences) + 1))
        assert sequences[-1] > last + 1  # the moved events came after the one committed
        assert (
            await admin.fetchval("SELECT last_event_seq FROM runs WHERE run_id = $1", run_id)
            == sequences[-1]
        )
    finally:
        await holder.close()
        await admin.close()
