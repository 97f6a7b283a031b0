"""The matching role's repair loop is supervised (issue 25 item 1; SPEC M4c, store invariant 5).

A pass is made to raise an error that is not a store error by renaming a column it reads;
renaming it back lets the pass succeed again.
"""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from burrow.config import Settings
from burrow.matching import LOOP_NAME, MatchingRole
from burrow.store import Store
from burrow.store import schema as s
from burrow.testing import assert_eventually
from tests.support.store import claim_wf, execute, rows, start

BREAK = "ALTER TABLE timers RENAME COLUMN fire_at TO fire_at_moved"
MEND = "ALTER TABLE timers RENAME COLUMN fire_at_moved TO fire_at"


async def test_matching_role_survives_a_pass_that_raises_and_reports_it(
    store: Store, database_url: str
) -> None:
    """Issue 25 item 1 (M4c): a pass raising a non-store error is logged with its traceback and
    the loop restarts with backoff, its state recorded; once passes succeed again a due timer
    fires, and shutdown ends the role without an error."""
    run_id = await start(store)
    task = await claim_wf(store)
    await store.complete_workflow_task(
        lease=task.lease, commands=[{"type": "start_timer", "sequence": 1, "delay_seconds": 3600}]
    )
    settings = Settings.load(
        database_url=database_url,
        wakes={"enabled": False},
        worker={"repair_interval_seconds": 0.05},
    )
    role = MatchingRole(settings, matching_id="matching-supervised")
    health = role.loops.add(LOOP_NAME)
    with capture_logs() as logs:
        await execute(store, BREAK)
        running = asyncio.create_task(role.run())

        async def restarted() -> bool:
            return health.restarts >= 2 and not running.done()

        await assert_eventually(restarted)
        assert health.failing and "fire_at" in (health.last_error or "")
        failed = [e for e in logs if e["event"] == "matching_pass_failed"]
        assert failed and all(e["exc_info"] and e["loop"] == LOOP_NAME for e in failed)

        await execute(store, MEND)
        await execute(store, "UPDATE timers SET fire_at = now() WHERE run_id = :r", r=run_id)

        async def fired() -> bool:
            [timer] = await rows(store, s.timers, run_id)
            return timer["state"] == "fired" and not health.failing

        await assert_eventually(fired)
        await role.shutdown()
        await running  # ends without raising
    assert health.last_success_at is not None
