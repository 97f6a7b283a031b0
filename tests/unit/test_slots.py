"""Execution slots: a claim never takes more than is free, a draining worker takes none."""

from __future__ import annotations

import asyncio

from burrow.worker.slots import Slots


def test_reserve_takes_at_most_what_is_free_and_release_gives_it_back() -> None:
    slots = Slots(3)
    assert slots.reserve(8) == 3
    assert slots.reserve(1) == 0
    slots.release(2)
    assert (slots.free, slots.reserve(1)) == (2, 1)


async def test_wait_free_returns_once_a_slot_is_released() -> None:
    slots = Slots(1)
    slots.reserve(1)
    waiter = asyncio.create_task(slots.wait_free())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    slots.release()
    await asyncio.wait_for(waiter, 1)


async def test_closed_slots_hand_out_nothing_and_wait_forever() -> None:
    slots = Slots(2)
    slots.close()
    assert slots.reserve(1) == 0
    waiter = asyncio.create_task(slots.wait_free())
    slots.release()  # a task ending while draining
    await asyncio.sleep(0.01)
    assert not waiter.done()
    waiter.cancel()
