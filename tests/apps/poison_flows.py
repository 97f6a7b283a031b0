"""Workflows for hostile-input tests (issue 13): handlers that bad signals and updates target."""

from __future__ import annotations

from burrow import App, workflow

TASK_QUEUE = "poison-flows"


@workflow.defn
class TallyFlow:
    """Adds up signalled amounts until `finish`; `bump` takes no arguments on purpose."""

    def __init__(self) -> None:
        self.total = 0
        self.bumps = 0
        self.done = False

    @workflow.signal
    def bump(self) -> None:
        self.bumps += 1

    @workflow.signal
    def add(self, amount: int) -> None:
        self.total += amount

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.update
    async def set_total(self, amount: int) -> int:
        self.total = amount
        return self.total

    @workflow.query
    def tally(self) -> dict[str, int]:
        return {"total": self.total, "bumps": self.bumps}

    @workflow.run
    async def run(self, start: int) -> dict[str, int]:
        self.total = start
        await workflow.wait_condition(lambda: self.done)
        return {"total": self.total, "bumps": self.bumps}


app = App(task_queue=TASK_QUEUE, workflows=[TallyFlow], activities=[])
