"""A GPU-style pipeline: three steps that reuse one worker's local resource (W4)."""

from __future__ import annotations

import asyncio
import os

from burrow import App, activity, workflow

TASK_QUEUE = "session-flows"
GPU = "gpu:test-accelerator"
HOLD_SECONDS = 60.0

# What a step leaves loaded on its worker (a model in GPU memory, say): per process, per job.
_LOADED: dict[str, int] = {}


@activity.defn
async def render(job: str, step: int, hold: bool) -> list[int]:
    """One step: reuse what earlier steps of `job` loaded here; [pid, step, uses so far].

    With `hold`, the first attempt heartbeats until the worker dies or the attempt is cancelled,
    so a test can kill its holder mid-sequence.
    """
    ctx = activity.context()
    if hold and ctx.attempt_number == 1:
        for _ in range(int(HOLD_SECONDS / 0.2)):
            await ctx.aheartbeat(step)
            await asyncio.sleep(0.2)
    _LOADED[job] = _LOADED.get(job, 0) + 1
    return [os.getpid(), step, _LOADED[job]]


@workflow.defn(name="GpuPipeline")
class GpuPipeline:
    @workflow.run
    async def run(self, job: str, hold_step: int) -> list[list[int]]:
        session = workflow.worker_session(
            f"gpu-{job}",
            workflow.WorkerSessionOptions(requirements=[GPU], lease_seconds=30, ttl_seconds=600),
        )
        results = []
        for step in (1, 2, 3):
            results.append(
                await session.activity(
                    render, job, step, step == hold_step, start_to_close_timeout=120
                )
            )
        return results


@workflow.defn(name="IdleGpuPipeline")
class IdleGpuPipeline:
    """Three session steps with idle time between them: the holder runs no attempt then (W1).

    Before each later step the workflow sleeps `pause_seconds`, then, with `gated`, waits for the
    `proceed` signal (so a test can stop a worker while the pipeline is idle).
    """

    def __init__(self) -> None:
        self.proceeds = 0

    @workflow.signal
    def proceed(self) -> None:
        self.proceeds += 1

    @workflow.run
    async def run(
        self, job: str, pause_seconds: float, lease_seconds: int, reacquire: bool, gated: bool
    ) -> list[list[int]]:
        session = workflow.worker_session(
            f"idle-{job}",
            workflow.WorkerSessionOptions(
                requirements=[GPU],
                lease_seconds=lease_seconds,
                ttl_seconds=600,
                allow_reacquire_after_failure=reacquire,
            ),
        )
        results = []
        for step in (1, 2, 3):
            if step > 1:
                await workflow.sleep(pause_seconds)
                if gated:
                    await workflow.wait_condition(lambda n=step - 1: self.proceeds >= n)
            results.append(
                await session.activity(render, job, step, False, start_to_close_timeout=120)
            )
        return results


app = App(task_queue=TASK_QUEUE, workflows=[GpuPipeline, IdleGpuPipeline], activities=[render])
