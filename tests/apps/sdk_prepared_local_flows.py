"""SDK workflows of prepared local activities (protocol 1.20) through `burrow server`.

A worker that negotiated `prepared_local_activities` and `prepared_local_activity_groups`
asks the server before it runs each local call, alone or as a member of a parallel group
(PROTOCOL.md 5.6). Its handlers run in spawned processes, so they live at module level here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

from durable_workflow import activity, workflow

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


@activity.defn(name="local-flaky")
async def local_flaky(name: str) -> str:
    """Fails its first attempt (after its sibling is done), succeeds on the next."""
    attempt = activity.context().info.attempt_number
    if attempt == 1:
        await asyncio.sleep(0.5)
        raise RuntimeError("the first attempt fails")
    return f"{name} on attempt {attempt}"


@workflow.defn(name="sdk-prepared-locals")
class SdkPreparedLocalsWorkflow:
    """One local call alone, a group of two local calls (one failing once and retried), then a
    mixed group of a local call and the same activity run remotely."""

    def run(self, ctx: Any, name: str) -> Generator[Any, Any, Any]:
        single = yield ctx.local_activity("local-shout", [name], start_to_close_timeout=30)
        pair = yield [
            ctx.local_activity("local-shout", [f"{name} jr"], start_to_close_timeout=30),
            ctx.local_activity(
                "local-flaky",
                [name],
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
