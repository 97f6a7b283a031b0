"""History retention in the store (issue 30, "Namespaces and retention"): the repair pass deletes
exactly the closed runs older than their namespace's window, with every row that belongs to them,
and concurrent passes delete each run once."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from burrow.store import Store, retention
from burrow.store import schema as s
from burrow.store.claims import QueueFilter
from tests.support.store import LEASE, QUEUE, blob, execute, rows, start

COMPLETE = {"type": "complete_workflow", "result": blob(9)}


async def closed_run(store: Store, namespace: str, workflow_id: str) -> str:
    """A run that got a signal, then completed: rows in runs, history, inbox, signals, tasks."""
    run_id = await start(store, workflow_id, namespace=namespace)
    await store.signal_workflow(
        namespace=namespace,
        workflow_id=workflow_id,
        signal_name="poke",
        arguments=blob(2),
        signal_id=f"sig-{workflow_id}",
    )
    flt = QueueFilter(namespace=namespace, queue=QUEUE, types=["Flow"])
    task = await store.claim_workflow_task(flt=flt, worker_id="w1", lease=LEASE)
    assert task is not None
    await store.complete_workflow_task(lease=task.lease, commands=[COMPLETE])
    async with store.engine.begin() as conn:
        await conn.execute(
            s.run_search_attributes.insert().values(
                run_id=run_id, namespace=namespace, name="CustomerId", keyword_value="c-17"
            )
        )
        await conn.execute(
            s.run_memos.insert().values(run_id=run_id, namespace=namespace, memo={"note": "x"})
        )
    return run_id


async def age(store: Store, run_id: str, days: float) -> None:
    """Backdate the run's close (and start) by `days`."""
    await execute(
        store,
        "UPDATE runs SET closed_at = now() - make_interval(secs => :secs),"
        " created_at = now() - make_interval(secs => :secs) WHERE run_id = :run_id",
        secs=days * 86400,
        run_id=run_id,
    )


async def owned_rows(store: Store, run_id: str) -> dict[str, int]:
    """How many rows each run-keyed table holds for the run (runs included)."""
    counts = {}
    async with store.engine.connect() as conn:
        for name, table, column in (*retention.RUN_TABLES, ("runs", s.runs, s.runs.c.run_id)):
            counts[name] = int(
                await conn.scalar(
                    sa.select(sa.func.count()).select_from(table).where(column == run_id)
                )
                or 0
            )
    return counts


async def test_the_repair_pass_deletes_exactly_the_expired_closed_runs(store: Store) -> None:
    """Issue 30: in a namespace kept 7 days, a run closed 8 days ago goes with every row of it;
    a run closed 6 days ago, a running run started long ago, an archived old run and an old run
    of a namespace kept 30 days all stay, row for row."""
    await store.create_namespace(name="short", retention_days=7)
    await store.create_namespace(name="long", retention_days=30)
    expired = await closed_run(store, "short", "old")
    young = await closed_run(store, "short", "young")
    archived = await closed_run(store, "short", "kept")
    other = await closed_run(store, "long", "old")
    running = await start(store, "open", namespace="short")
    for run_id in (expired, archived, other, running):
        await age(store, run_id, 8)
    await age(store, young, 6)
    await execute(store, "UPDATE runs SET archived_at = now() WHERE run_id = :r", r=archived)
    before = await owned_rows(store, expired)
    assert {n for n, c in before.items() if c} >= {
        "runs",
        "history_events",
        "inbox_events",
        "signals",
        "workflow_tasks",
        "run_search_attributes",
        "run_memos",
    }
    kept = {r: await rows(store, s.runs, r) for r in (young, archived, other, running)}
    kept_events = {r: await rows(store, s.history_events, r) for r in kept}

    status = await store.retention_status(namespace="short")
    assert (status.retention_days, status.expired_run_ids) == (7, [expired])
    result = await store.sweep()

    assert not result.skipped
    assert set((await owned_rows(store, expired)).values()) == {0}
    for run_id, run_rows in kept.items():
        assert await rows(store, s.runs, run_id) == run_rows
        assert await rows(store, s.history_events, run_id) == kept_events[run_id]
    assert (await store.retention_status(namespace="short")).expired_run_ids == []


async def test_a_shorter_window_expires_runs_on_the_next_pass(store: Store) -> None:
    """Issue 30: an update of the window applies to runs already closed."""
    await store.create_namespace(name="team", retention_days=30)
    run_id = await closed_run(store, "team", "wf")
    await age(store, run_id, 3)
    assert await store.purge_expired_runs() == 0
    await store.update_namespace(name="team", retention_days=2)
    assert await store.purge_expired_runs() == 1
    assert await rows(store, s.runs, run_id) == []


async def test_concurrent_passes_delete_each_run_once(database_url: str, store: Store) -> None:
    """Issue 30: two passes on two connections at once delete 30 expired runs between them,
    each once (a run counted by both would make the sum exceed 30)."""
    await store.create_namespace(name="busy", retention_days=1)
    ids = [await start(store, f"wf-{i}", namespace="busy") for i in range(30)]
    await execute(
        store,
        "UPDATE runs SET status = 'completed', closed_at = now() - interval '2 days'"
        " WHERE namespace = 'busy'",
    )
    other = Store.connect(database_url, pool_size=2)
    try:
        counts = await asyncio.gather(
            store.purge_expired_runs(batch=20), other.purge_expired_runs(batch=20)
        )
    finally:
        await other.close()
    assert sum(counts) == 30 and max(counts) <= 20
    async with store.engine.connect() as conn:
        left = await conn.scalar(
            sa.select(sa.func.count()).select_from(s.runs).where(s.runs.c.run_id.in_(ids))
        )
    assert left == 0


async def test_the_operator_pass_reports_each_named_run(store: Store) -> None:
    """Issue 30, reference HistoryRetentionTest: named runs are pruned only when expired; the
    others are skipped with their reason and kept."""
    await store.create_namespace(name="ops", retention_days=1)
    old = await closed_run(store, "ops", "old")
    young = await closed_run(store, "ops", "young")
    running = await start(store, "open", namespace="ops")
    await age(store, old, 2)
    foreign = await closed_run(store, "default", "elsewhere")
    await age(store, foreign, 400)
    outcomes = await store.retention_pass(
        namespace="ops", run_ids=[old, young, running, foreign, "nope"]
    )
    found: dict[str, Any] = {o.run_id: (o.outcome, o.reason) for o in outcomes}
    assert found == {
        old: ("pruned", None),
        young: ("skipped", "run_not_expired"),
        running: ("skipped", "run_not_terminal"),
        foreign: ("skipped", "run_not_found"),
        "nope": ("skipped", "run_not_found"),
    }
    [pruned] = [o for o in outcomes if o.outcome == "pruned"]
    assert pruned.deleted["runs"] == 1 and pruned.deleted["history_events"] >= 2
    assert await rows(store, s.runs, old) == []
    assert len(await rows(store, s.runs, foreign)) == 1


async def test_a_namespace_with_no_window_keeps_its_runs(store: Store) -> None:
    """Issue 30: an upgraded store's namespaces have no window (migration 0024) until one is
    set: the repair pass deletes none of their runs, however old; then the window applies."""
    await execute(store, "INSERT INTO namespaces (name, retention_days) VALUES ('kept', NULL)")
    run_id = await closed_run(store, "kept", "ancient")
    await age(store, run_id, 3650)
    assert await store.purge_expired_runs() == 0
    status = await store.retention_status(namespace="kept")
    assert (status.retention_days, status.cutoff, status.expired_run_ids) == (None, None, [])
    await store.update_namespace(name="kept", retention_days=30)
    assert await store.purge_expired_runs() == 1
