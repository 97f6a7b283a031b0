"""describe() shows a run's sticky binding (S4) and its latest workflow task's replay mode (S7)."""

from __future__ import annotations

from burrow.store import Store
from tests.support.store import NS, blob, db_now, execute, start


async def test_s4_an_unbound_run_describes_no_binding(store: Store) -> None:
    await start(store)

    described = await store.describe_workflow(namespace=NS, workflow_id="wf-1")

    assert described.sticky_worker_id is None and described.sticky_until is None
    assert described.sticky_replay_mode is None and described.sticky_claimed_at is None


async def test_s4_s7_describe_shows_the_binding_and_the_latest_task_claim(store: Store) -> None:
    run_id = await start(store)
    await execute(
        store,
        "UPDATE runs SET sticky_worker_id = 'w-1', sticky_until = now() + interval '5 minutes'"
        " WHERE run_id = :run_id",
        run_id=run_id,
    )
    # The first workflow task was claimed and is done; a signal opens the next one.
    await execute(
        store,
        "UPDATE workflow_tasks SET state = 'completed', sticky_replay_mode = 'cold_replay',"
        " sticky_claimed_at = now() - interval '10 seconds' WHERE run_id = :run_id",
        run_id=run_id,
    )
    now = await db_now(store)

    closed = await store.describe_workflow(namespace=NS, workflow_id="wf-1")

    assert closed.workflow_task is None
    assert closed.sticky_worker_id == "w-1"
    assert closed.sticky_until is not None and closed.sticky_until > now
    assert closed.sticky_replay_mode == "cold_replay"
    assert closed.sticky_claimed_at is not None and closed.sticky_claimed_at < now

    await store.signal_workflow(
        namespace=NS, workflow_id="wf-1", signal_name="go", arguments=blob(), signal_id="s-1"
    )
    waiting = await store.describe_workflow(namespace=NS, workflow_id="wf-1")

    assert waiting.workflow_task is not None
    assert waiting.sticky_replay_mode is None and waiting.sticky_claimed_at is None

    await execute(
        store,
        "UPDATE workflow_tasks SET state = 'leased', sticky_replay_mode = 'sticky_hit_expected',"
        " sticky_claimed_at = now() WHERE run_id = :run_id AND state = 'ready'",
        run_id=run_id,
    )
    leased = await store.describe_workflow(namespace=NS, workflow_id="wf-1")

    assert leased.sticky_replay_mode == "sticky_hit_expected"
    assert leased.sticky_claimed_at is not None and leased.sticky_claimed_at >= now
    assert leased.sticky_worker_id == "w-1"
