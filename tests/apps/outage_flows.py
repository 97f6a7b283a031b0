"""A workflow whose activity waits for a go-ahead file, so a test can cut Postgres under it."""

from __future__ import annotations

import time
from pathlib import Path

from burrow import App, activity, workflow

TASK_QUEUE = "outage-flows"


@activity.defn
def wait_for_go(directory: str) -> str:
    """Notes each execution, then waits until the test creates `go` (Postgres is down by then)."""
    folder = Path(directory)
    with (folder / "executions").open("a") as executions:
        executions.write("ran\n")
    deadline = time.monotonic() + 60
    while not (folder / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "done"


@workflow.defn
class GoAheadFlow:
    @workflow.run
    async def run(self, directory: str) -> str:
        result: str = await workflow.activity(wait_for_go, directory, start_to_close_timeout=120)
        return result


app = App(task_queue=TASK_QUEUE, workflows=[GoAheadFlow], activities=[wait_for_go])
