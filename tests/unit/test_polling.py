"""The claim funnel: deliveries wait for a pass that starts after them (C3), bursts coalesce."""

from __future__ import annotations

import asyncio

import pytest

from burrow.worker.polling import ClaimTrigger, Pass, poll


class ScriptedClaims:
    """A claim_once whose passes the test releases one at a time.

    A result True is a full pass (every slot asked for filled), False an empty one.
    """

    def __init__(self, results: list[bool | Pass]) -> None:
        self.results = results
        self.passes = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self) -> Pass:
        self.passes += 1
        self.started.set()
        await self.release.wait()
        self.release.clear()
        result = self.results.pop(0) if self.results else False
        if isinstance(result, Pass):
            return result
        return Pass(1, 1) if result else Pass(0, 1)

    async def finish_pass(self) -> None:
        await self.started.wait()
        self.started.clear()
        self.release.set()
        await asyncio.sleep(0)


def run_poller(trigger: ClaimTrigger, claims: ScriptedClaims) -> asyncio.Task[None]:
    return asyncio.create_task(
        poll(trigger, claims, lambda _: 3600.0, min_backoff=0.01, max_backoff=0.1)
    )


async def test_a_delivery_waits_for_a_pass_that_starts_after_it() -> None:
    """C3: a wake arriving during a pass is not settled by that pass, but by the next one."""
    trigger, claims = ClaimTrigger(), ScriptedClaims([False, True])
    poller = run_poller(trigger, claims)
    await claims.started.wait()  # the first pass is in its transaction

    delivery = asyncio.create_task(trigger.claim_after())
    await claims.finish_pass()  # the first pass ends empty
    assert not delivery.done()

    await claims.finish_pass()  # the second pass started after the delivery and claimed
    assert await delivery is True
    await claims.started.wait()  # a pass that claimed is followed by another at once
    assert claims.passes == 3
    poller.cancel()


async def test_a_burst_of_deliveries_during_a_pass_costs_one_more_pass() -> None:
    trigger, claims = ClaimTrigger(), ScriptedClaims([False, False])
    poller = run_poller(trigger, claims)
    await claims.started.wait()

    burst = [asyncio.create_task(trigger.claim_after()) for _ in range(10)]
    await claims.finish_pass()
    await claims.finish_pass()

    assert await asyncio.gather(*burst) == [False] * 10
    await asyncio.sleep(0.01)
    assert claims.passes == 2  # then idle: no pass without a request
    poller.cancel()


async def test_the_poller_keeps_claiming_while_passes_find_work() -> None:
    trigger, claims = ClaimTrigger(), ScriptedClaims([True, True, False])
    poller = run_poller(trigger, claims)
    for _ in range(3):
        await claims.finish_pass()
    await asyncio.sleep(0.01)
    assert claims.passes == 3
    assert not claims.started.is_set()  # idle after the empty pass
    poller.cancel()


async def test_a_pass_that_leaves_slots_unfilled_found_the_queue_drained() -> None:
    """A batch smaller than asked for: no follow-up claim until the next wake or re-poll."""
    trigger, claims = ClaimTrigger(), ScriptedClaims([Pass(3, 8), Pass(1, 8)])
    poller = run_poller(trigger, claims)
    await claims.finish_pass()
    await asyncio.sleep(0.01)
    assert claims.passes == 1

    delivery = asyncio.create_task(trigger.claim_after())
    await claims.finish_pass()
    assert await delivery is True  # it leased something
    await asyncio.sleep(0.01)
    assert claims.passes == 2
    poller.cancel()


async def test_a_poke_while_idle_starts_a_pass() -> None:
    trigger, claims = ClaimTrigger(), ScriptedClaims([False, False])
    poller = run_poller(trigger, claims)
    await claims.finish_pass()
    await asyncio.sleep(0.01)
    assert claims.passes == 1

    trigger.poke()
    await claims.finish_pass()
    assert claims.passes == 2
    poller.cancel()


async def test_each_pass_waits_for_capacity_first() -> None:
    trigger, claims = ClaimTrigger(), ScriptedClaims([False])
    slot_free = asyncio.Event()
    poller = asyncio.create_task(
        poll(
            trigger,
            claims,
            lambda _: 3600.0,
            wait_for_capacity=slot_free.wait,
            min_backoff=0.01,
            max_backoff=0.1,
        )
    )
    delivery = asyncio.create_task(trigger.claim_after())
    await asyncio.sleep(0.01)
    assert claims.passes == 0 and not delivery.done()

    slot_free.set()
    await claims.finish_pass()
    assert await delivery is False
    poller.cancel()


async def test_a_failing_pass_settles_its_deliveries_and_release_all_settles_the_rest() -> None:
    trigger = ClaimTrigger()

    async def broken() -> Pass:
        raise ConnectionError("store down")

    delivery = asyncio.create_task(trigger.claim_after())
    await asyncio.sleep(0)
    poller = asyncio.create_task(
        poll(trigger, broken, lambda _: 3600.0, min_backoff=0.01, max_backoff=0.1)
    )
    assert await delivery is False
    with pytest.raises(ConnectionError):
        await poller  # the worker's _guard restarts it

    waiting = asyncio.create_task(trigger.claim_after())
    await asyncio.sleep(0)
    trigger.release_all()  # shutdown: nothing will serve it
    assert await waiting is False


async def test_durable_polling_backs_off_while_empty_and_resets_once_a_pass_leases() -> None:
    """C4, M5: without wakes the wait doubles after empty passes and is short again after work."""
    trigger, claims = ClaimTrigger(), ScriptedClaims([False, False, False, Pass(1, 8), False])
    waits: list[float] = []

    def idle_seconds(backoff: float) -> float:
        waits.append(backoff)
        return 0.0

    poller = asyncio.create_task(
        poll(trigger, claims, idle_seconds, min_backoff=0.05, max_backoff=0.1)
    )
    for _ in range(5):
        await claims.finish_pass()
    poller.cancel()

    assert waits == [0.05, 0.1, 0.1, 0.05, 0.05]
