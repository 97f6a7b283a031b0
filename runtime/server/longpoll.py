"""The held long poll shared by workflow, activity and query task polls (PROTOCOL.md 2.5, M5).

Claim at once; else wait for a wake (this server's commits, or RabbitMQ for other processes')
or the next Postgres probe, until the poll's deadline. A poll whose caller went away stops
before it claims, so it strands no lease.

The answer is due at the deadline, not seconds after it: the SDK waits 5 s past its timeout and
then resends. So the deadline runs from the request's arrival (gate.py stamps it: parsing and
the registration read count), no claim starts after it, and a claim waits for a claim slot
(polls.CLAIMS_AT_ONCE) no longer than the time left. Before, 500 polls of 5 s answered at p50
8.6 s, max 12.8 s: the deadline started late, one more claim ran after it, and claims queued
for a pool connection past it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import Request

from burrow.server.deps import ServerState
from burrow.server.gate import ARRIVED_AT

T = TypeVar("T")


def deadline_of(request: Request, timeout_seconds: float) -> float:
    """When a poll of `timeout_seconds` is due, on the event loop's clock: from its arrival."""
    arrived = request.scope.get(ARRIVED_AT)
    if not isinstance(arrived, float):
        arrived = asyncio.get_running_loop().time()
    return arrived + timeout_seconds


async def in_time(
    state: ServerState, deadline: float, work: Callable[[], Awaitable[T | None]]
) -> T | None:
    """`work()` in a claim slot that frees before `deadline`; None when none does.

    A slot that is free now is taken even at the deadline: every poll claims at least once
    (a timeout of 0 is an immediate probe). Waiting for a slot is cancelled harmlessly, unlike
    a claim cut off mid-statement, which could lease a task nobody is told about.
    """
    slots = state.held.claim_slots
    if slots.locked():
        left = deadline - asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(slots.acquire(), left)
        except TimeoutError:
            return None
    else:
        await slots.acquire()
    try:
        return await work()
    finally:
        slots.release()


async def hold(
    state: ServerState,
    request: Request,
    *,
    kind: str,
    namespace: str,
    task_queue: str,
    deadline: float,
    claim: Callable[[], Awaitable[T | None]],
    connection: str = "default",
) -> T | None:
    """What `claim` returns first, or None at the deadline or when the caller left.

    Wakes come from this server's commits and, through the broker, from any other process's.
    """
    # Bound before the first claim: work made ready after it wakes this poll.
    await state.wakes.watch_queue(
        namespace=namespace, connection=connection, queue=task_queue, kind=kind
    )
    with state.held.hold(kind=kind, task_queue=task_queue, namespace=namespace):
        loop = asyncio.get_running_loop()
        while True:
            armed = state.wakes.arm((kind, namespace, task_queue))
            found = await in_time(state, deadline, claim)
            if found is not None:
                return found
            left = deadline - loop.time()
            if left <= 0:
                return None
            probe = state.settings.poll_probe_seconds
            await state.wakes.wait(armed, min(left, probe))
            # The wait up to the deadline ends the poll unless a wake cut it short (a timer
            # may fire a hair early, so the clock alone would allow one more claim).
            if loop.time() >= deadline or (left <= probe and not armed.is_set()):
                return None
            if await request.is_disconnected():
                return None
