"""A workflow that schedules start (issue 30): one short activity, so a killed worker leaves
workflow and activity tasks to recover besides the fires."""

from __future__ import annotations

from burrow import App, activity, workflow

TASK_QUEUE = "scheduled-flows"


@activity.defn
async def stamp(workflow_id: str) -> str:
    return f"ran {workflow_id}"


@workflow.defn
class ScheduledFlow:
    """Started by a schedule's fire; returns what its activity stamped."""

    @workflow.run
    async def run(self) -> str:
        workflow_id = workflow.info().workflow_id
        stamped: str = await workflow.activity(stamp, workflow_id, start_to_close_timeout=3)
        return stamped


app = App(task_queue=TASK_QUEUE, workflows=[ScheduledFlow], activities=[stamp])
