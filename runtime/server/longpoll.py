"""The held long poll shared by workflow and activity task polls (PROTOCOL.md 2.5, SPEC M5).

Claim at once; else wait for a wake or the next Postgres probe, until the poll's timeout. A
poll whose caller went away stops before it claims, so it strands no lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request

from burrow.server.deps import ServerState

T = TypeVar("T")


async def hold(
    state: ServerState,
    request: Request,
    *,
    kind: str,
    namespace: str,
    task_queue: str,
    timeout_seconds: float,
    claim: Callable[[], Awaitable[T | None]],
) -> T | None:
    """What `claim` returns first, or None when the poll times out or its caller left."""
    with state.held.hold(kind=kind, task_queue=task_queue):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            found = await claim()
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await state.wakes.wait(
                (kind, namespace, task_queue), min(remaining, state.settings.poll_probe_seconds)
            )
            if await request.is_disconnected():
                return None
