"""Retention deletes a namespace's expired runs while new runs run (issue 30, "Done when").

Real processes: two `burrow matching` processes run the repair pass that purges, a `burrow
worker` runs new parent/child workflows in `default` meanwhile. Thousands of runs closed long
ago in `old` (each with its history and its workflow task) go, each once; what is young, open,
archived or in another namespace stays, row for row, and every new run completes.
"""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from burrow import Client
from burrow.store import Store
from tests.acceptance.conftest import MatchingFactory, WorkerFactory
from tests.apps import visibility_flows

pytestmark = [pytest.mark.slow, pytest.mark.runs_no_workflow_code]

EXPIRED = 3000
NEW = 20

_SEED = """
WITH made AS (
    INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue, status, input,
                      created_at, closed_at, last_event_seq)
    SELECT gen_random_uuid(), 'old', 'old-' || i, 'tagged-child', 'q', 'completed', '[]',
           now() - interval '41 days', now() - interval '40 days', 2
    FROM generate_series(1, :n) AS i
    RETURNING run_id, namespace, workflow_type, task_queue
), events AS (
    INSERT INTO history_events (run_id, sequence, event_type, payload, idempotency_key)
    SELECT run_id, e, 'SideEffectRecorded', '{}', 'seed:' || e
    FROM made CROSS JOIN generate_series(1, 2) AS e
)
INSERT INTO workflow_tasks (task_id, run_id, workflow_type, namespace, connection, queue, state)
SELECT gen_random_uuid(), run_id, workflow_type, namespace, 'default', task_queue, 'completed'
FROM made
"""


async def _count(store: Store, sql: str) -> int:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.text(sql))).scalar_one())


async def test_expired_runs_go_while_new_runs_run(
    client: Client,
    store: Store,
    worker_process: WorkerFactory,
    matching_process: MatchingFactory,
) -> None:
    """Issue 30: the repair pass of several matching processes deletes each expired run once,
    in bounded batches, without holding up the runs being started and completed meanwhile."""
    await client.register_search_attribute("CustomerId", "keyword")
    await client.register_search_attribute("Tags", "keyword_list")
    await store.create_namespace(name="old", retention_days=7)
    async with store.engine.begin() as conn:
        await conn.execute(sa.text(_SEED), {"n": EXPIRED})
        # Kept: a young closed run, an open one and an archived old one.
        await conn.execute(
            sa.text(
                "INSERT INTO runs (run_id, namespace, workflow_id, workflow_type, task_queue,"
                " status, input, closed_at, archived_at) VALUES"
                " (gen_random_uuid(), 'old', 'young', 't', 'q', 'completed', '[]',"
                "  now() - interval '1 day', NULL),"
                " (gen_random_uuid(), 'old', 'open', 't', 'q', 'running', '[]', NULL, NULL),"
                " (gen_random_uuid(), 'old', 'archived', 't', 'q', 'completed', '[]',"
                "  now() - interval '40 days', now())"
            )
        )
    worker_process("retention-worker", f"{visibility_flows.__name__}:app")
    for n in (1, 2):
        matching_process(f"retention-matching-{n}")
    handles = [
        await client.start_workflow(
            visibility_flows.TaggedParent.run,
            id=f"new-{i}",
            task_queue=visibility_flows.TASK_QUEUE,
            check_workers=False,
        )
        for i in range(NEW)
    ]
    results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    assert all(r["memo"] == {"parent": f"new-{i}"} for i, r in enumerate(results))
    async with asyncio.timeout(60):
        while True:
            if not await _count(store, "SELECT count(*) FROM runs WHERE workflow_id LIKE 'old-%'"):
                break
            await asyncio.sleep(0.2)
    left = await _count(store, "SELECT count(*) FROM runs WHERE namespace = 'old'")
    assert left == 3  # young, open, archived
    orphans = (
        "SELECT (SELECT count(*) FROM history_events h WHERE NOT EXISTS"
        " (SELECT 1 FROM runs r WHERE r.run_id = h.run_id))"
        " + (SELECT count(*) FROM workflow_tasks t WHERE NOT EXISTS"
        " (SELECT 1 FROM runs r WHERE r.run_id = t.run_id))"
    )
    assert await _count(store, orphans) == 0
    assert await _count(store, "SELECT count(*) FROM runs WHERE namespace = 'default'") == 2 * NEW
