"""First completion in native Burrow workflows: `asyncio.wait(..., FIRST_COMPLETED)` serves.

Burrow's deterministic loop runs asyncio's own primitives, so a workflow races a durable
activity against a durable timer with `asyncio.wait` and cancels the loser (the timer's own
`cancel_timer`); the recorded history replays to the same commands, cold and resumed.
This is the native counterpart of the SDK's `ctx.select` (PROTOCOL.md 7).
"""

from __future__ import annotations

import asyncio

import pytest

from burrow import App, Client, Worker, activity, codec, workflow
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.replay.activation import RunContext
from burrow.testing import read_history, replay_history, wait_for_result

QUEUE = "first-completion"


@activity.defn
async def quick(name: str) -> str:
    return f"hello, {name}"


@workflow.defn
class Race:
    """A greeting raced against an hour's timer; the timer loses and is cancelled."""

    @workflow.run
    async def run(self, name: str) -> str:
        greeting = asyncio.ensure_future(workflow.activity(quick, name, start_to_close_timeout=10))
        deadline = asyncio.ensure_future(workflow.sleep(3600))
        done, pending = await asyncio.wait(
            [greeting, deadline], return_when=asyncio.FIRST_COMPLETED
        )
        for loser in pending:
            loser.cancel()
        return greeting.result() if greeting in done else "too late"


app = App(task_queue=QUEUE, workflows=[Race], activities=[quick])
pytestmark = [pytest.mark.slow, pytest.mark.burrow_app(app)]


async def test_asyncio_wait_takes_the_first_completion_and_replays(
    burrow_worker: Worker, burrow_client: Client
) -> None:
    """The activity wins, the timer is cancelled (TimerCancelled), and replaying the history
    cold and split after each event gives the recorded completion again."""
    handle = await burrow_client.start_workflow(Race.run, "ada", task_queue=QUEUE)
    assert await wait_for_result(handle) == "hello, ada"
    history = await read_history(handle)
    assert history.of_type(ev.TimerCancelled) and not history.of_type(ev.TimerFired)
    run = RunContext(
        run_id=history.events[0].run_id,
        workflow_id=handle.workflow_id,
        workflow_type="Race",
        namespace="default",
        task_queue=QUEUE,
        input=dict(codec.encode(["ada"])),
    )
    recorded = list(history.events[:-1])  # all but the close the last task recorded
    cold = replay_history(app, run, recorded)
    first_task = [e.sequence for e in recorded if isinstance(e.event, ev.TimerScheduled)]
    warm = replay_history(app, run, recorded, split_at=first_task)  # resumed, as from a cache
    assert cold == warm
    [completed] = [c for c in cold if isinstance(c, cmd.CompleteWorkflow)]
    assert codec.decode(completed.result) == "hello, ada"
