"""The start batcher's own rules, with a stand-in for the statement (no database needed)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from burrow.store.models import RunInfo
from burrow.store.runs import NewRun
from burrow.store.start_batches import MAX_BATCH, StartBatcher


def _new(workflow_id: str) -> NewRun:
    return NewRun(
        namespace="default", workflow_id=workflow_id, workflow_type="Flow", task_queue="q", input={}
    )


class _Statement:
    """Records each batch; answers every start with its workflow id (standing in for a run)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.hold: asyncio.Event | None = None

    async def write(self, wanted: Sequence[NewRun]) -> list[RunInfo | None]:
        self.batches.append([new.workflow_id for new in wanted])
        if self.hold is not None:
            await self.hold.wait()
        return [cast(Any, new.workflow_id) for new in wanted]


def test_starts_asked_for_during_a_write_go_in_the_next_batch_of_at_most_max() -> None:
    statement = _Statement()
    batcher = StartBatcher(statement.write)

    async def burst() -> list[RunInfo]:
        first = asyncio.create_task(batcher.start(_new("first")))
        await asyncio.sleep(0)  # the first batch is being written
        rest = [batcher.start(_new(f"w{i}")) for i in range(MAX_BATCH + 5)]
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(burst())

    assert [len(batch) for batch in statement.batches] == [1, MAX_BATCH, 5]
    assert cast(list[Any], answers) == ["first", *(f"w{i}" for i in range(MAX_BATCH + 5))]


def test_a_batcher_still_writes_after_a_loop_ended_during_its_write() -> None:
    statement = _Statement()
    batcher = StartBatcher(statement.write)

    async def abandoned() -> None:
        statement.hold = asyncio.Event()  # never set: the loop ends mid-write
        asking = asyncio.create_task(batcher.start(_new("abandoned")))
        await asyncio.sleep(0.01)
        assert not asking.done()

    asyncio.run(abandoned())
    statement.hold = None

    async def later() -> RunInfo:
        return await batcher.start(_new("later"))

    assert cast(Any, asyncio.run(later())) == "later"
    assert statement.batches == [["abandoned"], ["later"]]
