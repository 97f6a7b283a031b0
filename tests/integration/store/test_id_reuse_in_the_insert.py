"""Issue 33 item 2: one id-reuse rule for every start, applied by the statement that inserts.

`IdReusePolicy` decides what the runs a workflow id already has do to a start. The check is made
by the INSERT itself, so concurrent starts of one id on separate stores (separate connections,
separate statements) create at most one run between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.errors import WorkflowAlreadyStartedError
from burrow.store.models import IdReusePolicy, RunInfo, RunStatus
from tests.support.store import NS, QUEUE, RUN_TABLES, blob, rows

ROUNDS = 5


async def _start(
    store: Store, workflow_id: str, policy: IdReusePolicy = IdReusePolicy.ALLOW_DUPLICATE
) -> RunInfo:
    return await store.start_workflow(
        namespace=NS,
        workflow_id=workflow_id,
        workflow_type="Flow",
        task_queue=QUEUE,
        input=blob(),
        id_reuse_policy=policy,
    )


async def _closed(store: Store, workflow_id: str) -> RunInfo:
    run = await _start(store, workflow_id)
    await store.terminate_workflow(namespace=NS, workflow_id=workflow_id, reason="done")
    return run


async def _every_row(store: Store) -> dict[str, list[dict[str, object]]]:
    return {table.name: await rows(store, table) for table in RUN_TABLES}


async def _runs_of(store: Store, workflow_id: str) -> list[dict[str, object]]:
    return [r for r in await rows(store, s.runs) if r["workflow_id"] == workflow_id]


@pytest.fixture
async def other_store(database_url: str) -> AsyncIterator[Store]:
    """A second store on the test database: its own pool, so its starts race the first's."""
    instance = Store.connect(database_url, pool_size=2)
    yield instance
    await instance.close()


async def test_allow_duplicate_starts_a_new_run_only_once_the_last_is_closed(store: Store) -> None:
    """Issue 33 item 2: the native default refuses a running id, not a closed one."""
    first = await _start(store, "allow-1")
    with pytest.raises(WorkflowAlreadyStartedError, match="already running") as refused:
        await _start(store, "allow-1")
    assert (refused.value.run_id, refused.value.status) == (first.run_id, "running")

    await store.terminate_workflow(namespace=NS, workflow_id="allow-1", reason="done")
    second = await _start(store, "allow-1")

    assert second.run_id != first.run_id and second.status == RunStatus.RUNNING
    assert len(await _runs_of(store, "allow-1")) == 2


async def test_reject_duplicate_refuses_an_id_with_a_closed_run_and_writes_nothing(
    store: Store,
) -> None:
    """Issue 33 item 2: reject-duplicate (HTTP `fail`) refuses any run of the id, naming it."""
    closed = await _closed(store, "reject-1")
    before = await _every_row(store)

    with pytest.raises(WorkflowAlreadyStartedError, match="terminated run") as refused:
        await _start(store, "reject-1", IdReusePolicy.REJECT_DUPLICATE)

    assert (refused.value.run_id, refused.value.status) == (closed.run_id, "terminated")
    assert await _every_row(store) == before
    fresh = await _start(store, "reject-2", IdReusePolicy.REJECT_DUPLICATE)
    assert fresh.workflow_id == "reject-2"


async def test_use_existing_returns_the_running_run_and_refuses_a_closed_one(
    store: Store,
) -> None:
    """Issue 33 item 2: use-existing gives back the running run; a closed id is refused."""
    running = await _start(store, "use-1")
    again = await _start(store, "use-1", IdReusePolicy.USE_EXISTING)
    assert again.run_id == running.run_id

    await store.terminate_workflow(namespace=NS, workflow_id="use-1", reason="done")
    with pytest.raises(WorkflowAlreadyStartedError) as refused:
        await _start(store, "use-1", IdReusePolicy.USE_EXISTING)

    assert refused.value.status == "terminated"
    assert len(await _runs_of(store, "use-1")) == 1


async def test_use_existing_twice_in_one_batch_returns_the_one_run(store: Store) -> None:
    """Issue 33 item 2: the start its batch refused reads the run its sibling created."""
    both = await asyncio.gather(
        _start(store, "use-batch", IdReusePolicy.USE_EXISTING),
        _start(store, "use-batch", IdReusePolicy.USE_EXISTING),
    )

    assert both[0].run_id == both[1].run_id
    assert len(await _runs_of(store, "use-batch")) == 1


async def test_use_existing_joins_the_run_a_batched_start_makes_beside_a_closed_one(
    store: Store,
) -> None:
    """Issue 33 item 2: the statement saw only the closed run; the running one is returned."""
    await _closed(store, "use-beside")
    started, joined = await asyncio.gather(
        _start(store, "use-beside", IdReusePolicy.ALLOW_DUPLICATE),
        _start(store, "use-beside", IdReusePolicy.USE_EXISTING),
    )

    assert joined.run_id == started.run_id and joined.status == RunStatus.RUNNING
    assert len(await _runs_of(store, "use-beside")) == 2


@pytest.mark.parametrize("policy", list(IdReusePolicy))
@pytest.mark.parametrize("history", ["fresh", "closed"])
async def test_concurrent_starts_of_one_id_on_two_stores_create_at_most_one_run(
    store: Store, other_store: Store, policy: IdReusePolicy, history: str
) -> None:
    """Issue 33 item 2: the inserting statement decides, so exactly one start wins."""
    for i in range(ROUNDS):
        workflow_id = f"race-{history}-{i}"
        closed = await _closed(store, workflow_id) if history == "closed" else None
        outcomes = await asyncio.gather(
            _start(store, workflow_id, policy),
            _start(other_store, workflow_id, policy),
            return_exceptions=True,
        )

        started = [o for o in outcomes if isinstance(o, RunInfo)]
        refused = [o for o in outcomes if isinstance(o, WorkflowAlreadyStartedError)]
        assert len(started) + len(refused) == 2, outcomes
        running = [r for r in await _runs_of(store, workflow_id) if r["status"] == "running"]
        if closed is not None and policy is not IdReusePolicy.ALLOW_DUPLICATE:
            assert (started, running) == ([], [])  # a closed run refuses both
            assert {e.run_id for e in refused} == {closed.run_id}
        elif policy is IdReusePolicy.USE_EXISTING:
            assert len(started) == 2 and started[0].run_id == started[1].run_id
            assert [r["run_id"] for r in running] == [started[0].run_id]
        else:
            assert len(started) == 1 and len(refused) == 1
            assert [r["run_id"] for r in running] == [started[0].run_id]
