"""Update validators in Burrow's own API: `@workflow.update(validator=...)` runs read-only on the
worker before the update is accepted; a rejection writes nothing and raises
UpdateRejectedError (SPEC M4b; PROTOCOL.md 6.5, as the server does it for SDK workers).
"""

from __future__ import annotations

from typing import Any

import pytest

from burrow import App, Client, Worker, workflow
from burrow.errors import ApplicationError, UpdateRejectedError, WorkflowDefinitionError
from burrow.store.models import UpdateState
from burrow.workflow.definition import get_definition
from tests.acceptance.conftest import fast_settings

QUEUE = "update-validators"


def _check_item(cart: Any, item: str) -> None:
    if not item:
        raise ApplicationError("an item needs a name", type="EmptyItem")
    if item in cart.items:
        raise ValueError(f"{item} is in the cart already")


@workflow.defn
class GuardedCart:
    """Collects items through validated updates until it is checked out."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.done = False

    @workflow.update(validator=_check_item)
    def add(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @workflow.update(name="bump", validator=lambda cart, n: n > 0)
    def bump(self, n: int) -> int:
        return n

    @workflow.update
    def checkout(self) -> list[str]:
        self.done = True
        return list(self.items)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.done)
        return self.items


app = App(task_queue=QUEUE, workflows=[GuardedCart])


async def _history(client: Client, run_id: str) -> list[str]:
    return [e.event_type for e in await client.store.read_history(run_id=run_id)]


async def test_validator_approves_or_rejects_before_acceptance(database_url: str) -> None:
    """M4b, PROTOCOL 6.5: the validator sees the replayed state; its rejection (raised, or
    False returned) is UpdateRejectedError with the cause it raised, and the run's history and
    updates are unchanged; an approved update is applied as before."""
    settings = fast_settings(database_url)
    async with Worker(app, settings=settings), await Client.connect(settings=settings) as client:
        handle = await client.start_workflow(GuardedCart.run, task_queue=QUEUE)
        run_id = handle.run_id or ""
        assert await handle.update(GuardedCart.add, "apple") == 1
        before = await _history(client, run_id)
        assert "UpdateCompleted" in before
        with pytest.raises(UpdateRejectedError, match="apple is in the cart already") as caught:
            await handle.update(GuardedCart.add, "apple", update_id="again")
        assert caught.value.cause.type == "ValueError"
        with pytest.raises(UpdateRejectedError) as empty:
            await handle.update(GuardedCart.add, "")
        assert (empty.value.cause.type, empty.value.cause.message) == (
            "EmptyItem",
            "an item needs a name",
        )
        with pytest.raises(UpdateRejectedError, match="returned False"):
            await handle.update(GuardedCart.bump, 0)
        assert await _history(client, run_id) == before
        assert await client.store.get_update(run_id=run_id, update_id="again") is None
        # The rejected id is not spent: sent again with a fitting item, it is accepted.
        assert await handle.update(GuardedCart.add, "pear", update_id="again") == 2
        row = await client.store.get_update(run_id=run_id, update_id="again")
        assert row is not None and row.state == UpdateState.COMPLETED
        assert await handle.update(GuardedCart.checkout) == ["apple", "pear"]
        assert await handle.result() == ["apple", "pear"]


async def test_unvalidated_update_is_not_accepted(database_url: str) -> None:
    """PROTOCOL 6.5: a worker declares the validator but takes no validation in time: the
    update times out before it is accepted, and nothing is written."""
    settings = fast_settings(database_url)
    async with await Client.connect(settings=settings) as client:
        handle = await client.start_workflow(GuardedCart.run, task_queue=QUEUE)
        await client.store.register_worker(
            worker_id="asleep",
            namespace=settings.namespace,
            task_queue=QUEUE,
            workflow_types=["GuardedCart"],
            activity_types=[],
            concurrency=1,
            update_validators={"GuardedCart": ["add"]},
        )
        run_id = handle.run_id or ""
        before = await _history(client, run_id)
        assert before == ["WorkflowStarted"]
        with pytest.raises(TimeoutError, match="not accepted"):
            await handle.update(GuardedCart.add, "apple", update_id="u1", timeout=0.3)
        assert await _history(client, run_id) == before
        assert await client.store.get_update(run_id=run_id, update_id="u1") is None
        await client.store.deregister_worker(worker_id="asleep")
        await handle.terminate()


def test_a_validator_cannot_wait() -> None:
    """M4b: a validator is read-only and synchronous; an async one is refused at decoration."""

    async def waits(cart: Any, item: str) -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match="validators cannot wait"):
        workflow.update(validator=waits)


def test_validators_are_part_of_the_definition() -> None:
    """M4b: the definition names the updates with a validator (what the worker registers)."""
    definition = get_definition(GuardedCart)
    assert sorted(definition.validators) == ["add", "bump"]
    assert definition.validators["add"] is _check_item
