"""The child workflow bench's App (bench/children.py), on the benchmarks' task queue "bench".

`Parent(n, step)` starts n children one after the other, then awaits each handle and returns
the sum of their results: n * (n + 1) / 2. With `step` each child awaits one `noop` activity
(`ChildStep`); without, it returns `i + 1` itself (`ChildPlain`). Children run on the parent's
task queue, with the ids the runtime derives from the parent's.

A worker loads it as `python -m burrow worker bench.children_app:app`.
"""

from __future__ import annotations

from bench.app import TASK_QUEUE, noop
from burrow import App, workflow


@workflow.defn(name="bench-child")
class ChildStep:
    @workflow.run
    async def run(self, i: int) -> int:
        result: int = await workflow.activity(noop, i, start_to_close_timeout=30)
        return result


@workflow.defn(name="bench-child-plain")
class ChildPlain:
    @workflow.run
    async def run(self, i: int) -> int:
        return i + 1


@workflow.defn(name="bench-parent")
class Parent:
    @workflow.run
    async def run(self, n: int, step: bool) -> int:
        child = ChildStep.run if step else ChildPlain.run
        handles = [await workflow.start_child_workflow(child, i) for i in range(n)]
        return sum([await h for h in handles])


def expected(n: int) -> int:
    """What Parent(n, step) returns, either way."""
    return n * (n + 1) // 2


app = App(task_queue=TASK_QUEUE, workflows=[Parent, ChildStep, ChildPlain], activities=[noop])
