"""Signals, queries, updates, cancellation and termination through the client (A1, W8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from burrow import Client, QueryFailedError, UpdateFailedError, Worker, WorkflowFailureError
from burrow.store import errors as store_errors
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import flows

pytestmark = pytest.mark.slow


async def test_updates_queries_and_signals_drive_a_run(
    client: Client, database_url: str, tmp_path: Path
) -> None:
    async with Worker(flows.extras, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            flows.CartFlow, str(tmp_path / "n"), id="cart-1", task_queue="test-extras"
        )
        assert await handle.update("add_item", "apple") == 1
        assert await handle.update("add_item", "pear", update_id="u-2") == 2
        assert (
            await handle.update("add_item", "pear", update_id="u-2") == 2
        )  # same id: applied once
        with pytest.raises(UpdateFailedError, match="empty item"):
            await handle.update("add_item", "")
        assert await handle.query("contents") == ["apple", "pear"]
        with pytest.raises(QueryFailedError, match="unknown query"):
            await handle.query("nope")
        await handle.signal("checkout")
        assert await handle.result(timeout=30) == ["apple", "pear"]
    history = [e.event_type for e in await handle.history()]
    assert history.count("UpdateAccepted") == 3 and history.count("UpdateCompleted") == 3


async def test_cancellation_reaches_workflow_code_which_cleans_up(
    client: Client, database_url: str, tmp_path: Path
) -> None:
    notes = tmp_path / "cleanup.txt"
    async with Worker(flows.extras, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            flows.CartFlow, str(notes), id="cart-2", task_queue="test-extras"
        )
        await handle.update("add_item", "apple")
        await handle.cancel(reason="customer left")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result(timeout=30)
    assert caught.value.status == "cancelled"
    assert notes.read_text().count("done") == 1, "the cleanup activity ran"
    types = [e.event_type for e in await handle.history()]
    assert "CancelRequested" in types and types[-1] == "WorkflowCancelled"


async def test_cancellation_reaches_a_heartbeating_activity(
    client: Client, database_url: str, tmp_path: Path
) -> None:
    """W8: the heartbeat response carries cancel_requested; the activity stops."""
    notes = tmp_path / "beats.txt"
    async with Worker(flows.extras, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            flows.HeartbeatFlow, str(notes), id="hb-1", task_queue="test-extras"
        )

        async def beating() -> bool:
            return notes.exists() and notes.read_text().count("beat") >= 3

        await assert_eventually(beating, message="activity heartbeating")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result(timeout=30)

        async def activity_closed() -> bool:
            return not (await handle.describe()).activities

        await assert_eventually(activity_closed, message="activity attempt closed")
    beats = notes.read_text().count("beat")
    assert beats < 600


@pytest.mark.runs_no_workflow_code
async def test_terminate_closes_the_run_without_running_code(client: Client) -> None:
    handle = await client.start_workflow(flows.CartFlow, "x", id="cart-3", task_queue="test-extras")
    await handle.terminate(reason="operator")
    with pytest.raises(WorkflowFailureError, match="terminated"):
        await handle.result(timeout=5)
    with pytest.raises(store_errors.RunNotRunning):
        await handle.signal("checkout")
    description = await handle.describe()
    assert description.workflow_task is None
    assert [e.event_type for e in await handle.history()] == [
        "WorkflowStarted",
        "WorkflowTerminated",
    ]
