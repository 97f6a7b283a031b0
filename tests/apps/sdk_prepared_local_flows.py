"""SDK workflows of prepared local activities (protocol 1.20) through `burrow server`.

A worker that negotiated `prepared_local_activities` and `prepared_local_activity_groups`
asks the server before it runs each local call, alone or as a member of a parallel group
(PROTOCOL.md 5.6). Its handlers run in spawned processes, so they live at module level here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import Any

from durable_workflow import Client, activity, workflow

PREPARED_QUEUE = "python-prepared-locals"
PREPARED_CAPABILITIES = (
    "cooperative_cancellation",
    "prepared_local_activities",
    "prepared_local_activity_groups",
)
"""What the worker declares: prepared locals need cooperative cancellation too."""


@activity.defn(name="local-shout")
async def local_shout(name: str) -> str:
    """The name in capitals."""
    return name.upper()


async def sibling_recorded(server: dict[str, str], sequence: int) -> None:
    """Wait until the run's history holds the completion of step `sequence`.

    A failing member's retry releases the group's claim, and a sibling still running then is
    abandoned; waiting for the sibling's recorded outcome, not for a nap, keeps the scenario the
    same on a loaded machine, where spawning the sibling's process can take seconds."""
    info = activity.context().info
    assert info.workflow_id is not None and info.run_id is not None
    deadline = time.monotonic() + 30
    async with Client(server["url"], token=server["token"], namespace="default") as client:
        while time.monotonic() < deadline:
            page = await client.get_history(info.workflow_id, info.run_id, page_size=1000)
            if any(
                e["event_type"] == "ActivityCompleted" and e["payload"].get("sequence") == sequence
                for e in page["events"]
            ):
                return
            await asyncio.sleep(0.05)
    raise TimeoutError(f"step {sequence} was not completed within 30 s")


@activity.defn(name="local-flaky")
async def local_flaky(name: str, server: dict[str, str]) -> str:
    """Fails its first attempt (once its sibling, step 2, is recorded), succeeds on the next."""
    attempt = activity.context().info.attempt_number
    if attempt == 1:
        await sibling_recorded(server, 2)
        raise RuntimeError("the first attempt fails")
    return f"{name} on attempt {attempt}"


@workflow.defn(name="sdk-prepared-locals")
class SdkPreparedLocalsWorkflow:
    """One local call alone, a group of two local calls (one failing once and retried), then a
    mixed group of a local call and the same activity run remotely."""

    def run(self, ctx: Any, name: str, server: dict[str, str]) -> Generator[Any, Any, Any]:
        single = yield ctx.local_activity("local-shout", [name], start_to_close_timeout=30)
        pair = yield [
            ctx.local_activity("local-shout", [f"{name} jr"], start_to_close_timeout=30),
            ctx.local_activity(
                "local-flaky",
                [name, server],
                retry_policy={"max_attempts": 3, "backoff_seconds": [0, 0]},
                start_to_close_timeout=30,
            ),
        ]
        mixed = yield [
            ctx.local_activity("local-shout", [f"{name} iii"], start_to_close_timeout=30),
            ctx.schedule_activity("local-shout", ["remote"]),
        ]
        return {"single": single, "pair": list(pair), "mixed": list(mixed)}


PREPARED_WORKFLOWS = [SdkPreparedLocalsWorkflow]
PREPARED_ACTIVITIES = [local_shout, local_flaky]
