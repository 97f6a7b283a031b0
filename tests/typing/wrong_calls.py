"""Calls the typed API must refuse: each line marked `# expected error` is a mypy error.

Checked by test_typing.py; not imported by anything.
"""

from __future__ import annotations

from burrow import Client, activity, workflow


@activity.defn
async def charge(order_id: str, cents: int) -> str:
    return order_id


@activity.defn
def add(a: int, b: int) -> int:
    return a + b


@workflow.defn
class Other:
    @workflow.run
    async def run(self, count: int) -> int:
        return count


@workflow.defn
class Checkout:
    @workflow.query
    def count(self) -> int:
        return 0

    @workflow.update
    async def add_item(self, item: str) -> int:
        return 1

    @workflow.signal
    def bump(self) -> None:
        pass

    @workflow.run
    async def run(self, order_id: str) -> str:
        wrong_result: int = await workflow.activity(charge, order_id, 1)  # expected error
        await workflow.activity(charge, order_id, "1")  # expected error
        await workflow.activity(charge, order_id)  # expected error
        await workflow.activity(add, 1, "2")  # expected error
        await workflow.activity(charge, order_id, 1, start_to_close_timout=5)  # expected error
        await workflow.activity(charge, order_id, 1, retry_policy=3)  # expected error
        await workflow.local_activity(charge, order_id, "1")  # expected error
        await workflow.local_activity(add, 1, 2, options=3)  # expected error
        wrong_local: str = await workflow.local_activity(add, 1, 2)  # expected error
        gpu = workflow.worker_session("gpu", workflow.WorkerSessionOptions())
        await gpu.activity(add, 1, "2")  # expected error
        wrong_session: str = await gpu.activity(add, 1, 2)  # expected error
        await gpu.activity(add, 1, 2, start_to_close_timout=5)  # expected error
        print(wrong_session)
        wrong_child: str = await workflow.execute_child_workflow(Other.run, 1)  # expected error
        await workflow.execute_child_workflow(Other.run, "1")  # expected error
        await workflow.start_child_workflow(Other.run, 1, parent_close=3)  # expected error
        print(wrong_child)
        wrong_uuid: str = workflow.uuid4()  # expected error
        wrong_parent: str = workflow.info().parent  # expected error
        print(wrong_parent)
        wrong_effect: int = await workflow.side_effect(lambda: "text")  # expected error
        return str(wrong_result) + wrong_uuid + str(wrong_effect) + wrong_local


async def client_calls(client: Client) -> None:
    await client.start_workflow(Checkout.run, 42, task_queue="shop")  # expected error
    await client.start_workflow(Checkout.run, "o-1")  # expected error
    await client.start_activity(charge, "o-1", "100", task_queue="shop")  # expected error
    await client.start_activity(add, 1, 2)  # expected error
    summed = await client.start_activity(add, 1, 2, task_queue="shop")
    wrong_sum: str = await summed.result()  # expected error
    handle = await client.start_workflow(Checkout.run, "o-1", task_queue="shop")
    wrong_result: int = await handle.result()  # expected error
    wrong_count: str = await handle.query(Checkout.count)  # expected error
    await handle.query(Checkout.count, 1)  # expected error
    await handle.update(Checkout.add_item, 3)  # expected error
    await handle.signal(Checkout.bump, 1, 2)  # expected error
    print(wrong_result, wrong_count, wrong_sum)
