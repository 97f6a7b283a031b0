"""`burrow demo`: a sample order workflow run end to end by an in-process worker."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from burrow import activity, workflow
from burrow.app import App
from burrow.client import Client
from burrow.config import Settings
from burrow.handle import WorkflowHandle
from burrow.protocol.events import HistoryEvent
from burrow.store import migrate
from burrow.worker.worker import Worker

TASK_QUEUE = "demo-orders"
_flaky_calls: dict[str, int] = {}


@dataclass
class Order:
    """A customer order."""

    order_id: str
    amount_cents: int
    items: list[str]


@activity.defn(name="reserve_stock")
async def reserve_stock(order: Order) -> str:
    """Reserve the order's items (idempotent per execution id)."""
    return f"reservation-{activity.context().activity_execution_id}"


@activity.defn(name="charge_card")
async def charge_card(order: Order) -> str:
    """Charge the card; fails once to show a durable retry."""
    calls = _flaky_calls[order.order_id] = _flaky_calls.get(order.order_id, 0) + 1
    if calls == 1:
        raise RuntimeError("payment gateway timed out (demo: retried)")
    return f"charge-{order.amount_cents}"


@activity.defn(name="ship_order")
def ship_order(order: Order, reservation: str) -> str:
    """Hand the order to shipping (a plain function runs in a thread)."""
    return f"shipment-of-{len(order.items)}-items"


@workflow.defn(name="ShipmentWorkflow")
class ShipmentWorkflow:
    """Ship one order: a child workflow of its OrderWorkflow."""

    @workflow.run
    async def run(self, order: Order, reservation: str) -> str:
        """Hand the order to shipping."""
        return await workflow.activity(ship_order, order, reservation, start_to_close_timeout=10)


@workflow.defn(name="OrderWorkflow")
class OrderWorkflow:
    """Reserve, charge, wait for approval (or 2 s), then ship (a child workflow)."""

    def __init__(self) -> None:
        self.approved = False
        self.status = "created"

    @workflow.signal
    def approve(self, approver: str) -> None:
        """Approve the order."""
        self.approved = True
        self.status = f"approved by {approver}"

    @workflow.query
    def current_status(self) -> str:
        """Where the order is."""
        return self.status

    @workflow.run
    async def run(self, order: Order) -> dict[str, object]:
        """The order's steps."""
        tracking = await workflow.side_effect(lambda: f"TRK-{uuid.uuid4().hex[:8]}")
        # Version 3 ships through a child workflow; runs recorded before it keep the activity.
        version = workflow.get_version("ship-with-reservation", 1, 3)
        reservation, charge = await asyncio.gather(
            workflow.activity(reserve_stock, order, start_to_close_timeout=10),
            workflow.activity(
                charge_card,
                order,
                start_to_close_timeout=10,
                retry_policy=workflow.RetryPolicy(max_attempts=3, initial_interval=0.2),
            ),
        )
        if not self.approved:
            self.status = "awaiting approval"
        try:
            await workflow.wait_condition(lambda: self.approved, timeout=2)
        except TimeoutError:
            self.status = "auto-approved"
        await workflow.sleep(0.5)
        if version >= 3:  # shipping is a workflow of its own: a child this order waits for
            shipment = await workflow.execute_child_workflow(
                ShipmentWorkflow.run, order, reservation, id=f"{order.order_id}-shipment"
            )
        else:
            shipment = await workflow.activity(
                ship_order, order, reservation, start_to_close_timeout=10
            )
        return {
            "order_id": order.order_id,
            "reservation": reservation,
            "charge": charge,
            "shipment": shipment,
            "tracking": tracking,
            "status": self.status,
            "version": version,
        }


app = App(
    task_queue=TASK_QUEUE,
    workflows=[OrderWorkflow, ShipmentWorkflow],
    activities=[reserve_stock, charge_card, ship_order],
)


async def run_demo(settings: Settings) -> tuple[dict[str, object], list[HistoryEvent]]:
    """Migrate, start a worker, run one order with a signal, return result and history."""
    await migrate.upgrade(settings.database_url)
    client = await Client.connect(settings=settings)
    try:
        async with Worker(app, settings=settings):
            order = Order(
                order_id=f"order-{uuid.uuid4().hex[:6]}",
                amount_cents=4200,
                items=["burrow", "shovel"],
            )
            handle = await client.start_workflow(
                OrderWorkflow, order, id=order.order_id, task_queue=TASK_QUEUE
            )
            await _signal_when_waiting(handle)
            result = await handle.result(timeout=60)
            return result, await handle.history()
    finally:
        await client.close()


async def _signal_when_waiting(handle: WorkflowHandle[dict[str, object]]) -> None:
    for _ in range(200):
        if any(e.event_type == "ActivityCompleted" for e in await handle.history()):
            break
        await asyncio.sleep(0.05)
    await handle.signal("approve", "demo-operator")
