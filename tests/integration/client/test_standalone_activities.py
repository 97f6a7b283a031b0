"""`Client.start_activity`: a standalone activity through Burrow's own client and worker.

PROTOCOL.md 17 (standalone activities), natively: an `@activity.defn` function run without a
workflow by an ordinary Burrow worker of its queue, its result typed as the function's.
"""

from __future__ import annotations

import pytest

from burrow import App, Client, RetryPolicy, Worker, activity
from burrow.errors import (
    ApplicationError,
    InvalidArgumentsError,
    WorkflowAlreadyStartedError,
    WorkflowCancelledError,
    WorkflowFailureError,
)
from burrow.store.models import RunStatus
from tests.acceptance.conftest import fast_settings

QUEUE = "standalone-activities"


@activity.defn
async def invoice(order_id: str, cents: int) -> str:
    return f"{order_id}:{cents}"


@activity.defn
def refuse(order_id: str) -> str:
    raise ValueError(f"no invoice for {order_id}")


app = App(task_queue=QUEUE, activities=[invoice, refuse])


async def test_a_started_activity_runs_on_a_worker_and_its_result_is_typed(
    database_url: str,
) -> None:
    """PROTOCOL.md 17 `start_activity`: a Burrow worker runs it; `result()` returns the
    function's result, a final failure raises with the activity's error as cause; a used id is
    refused and bad input is refused before anything is written."""
    settings = fast_settings(database_url)
    async with await Client.connect(settings=settings) as client, Worker(app, settings=settings):
        handle = await client.start_activity(invoice, "order-1", 250, task_queue=QUEUE, id="inv-1")
        assert await handle.result(timeout=10) == "order-1:250"
        described = await handle.describe()
        assert (described.status, described.activity_status) == ("completed", "completed")
        assert described.activity_type == "invoice"

        failing = await client.start_activity(
            refuse, "order-2", task_queue=QUEUE, retry_policy=RetryPolicy(max_attempts=1)
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await failing.result(timeout=10)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError)
        assert (cause.type, str(cause)) == ("ValueError", "no invoice for order-2")

        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_activity(invoice, "order-1", 250, task_queue=QUEUE, id="inv-1")
        with pytest.raises(InvalidArgumentsError):
            await client.start_activity(invoice, "order-3", task_queue="nobody-serves")  # type: ignore[call-overload]
        listed = await client.list_activities()
        assert sorted(a.activity_type for a in listed) == ["invoice", "refuse"]
        [done] = await client.list_activities(status=RunStatus.COMPLETED)
        assert done.activity_id == "inv-1"


async def test_cancelling_an_activity_nobody_claimed_closes_it(database_url: str) -> None:
    """PROTOCOL.md 17 (handle `cancel`): an activity not yet claimed is closed as cancelled and
    its attempt never runs."""
    async with await Client.connect(settings=fast_settings(database_url)) as client:
        handle = await client.start_activity(invoice, "order-9", 1, task_queue="nobody-serves")
        await handle.cancel(reason="not needed")
        with pytest.raises(WorkflowCancelledError):
            await handle.result(timeout=5)
        described = await client.get_activity_handle(handle.activity_id).describe()
        assert (described.status, described.activity_status) == ("cancelled", "cancelled")
