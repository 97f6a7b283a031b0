"""One poller per task kind: every claim of that kind, whatever asked for it, is one of its passes.

Wakes, local hints and the re-poll timer all go through the poller's `ClaimTrigger`, so a burst
of them while the poller is already claiming costs one more pass, not one transaction each.
A broker delivery waits for the first pass that *starts after it arrived* (C3: a transactional
claim after each delivery) and is acked when that pass ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, TypeVar

from burrow.worker.slots import Slots

T = TypeVar("T")


class Pass(NamedTuple):
    """What one claim transaction did."""

    claimed: int
    """Tasks it leased."""
    limit: int
    """Tasks it asked for (free slots, capped); 0 when no slot was free."""

    @property
    def full(self) -> bool:
        """Every slot asked for was filled: the queue likely holds more, so claim again now."""
        return self.limit > 0 and self.claimed == self.limit


NO_SLOT = Pass(0, 0)


async def claim_into_slots(
    slots: Slots,
    wanted: int,
    claim: Callable[[int], Awaitable[Sequence[T]]],
    start: Callable[[T], None],
) -> Pass:
    """One claim transaction for up to `wanted` free slots; start what it leased, free the rest."""
    reserved = slots.reserve(wanted)
    if not reserved:
        return NO_SLOT
    try:
        claimed = await claim(reserved)
    except BaseException:
        slots.release(reserved)
        raise
    for task in claimed:
        start(task)
    slots.release(reserved - len(claimed))
    return Pass(len(claimed), reserved)


class ClaimTrigger:
    """Asks a poller for a claim pass; lets a delivery wait for the pass that serves it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._waiting: list[asyncio.Future[bool]] = []

    def poke(self) -> None:
        """Ask for a pass soon (a local hint, a reconnect, a wake that found every slot busy)."""
        self._event.set()

    async def claim_after(self) -> bool:
        """Ask for a pass and wait until one that started after this call has ended.

        Returns:
            Whether that pass leased anything.
        """
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._event.set()
        return await waiter

    async def wait(self, timeout: float) -> None:
        """Sleep until poked or until `timeout` seconds pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()

    def begin_pass(self) -> list[asyncio.Future[bool]]:
        """Take the requests this pass serves; later ones wait for the next pass."""
        self._event.clear()
        served, self._waiting = self._waiting, []
        return served

    @staticmethod
    def end_pass(served: list[asyncio.Future[bool]], claimed: bool) -> None:
        """Release the deliveries a pass served."""
        for waiter in served:
            if not waiter.done():
                waiter.set_result(claimed)

    def release_all(self) -> None:
        """On shutdown: let every waiting delivery settle (an unserved wake is only a hint)."""
        self.end_pass(self.begin_pass(), False)


async def poll(
    trigger: ClaimTrigger,
    claim_once: Callable[[], Awaitable[Pass]],
    idle_seconds: Callable[[float], float],
    *,
    wait_for_capacity: Callable[[], Awaitable[None]] | None = None,
    min_backoff: float,
    max_backoff: float,
) -> None:
    """Claim while passes come back full; otherwise wait for the trigger or the re-poll.

    A pass that leased fewer tasks than it asked for found the queue drained (tasks it skipped
    are being leased by others, or are announced again by whoever held their run), so the
    poller waits for the next wake instead of paying for an empty claim. Each pass first waits
    for a free slot, so a full worker claims as soon as one frees rather than sleeping through
    a re-poll interval.

    Args:
        trigger: Where wakes, hints and deliveries ask for passes.
        claim_once: One claim transaction for up to the free slots.
        idle_seconds: The wait after an empty pass, given the current durable-poll backoff.
        wait_for_capacity: Returns once a slot is free (None: the kind has no slots).
        min_backoff: The first durable-poll backoff, used again after every pass that leased.
        max_backoff: The longest durable-poll backoff.
    """
    backoff = min_backoff
    while True:
        if wait_for_capacity is not None:
            await wait_for_capacity()
        served = trigger.begin_pass()
        result = NO_SLOT
        try:
            result = await claim_once()
        finally:
            trigger.end_pass(served, result.claimed > 0)
        if result.full:
            backoff = min_backoff
            continue
        if result.claimed:
            backoff = min_backoff  # durable polling stays at its shortest while work flows
        await trigger.wait(idle_seconds(backoff))
        if not result.claimed:
            backoff = min(backoff * 2, max_backoff)
