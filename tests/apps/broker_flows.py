"""Workflows for the broker fault tests: one activity each, on a task queue of their own."""

from __future__ import annotations

import time
from pathlib import Path

from burrow import App, activity, workflow

TASK_QUEUE = "broker-faults"
GATE_POLL_SECONDS = 0.05


@activity.defn
async def echo(value: str) -> str:
    return f"echo:{value}"


@activity.defn
def gated_echo(gate: str, value: str) -> str:
    """Waits while the file `gate` exists, so a test decides when activities may finish.

    A plain function: it runs in the worker's thread pool and holds one activity slot.
    """
    while Path(gate).exists():
        time.sleep(GATE_POLL_SECONDS)
    return f"gated:{value}"


_RETRY = workflow.RetryPolicy(max_attempts=10, initial_interval=0.1)


@workflow.defn
class EchoFlow:
    """The shortest real workflow: one queued activity."""

    @workflow.run
    async def run(self, value: str) -> str:
        result: str = await workflow.activity(
            echo, value, start_to_close_timeout=30, retry_policy=_RETRY
        )
        return result


@workflow.defn
class GatedFlow:
    """One queued activity that holds its slot until the test removes the gate file."""

    @workflow.run
    async def run(self, gate: str, value: str) -> str:
        result: str = await workflow.activity(
            gated_echo, gate, value, start_to_close_timeout=120, retry_policy=_RETRY
        )
        return result


app = App(task_queue=TASK_QUEUE, workflows=[EchoFlow, GatedFlow], activities=[echo, gated_echo])
