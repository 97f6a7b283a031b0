"""A workflow as it ran (`app`) and as it was later changed without a version guard.

The replay verifier tests run `app` in a real worker, then replay the recorded runs against
`app` (unchanged: OK) and `changed_app` (step 2 is now another activity: a divergence).
"""

from __future__ import annotations

from burrow import App, activity, workflow

TASK_QUEUE = "replay-flows"


@activity.defn
async def pack(order: str) -> str:
    return f"box-{order}"


@activity.defn
async def weigh(box: str) -> int:
    return len(box)


@activity.defn
async def ship(box: str) -> str:
    return f"shipped {box}"


@workflow.defn(name="Shipment")
class Shipment:
    """Pack, stamp (a side effect), optionally wait for a release signal, ship."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, order: str, hold: bool) -> str:
        box = await workflow.activity(pack, order, start_to_close_timeout=10)
        stamp = await workflow.side_effect(lambda: "stamp-1")
        if hold:
            await workflow.wait_condition(lambda: self.released)
        return await workflow.activity(ship, f"{box}/{stamp}", start_to_close_timeout=10)


@workflow.defn(name="Shipment")
class ChangedShipment:
    """Shipment after an unguarded change: step 2 weighs the box instead of stamping it."""

    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, order: str, hold: bool) -> str:
        box = await workflow.activity(pack, order, start_to_close_timeout=10)
        grams = await workflow.activity(weigh, box, start_to_close_timeout=10)
        if hold:
            await workflow.wait_condition(lambda: self.released)
        return await workflow.activity(ship, f"{box}/{grams}", start_to_close_timeout=10)


app = App(task_queue=TASK_QUEUE, workflows=[Shipment], activities=[pack, ship])
changed_app = App(
    task_queue=TASK_QUEUE, workflows=[ChangedShipment], activities=[pack, weigh, ship]
)
