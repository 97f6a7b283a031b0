"""Work routed by connection (M7, W4): a session and a plain call sent to the "gpu" connection.

Every worker of this app serves the workflows and the activity; which connection it serves
(`burrow worker --connection`, BURROW_CONNECTION) decides which tasks it may claim.
"""

from __future__ import annotations

import os

from burrow import App, activity, workflow

TASK_QUEUE = "connection-flows"
GPU = "gpu"


@activity.defn
async def where(tag: str) -> list[object]:
    """Which process ran this step: [pid, tag]."""
    return [os.getpid(), tag]


@workflow.defn(name="GpuSteps")
class GpuSteps:
    @workflow.run
    async def run(self, job: str) -> list[list[object]]:
        # The session's connection routes its activities; the plain call names its own.
        session = workflow.worker_session(
            f"render-{job}", workflow.WorkerSessionOptions(connection=GPU, lease_seconds=30)
        )
        in_session = await session.activity(where, "session", start_to_close_timeout=60)
        own_call = await workflow.activity(where, "call", connection=GPU, start_to_close_timeout=60)
        return [in_session, own_call]


@workflow.defn(name="Elsewhere")
class Elsewhere:
    @workflow.run
    async def run(self, connection: str) -> list[object]:
        """One step on `connection`: it waits, ready, until a worker serving it appears."""
        return await workflow.activity(where, "elsewhere", connection=connection)


app = App(task_queue=TASK_QUEUE, workflows=[GpuSteps, Elsewhere], activities=[where])
