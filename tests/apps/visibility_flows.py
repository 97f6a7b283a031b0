"""A flow that upserts its memo and search attributes and continues as new (issue 30)."""

from __future__ import annotations

from burrow import App, workflow

TASK_QUEUE = "visibility-flows"


@workflow.defn(name="tagged-order")
class TaggedOrder:
    """Upserts before and after a durable timer, continues as new once, reports what it saw."""

    @workflow.run
    async def run(self, continued: bool = False) -> dict[str, object]:
        if continued:
            # The new run starts with what the old one held last.
            return {"memo": workflow.memo(), "search_attributes": workflow.search_attributes()}
        at_start = {"memo": workflow.memo(), "search_attributes": workflow.search_attributes()}
        workflow.upsert_search_attributes({"Stage": "paying", "Amount": 42})
        await workflow.sleep(0.05)  # a later workflow task: resumed warm, replayed cold
        workflow.upsert_memo({"stage": "paid", "note": None})
        workflow.upsert_search_attributes({"Stage": "paid", "Tags": None})
        seen = {"memo": workflow.memo(), "search_attributes": workflow.search_attributes()}
        if at_start["memo"] == {}:
            return {"at_start": at_start, "after": seen}
        workflow.continue_as_new(True)


@workflow.defn(name="tagged-child")
class TaggedChild:
    """Reports the memo and attributes its parent started it with."""

    @workflow.run
    async def run(self) -> dict[str, object]:
        return {"memo": workflow.memo(), "search_attributes": workflow.search_attributes()}


@workflow.defn(name="tagged-parent")
class TaggedParent:
    """Starts TaggedChild with a memo and search attributes of its own."""

    @workflow.run
    async def run(self) -> dict[str, object]:
        return await workflow.execute_child_workflow(
            TaggedChild.run,
            memo={"parent": workflow.info().workflow_id},
            search_attributes={"CustomerId": "c-9", "Tags": ["child"]},
        )


app = App(task_queue=TASK_QUEUE, workflows=[TaggedOrder, TaggedChild, TaggedParent])


@workflow.defn(name="tagged-order")
class TaggedOrderChanged:
    """TaggedOrder with its first upsert changed: replaying its history is non-deterministic."""

    @workflow.run
    async def run(self, continued: bool = False) -> dict[str, object]:
        workflow.upsert_search_attributes({"Stage": "paying", "Amount": 43})
        await workflow.sleep(0.05)
        return {}


changed_app = App(task_queue=TASK_QUEUE, workflows=[TaggedOrderChanged])
