"""The held long poll shared by workflow and activity task polls (PROTOCOL.md 2.5, SPEC M5).

Claim at once; else wait for a wake (this server's commits, or RabbitMQ for other processes')
or the next Postgres probe, until the poll's timeout. A
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
    connection: str = "default",
) -> T | None:
    """What `claim` returns first, or None when the poll times out or its caller left.

    Wakes come from this server's commits and, through the broker, from any other process's.
    """
    # Bound before the first claim: work made ready after it wakes this poll.
    await state.wakes.watch_queue(
        namespace=namespace, connection=connection, queue=task_queue, kind=kind
    )
    with state.held.hold(kind=kind, task_queue=task_queue):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        while True:
            armed = state.wakes.arm((kind, namespace, task_queue))
            found = await claim()
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await state.wakes.wait(armed, min(remaining, state.settings.poll_probe_seconds))
            if await request.is_disconnected():
                return None
