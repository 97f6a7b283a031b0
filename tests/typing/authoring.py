"""Sample workflows, activities and client calls that `mypy --strict` must accept.

`assert_type` pins what the typed API infers: results come from the signatures of the
activity, run, query and update methods, not `Any`.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_type

from burrow import (
    ActivityError,
    ActivityHandle,
    App,
    ApplicationError,
    Client,
    QueryFailedError,
    RetryPolicy,
    UpdateFailedError,
    Worker,
    WorkflowAlreadyStartedError,
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowHandle,
    activity,
    workflow,
)


@dataclass
class Receipt:
    order_id: str
    cents: int


@activity.defn
async def charge(order_id: str, cents: int) -> Receipt:
    return Receipt(order_id, cents)


@activity.defn
def add(a: int, b: int) -> int:
    return a + b


@activity.defn
async def ping() -> None:
    activity.context().heartbeat()


@workflow.defn(name="shipping")
class Shipping:
    @workflow.signal
    def hurry(self, how: str) -> None:
        pass

    @workflow.run
    async def run(self, order_id: str, parcels: int) -> bool:
        return parcels > 0


@workflow.defn
class Checkout:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.signal
    async def note(self, text: str) -> None:
        self.items.append(text)

    @workflow.query
    def count(self) -> int:
        return len(self.items)

    @workflow.query
    def item(self, index: int) -> str:
        return self.items[index]

    @workflow.update
    async def add_item(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @workflow.update
    def clear(self) -> None:
        self.items.clear()

    def _check_rename(self, old: str, new: str) -> None:
        if old not in self.items:
            raise ValueError(f"no {old} to rename")

    @workflow.update(validator=_check_rename)
    def rename(self, old: str, new: str) -> int:
        self.items[self.items.index(old)] = new
        return len(self.items)

    @workflow.run
    async def run(self, order_id: str) -> Receipt:
        receipt = await workflow.activity(
            charge,
            order_id,
            4200,
            start_to_close_timeout=10,
            retry_policy=RetryPolicy(max_attempts=5),
        )
        assert_type(receipt, Receipt)
        total = await workflow.activity(add, 2, 3, start_to_close_timeout=timedelta(seconds=5))
        assert_type(total, int)
        await workflow.activity(ping, heartbeat_timeout=2, queue="pings")
        by_name = await workflow.activity("charge", order_id, 1, start_to_close_timeout=10)
        assert_type(by_name, Any)
        info = workflow.info()  # Temporal's info().parent and attempt, from WorkflowStarted
        assert_type(info.parent, workflow.ParentInfo | None)
        assert_type(info.attempt, int)
        assert_type(info.run_timeout, timedelta | None)
        if info.parent is not None:
            assert_type(info.parent.run_id, str)
        # A3: a local activity is typed from its function like a queued one.
        local = await workflow.local_activity(
            charge,
            order_id,
            4200,
            options=workflow.LocalActivityOptions(
                max_attempts=3, start_to_close_timeout=timedelta(seconds=5)
            ),
        )
        assert_type(local, Receipt)
        assert_type(await workflow.local_activity(add, 1, 2), int)
        assert_type(await workflow.local_activity("charge", order_id, 1), Any)
        try:
            await workflow.activity(charge, "declined", 1, start_to_close_timeout=10)
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError):
                workflow.logger.info("charge_declined", type=cause.type, details=cause.details)
        assert_type(workflow.uuid4(), uuid.UUID)
        assert_type(workflow.random(), random.Random)
        token = await workflow.side_effect(lambda: uuid.uuid4().hex)
        assert_type(token, str)
        assert_type(workflow.get_version("change", 1, 2), int)
        # Issue 28: a child's result is typed from its run method, names give Any.
        shipped = await workflow.execute_child_workflow(
            Shipping.run, order_id, 2, parent_close_policy=workflow.ParentClosePolicy.ABANDON
        )
        assert_type(shipped, bool)
        child = await workflow.start_child_workflow(
            Shipping.run, order_id, 1, task_queue="ship", execution_timeout=timedelta(hours=1)
        )
        assert_type(child, workflow.ChildWorkflowHandle[bool])
        await child.signal(Shipping.hurry, "now")
        assert_type(await child, bool)
        assert_type(await workflow.execute_child_workflow("shipping", order_id), Any)
        await workflow.sleep(1)
        await workflow.wait_condition(lambda: self.approved, timeout=60)
        await asyncio.gather(workflow.sleep(1), workflow.sleep(2))
        # W4: several steps on the one worker holding a session.
        gpu = workflow.worker_session(
            "gpu-render",
            workflow.WorkerSessionOptions(
                queue="gpu-activities", requirements=["gpu:nvidia-l4"], lease_seconds=120
            ),
        )
        assert_type(gpu, workflow.WorkerSession)
        in_session = await gpu.activity(charge, order_id, 1, start_to_close_timeout=10)
        assert_type(in_session, Receipt)
        assert_type(await gpu.activity(add, 1, 2, queue="gpu-other"), int)
        assert_type(await gpu.activity("charge", order_id, 1), Any)
        if not receipt.cents:
            workflow.continue_as_new(order_id)
        return receipt


app = App(task_queue="shop", workflows=[Checkout], activities=[charge, add, ping])


async def client_calls(client: Client) -> None:
    handle = await client.start_workflow(Checkout.run, "order-1", id="o-1", task_queue="shop")
    assert_type(handle, WorkflowHandle[Receipt])
    assert_type(await handle.result(timeout=30), Receipt)
    assert_type(await handle.query(Checkout.count), int)
    assert_type(await handle.query(Checkout.item, 0), str)
    assert_type(await handle.update(Checkout.add_item, "pear", update_id="u-1"), int)
    assert_type(await handle.update(Checkout.clear), None)
    assert_type(await handle.update(Checkout.rename, "pear", "fig"), int)
    assert_type(await handle.query("count"), Any)
    assert_type(await handle.update("add_item", "pear"), Any)
    await handle.signal("approve")
    assert_type(await handle.signal(Checkout.approve), bool)
    assert_type(await handle.signal(Checkout.note, "gift", signal_id="s-1"), bool)

    by_class = await client.start_workflow(Checkout, "order-2", task_queue="shop")
    assert_type(by_class, WorkflowHandle[Any])
    by_name = await client.start_workflow("Checkout", "order-3", task_queue="shop")
    assert_type(by_name, WorkflowHandle[Any])
    assert_type(client.get_handle("o-1"), WorkflowHandle[Any])

    invoice = await client.start_activity(charge, "order-1", 100, task_queue="shop", id="a-1")
    assert_type(invoice, ActivityHandle[Receipt])
    assert_type(await invoice.result(timeout=30), Receipt)
    summed = await client.start_activity(add, 1, 2, task_queue="shop", retry_policy=RetryPolicy())
    assert_type(await summed.result(), int)
    assert_type(
        await client.start_activity("charge", "o", 1, task_queue="shop"), ActivityHandle[Any]
    )
    assert_type(client.get_activity_handle("a-1"), ActivityHandle[Any])

    try:
        await client.start_workflow(Checkout.run, "order-1", id="o-1", task_queue="shop")
    except WorkflowAlreadyStartedError as exc:
        assert_type(exc.workflow_id, str)
    try:
        await handle.result()
    except WorkflowCancelledError:
        pass
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, ActivityError):
            assert_type(exc.cause.cause, BaseException | None)
    try:
        await handle.query(Checkout.item, 9)
    except QueryFailedError as exc:
        assert_type(exc.cause, ApplicationError)
    try:
        await handle.update(Checkout.add_item, "")
    except UpdateFailedError as exc:
        assert_type(exc.cause, ApplicationError)


async def main() -> None:
    async with Worker(app), await Client.connect() as client:
        await client_calls(client)
