"""The cleanup deadline of a cooperative cancellation (PROTOCOL.md 6.5, protocol 1.20).

A request bounds the workflow's cleanup code: `cleanup_deadline_at`. A run still open past it
is closed as cancelled by the repair pass (WorkflowCancelled, its open work cancelled), once.
"""

from __future__ import annotations

from burrow.store import Store
from burrow.store import schema as s
from tests.support.store import claim_act, rows, start_with_activity, sweep_until


async def test_a_run_past_its_cleanup_deadline_is_closed_as_cancelled(store: Store) -> None:
    """The repair pass closes the run as cancelled after its deadline (not before), asks its
    running activity to stop, and a later pass changes nothing."""
    run_id = await start_with_activity(store, "wf-cleanup")
    await claim_act(store)
    request = await store.request_cancellation(
        namespace="default", workflow_id="wf-cleanup", cleanup_seconds=1
    )
    assert (await store.sweep()).cleanups_cut_short == 0  # the cleanup still has its second
    [run] = await rows(store, s.runs, run_id)
    assert run["cleanup_deadline_at"] == request.cleanup_deadline_at

    async def closed() -> bool:
        [run] = await rows(store, s.runs, run_id)
        return bool(run["status"] == "cancelled")

    await sweep_until(store, closed)
    history = await store.read_history(run_id=run_id)
    assert history[-1].event_type == "WorkflowCancelled"
    assert "deadline" in history[-1].payload["message"]
    [activity] = await rows(store, s.activity_tasks, run_id)
    assert activity["cancel_requested"] is True
    assert (await store.sweep()).cleanups_cut_short == 0
    assert len(await store.read_history(run_id=run_id)) == len(history)
