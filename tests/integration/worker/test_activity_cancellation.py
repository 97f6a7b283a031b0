"""Activity cancellation policies of Burrow workflow code, with a real worker (PROTOCOL.md 7).

`workflow.activity(..., cancellation_policy=...)`: when the code awaiting a queued activity is
cancelled, `try_cancel` asks the activity to stop and lets the code go on at once,
`wait_cancellation_completed` asks and lets it go on once the activity has ended, `abandon`
leaves the activity running. The request is recorded once (`ActivityCancelRequested`) and the
activity's own end (`ActivityCancelled`, or its result) follows as history.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from burrow import Client, Worker
from burrow.errors import WorkflowFailureError
from burrow.store import Store
from burrow.testing import assert_eventually
from tests.acceptance.conftest import fast_settings
from tests.apps import cancel_flows
from tests.apps.cancel_flows import ENDINGS, STARTED, CancelledWait, HeldRun


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


async def _run(client: Client, policy: str) -> tuple[str, list[str]]:
    order = f"{policy}-{uuid.uuid4().hex[:6]}"
    handle = await client.start_workflow(
        CancelledWait, order, policy, id=order, task_queue=cancel_flows.TASK_QUEUE
    )
    assert await handle.result(timeout=30) == order
    return order, [e.event_type for e in await handle.history()]


async def test_each_policy_treats_the_activity_as_it_says(
    database_url: str, client: Client
) -> None:
    """try_cancel: the code goes on (its `note` is scheduled with the request) and the activity
    is stopped through its heartbeat; wait_cancellation_completed: the code goes on only after
    ActivityCancelled; abandon: no request, the activity finishes and its result is recorded."""
    async with Worker(cancel_flows.app, settings=fast_settings(database_url)):
        (tried, tried_types), (waited, waited_types), (left, left_types) = await asyncio.gather(
            _run(client, "try_cancel"),
            _run(client, "wait_cancellation_completed"),
            _run(client, "abandon"),
        )

        async def ended() -> bool:
            return {tried, waited, left} <= ENDINGS.keys()

        await assert_eventually(ended, message="every hold attempt ended")
    assert (ENDINGS[tried], ENDINGS[waited], ENDINGS[left]) == ("stopped", "stopped", "finished")

    def after(types: list[str], first: str, then: str) -> bool:
        return types.index(first) < types.index(then)

    assert tried_types.count("ActivityCancelRequested") == 1
    note_scheduled = [i for i, t in enumerate(tried_types) if t == "ActivityScheduled"][1]
    assert tried_types.index("ActivityCancelRequested") < note_scheduled
    assert "ActivityCancelled" in tried_types
    assert tried_types.index("ActivityCancelled") > note_scheduled
    assert waited_types.count("ActivityCancelRequested") == 1
    note_scheduled = [i for i, t in enumerate(waited_types) if t == "ActivityScheduled"][1]
    assert after(waited_types, "ActivityCancelRequested", "ActivityCancelled")
    assert waited_types.index("ActivityCancelled") < note_scheduled
    assert "ActivityCancelRequested" not in left_types
    assert left_types.count("ActivityCompleted") == 2  # the abandoned `hold`, then `note`


async def test_a_run_cancelled_while_it_waits_closes_after_the_activity_ends(
    database_url: str, client: Client
) -> None:
    """wait_cancellation_completed and the run's cancellation (W8): the code sees the
    cancellation, the activity is stopped through its heartbeat, and the run closes as cancelled
    only once ActivityCancelled is recorded, whichever of the two the code saw first."""
    order = f"held-{uuid.uuid4().hex[:6]}"
    async with Worker(cancel_flows.app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            HeldRun,
            order,
            "wait_cancellation_completed",
            id=order,
            task_queue=cancel_flows.TASK_QUEUE,
        )

        async def holding() -> bool:
            return order in STARTED

        await assert_eventually(holding, message="the hold attempt started")
        await handle.cancel(reason="customer left")
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result(timeout=30)
        assert caught.value.status == "cancelled"
    types = [e.event_type for e in await handle.history()]
    assert ENDINGS[order] == "stopped"
    assert types.index("CancelRequested") < types.index("ActivityCancelled")
    assert types[-2:] == ["ActivityCancelled", "WorkflowCancelled"]
    # The run's cancellation already asked the attempt (W8): when its end is in the same
    # activation as the request, the code finds the activity ended and asks nothing more.
    if "ActivityCancelRequested" in types:
        assert types.index("CancelRequested") < types.index("ActivityCancelRequested")


async def test_a_cooperative_request_cancels_burrow_code_like_a_cancel(
    database_url: str, client: Client, store: Store
) -> None:
    """PROTOCOL 6.5 mapped onto Burrow code: a `request-cancellation` (recorded as
    CooperativeCancellationRequested, once) reaches the code as asyncio cancellation; under
    `try_cancel` the activity is asked to stop and the run closes as cancelled."""
    order = f"coop-{uuid.uuid4().hex[:6]}"
    async with Worker(cancel_flows.app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            HeldRun, order, "try_cancel", id=order, task_queue=cancel_flows.TASK_QUEUE
        )

        async def holding() -> bool:
            return order in STARTED

        await assert_eventually(holding, message="the hold attempt started")
        first = await store.request_cancellation(
            namespace="default", workflow_id=order, reason="customer left", cleanup_seconds=30
        )
        again = await store.request_cancellation(namespace="default", workflow_id=order)
        assert (first.duplicate, again.duplicate) == (False, True)
        assert again.request_id == first.request_id
        with pytest.raises(WorkflowFailureError) as caught:
            await handle.result(timeout=30)
        assert caught.value.status == "cancelled"

        async def stopped() -> bool:
            return ENDINGS.get(order) == "stopped"

        await assert_eventually(stopped, message="the hold attempt was stopped")
    types = [e.event_type for e in await handle.history()]
    assert types.count("CooperativeCancellationRequested") == 1
    assert types.index("CooperativeCancellationRequested") < types.index("ActivityCancelRequested")
    assert types[-1] == "WorkflowCancelled"
