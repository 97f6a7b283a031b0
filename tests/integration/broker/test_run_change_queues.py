"""Run changes (result wakes, issue 12): only the bound keys arrive, and a reconnect re-binds.

Real RabbitMQ: the listener's queue is exclusive to its connection, so after the broker closes
that connection the listener declares a new queue, binds every awaited key again and asks its
owner to re-check (changes published meanwhile were lost).
"""

from __future__ import annotations

import asyncio

from burrow.broker.run_changes import KeyListener, RunChangePublisher
from tests.integration.broker.conftest import BrokerHarness, close_connections_named


class Heard:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.bodies: list[bytes] = []
        self.resynced = asyncio.Event()
        self.arrived = asyncio.Event()

    def change(self, key: str, body: bytes) -> None:
        self.keys.append(key)
        self.bodies.append(body)
        self.arrived.set()

    def resync(self) -> None:
        self.resynced.set()

    async def next(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            await self.arrived.wait()
        self.arrived.clear()


async def test_only_bound_keys_arrive(broker: BrokerHarness) -> None:
    heard = Heard()
    listener = KeyListener(
        broker.connection, broker.topology, on_change=heard.change, on_resync=heard.resync
    )
    publisher = RunChangePublisher(broker.connection, broker.topology)
    try:
        assert await listener.bind("run-a")
        publisher.publish([("run-b", b"b closed"), ("run-a", b"a closed")])
        await heard.next()
        listener.unbind("run-a")
        assert await listener.bind("run-a")  # waits for the unbind: the binding stays
        publisher.publish([("run-b", b"b update"), ("run-a", b"a update")])
        await heard.next()
        assert heard.keys == ["run-a", "run-a"]
        assert heard.bodies == [b"a closed", b"a update"]  # carried as published
    finally:
        await listener.close()
        await publisher.close()
        async with broker.admin.channel() as channel:
            await channel.exchange_delete(broker.topology.runs_exchange_name)


async def test_a_reconnect_rebinds_the_awaited_keys_and_resyncs(broker: BrokerHarness) -> None:
    heard = Heard()
    listener = KeyListener(
        broker.connection, broker.topology, on_change=heard.change, on_resync=heard.resync
    )
    publisher = RunChangePublisher(broker.connection, broker.topology)
    try:
        assert await listener.bind("run-a")
        assert await close_connections_named(broker.connection.name) == 1
        async with asyncio.timeout(20):
            await heard.resynced.wait()  # after the new queue is bound
        assert listener.ready
        publisher.publish([("run-a", b"closed")])
        await heard.next()
        assert heard.keys == ["run-a"]
    finally:
        await listener.close()
        await publisher.close()
        async with broker.admin.channel() as channel:
            await channel.exchange_delete(broker.topology.runs_exchange_name)
