"""Worker registrations on a real Postgres: a worker id belongs to its namespace (issue 25)."""

from __future__ import annotations

from typing import Any

import pytest

from burrow.store import Store
from burrow.store import schema as s
from burrow.store.errors import Conflict, WorkerIdTaken
from tests.support.store import NS, QUEUE, rows


async def register(store: Store, namespace: str, queue: str = QUEUE) -> None:
    await store.register_worker(
        worker_id="w1",
        namespace=namespace,
        task_queue=queue,
        workflow_types=["Flow"],
        activity_types=[],
        concurrency=1,
    )


async def registrations(store: Store) -> list[dict[str, Any]]:
    return await rows(store, s.worker_registrations)


async def test_registering_a_worker_id_of_another_namespace_raises_and_changes_nothing(
    store: Store,
) -> None:
    """Issue 25 item 7: the registration of an id held in another namespace is refused with
    WorkerIdTaken (a Conflict), and the holder's row keeps its namespace, queue and types."""
    await register(store, NS)
    before = await registrations(store)
    with pytest.raises(WorkerIdTaken, match="w1") as refused:
        await register(store, "other", queue="elsewhere")
    assert isinstance(refused.value, Conflict)
    assert await registrations(store) == before


async def test_registering_again_in_the_same_namespace_refreshes_the_registration(
    store: Store,
) -> None:
    """Issue 25 item 7: a restarted worker re-registers its id in its own namespace as before."""
    await register(store, NS)
    await store.deregister_worker(worker_id="w1")
    await register(store, NS, queue="q2")
    [row] = await registrations(store)
    assert (row["namespace"], row["task_queue"], row["state"]) == (NS, "q2", "active")
