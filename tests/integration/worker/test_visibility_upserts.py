"""Memo and search attributes at start and upserted by workflow code (issue 30).

The values come from history (WorkflowStarted and the upsert steps), so a worker that resumes
the instance from its sticky cache and one that replays it cold see the same (S12); the store's
rows (describe, list queries) follow the same events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from burrow import Client, Worker
from burrow.errors import (
    InvalidSearchAttribute,
    NondeterminismError,
    PayloadError,
    PayloadTooLarge,
)
from burrow.protocol import events as ev
from tests.acceptance.conftest import fast_settings
from tests.apps import visibility_flows
from tests.support.history import (
    recorded_per_activation,
    replay_each_activation,
    replay_instance,
)

ATTRIBUTES = {"CustomerId": "keyword", "Stage": "keyword", "Amount": "int", "Tags": "keyword_list"}


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=fast_settings(database_url))
    for name, kind in ATTRIBUTES.items():
        await instance.register_search_attribute(name, kind)
    yield instance
    await instance.close()


async def _run(client: Client, database_url: str, *, capacity: int, workflow_id: str) -> object:
    settings = fast_settings(database_url)
    worker_settings = settings.worker.model_copy(update={"sticky_cache_capacity": capacity})
    worker = Worker(
        visibility_flows.app, settings=settings.model_copy(update={"worker": worker_settings})
    )
    async with worker:
        handle = await client.start_workflow(
            visibility_flows.TaggedOrder.run,
            id=workflow_id,
            task_queue=visibility_flows.TASK_QUEUE,
            memo={"customer": "c-17", "note": "gift"},
            search_attributes={"CustomerId": "c-17", "Tags": ["rush", "gift"]},
        )
        return await handle.result(timeout=30)


async def test_start_values_upserts_and_continue_as_new_warm_and_cold(
    client: Client, database_url: str
) -> None:
    """Issue 30: start options, workflow-code upserts as history steps, carried to the new run."""
    for capacity, workflow_id in ((100, "order-warm"), (0, "order-cold")):
        result = await _run(client, database_url, capacity=capacity, workflow_id=workflow_id)
        assert result == {
            "memo": {"customer": "c-17", "stage": "paid"},
            "search_attributes": {"CustomerId": "c-17", "Stage": "paid", "Amount": 42},
        }
        handle = client.get_handle(workflow_id)
        description = await handle.describe()
        assert description.memo == {"customer": "c-17", "stage": "paid"}
        assert description.search_attributes == {
            "Amount": 42,
            "CustomerId": "c-17",
            "Stage": "paid",
        }
        current = await handle.history()
        first = ev.parse(current[0].event_type, current[0].payload).continued_from_run_id
        assert isinstance(first, str)
        history = await client.get_handle(workflow_id, run_id=first).history()
        started = ev.parse(history[0].event_type, history[0].payload)
        assert isinstance(started, ev.WorkflowStarted)
        assert started.memo == {"customer": "c-17", "note": "gift"}
        assert started.search_attributes == {"CustomerId": "c-17", "Tags": ["rush", "gift"]}
        upserts = [h.event for h in history if h.event_type.endswith("Upserted")]
        assert [type(u).__name__ for u in upserts] == [
            "SearchAttributesUpserted",
            "MemoUpserted",
            "SearchAttributesUpserted",
        ]
        last = upserts[-1]
        assert isinstance(last, ev.SearchAttributesUpserted)
        assert last.merged == {"Amount": 42, "CustomerId": "c-17", "Stage": "paid"}
        assert last.attribute_types == {"Stage": "keyword", "Tags": "keyword_list"}
        old = await client.get_handle(workflow_id, run_id=first).describe()
        recorded = recorded_per_activation(history)
        changed = replay_instance(visibility_flows.changed_app, old.run).activate(history)
        assert isinstance(changed.failure, NondeterminismError)
        assert "search attributes upsert of ['Amount', 'Stage']" in str(changed.failure)
        for warm in (True, False):
            assert (
                replay_each_activation(visibility_flows.app, old.run, history, warm=warm)
                == recorded
            )
    found = await client.list_workflows(
        query="CustomerId = 'c-17' AND Stage = 'paid' AND Amount >= 42"
    )
    assert sorted({r.workflow_id for r in found}) == ["order-cold", "order-warm"]
    assert await client.list_workflows(query="Tags = 'rush'") == []


async def test_a_child_starts_with_its_own_memo_and_attributes(
    client: Client, database_url: str
) -> None:
    """Issue 30: `execute_child_workflow(memo=, search_attributes=)`; the child is found by them."""
    async with Worker(visibility_flows.app, settings=fast_settings(database_url)):
        handle = await client.start_workflow(
            visibility_flows.TaggedParent.run, id="parent-1", task_queue=visibility_flows.TASK_QUEUE
        )
        assert await handle.result(timeout=30) == {
            "memo": {"parent": "parent-1"},
            "search_attributes": {"CustomerId": "c-9", "Tags": ["child"]},
        }
    found = await client.list_workflows(query="Tags = 'child' AND ParentWorkflowId = 'parent-1'")
    assert [r.workflow_type for r in found] == ["tagged-child"]


@pytest.mark.parametrize(
    ("memo", "attributes", "error", "said"),
    [
        (None, {"Unknown": "x"}, InvalidSearchAttribute, "not a registered search attribute"),
        (None, {"Amount": "many"}, InvalidSearchAttribute, "cannot hold 'many'"),
        (None, {"WorkflowType": "x"}, InvalidSearchAttribute, "built-in"),
        (None, {"Tags": ["ok", 3]}, InvalidSearchAttribute, "takes a string"),
        ({"big": "x" * 300_000}, None, PayloadTooLarge, "memo is"),
        ({"when": float("nan")}, None, PayloadError, "plain JSON"),
    ],
)
async def test_bad_start_metadata_is_refused_and_writes_nothing(
    client: Client,
    memo: dict[str, object] | None,
    attributes: dict[str, object] | None,
    error: type[Exception],
    said: str,
) -> None:
    """Issue 30: typed errors, nothing written (no run of the id exists after)."""
    with pytest.raises(error, match=said):
        await client.start_workflow(
            "tagged-order",
            id="refused",
            task_queue="q",
            check_workers=False,
            memo=memo,
            search_attributes=attributes,  # type: ignore[arg-type]
        )
    assert await client.list_workflows() == []
