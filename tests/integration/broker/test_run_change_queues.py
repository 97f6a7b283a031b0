"""Run changes (result wakes, issue 12): only the bound keys arrive, and a reconnect re-binds.

Real RabbitMQ: the listener's queue is exclusive to its connection, so after the broker closes
that connection the listener declares a new queue, binds every awaited key again and asks its
owner to re-check (changes published meanwhile were lost).
"""

from __future__ import annotations

import asyncio

from burrow.broker.run_changes import KeyListener, RunChangePublisher, change_routing_key
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


def test_a_change_is_routed_by_its_starter_queue_as_one_topic_word_then_its_key() -> None:
    assert change_routing_key("run-a", None) == "-.run-a"
    assert change_routing_key("run-a", "amq.gen-Xy.z") == "amq_gen-Xy_z.run-a"


async def test_only_bound_keys_arrive(broker: BrokerHarness) -> None:
    heard = Heard()
    listener = KeyListener(
        broker.connection, broker.topology, on_change=heard.change, on_resync=heard.resync
    )
    publisher = RunChangePublisher(broker.connection, broker.topology)
    try:
        assert await listener.bind("run-a")
        publisher.publish([("run-b", b"b closed", None), ("run-a", b"a closed", None)])
        await heard.next()
        listener.unbind("run-a")
        assert await listener.bind("run-a")  # waits for the unbind: the binding stays
        publisher.publish([("run-b", b"b update", None), ("run-a", b"a update", None)])
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
        publisher.publish([("run-a", b"closed", None)])
        await heard.next()
        assert heard.keys == ["run-a"]
    finally:
        await listener.close()
        await publisher.close()
        async with broker.admin.channel() as channel:
            await channel.exchange_delete(broker.topology.runs_exchange_name)


async def test_a_change_sent_to_a_queue_arrives_unbound_and_attached_keys_rebind_after_a_reconnect(
    broker: BrokerHarness,
) -> None:
    """The starter's queue hears its run's change with no binding of the key (the change is
    routed `<starter>.<key>`, and the queue is bound to `<itself>.*`); after a reconnect the new
    queue is bound to the attached key instead."""
    heard = Heard()
    listener = KeyListener(
        broker.connection, broker.topology, on_change=heard.change, on_resync=heard.resync
    )
    publisher = RunChangePublisher(broker.connection, broker.topology)
    try:
        assert await listener.open()
        queue = listener.queue_name
        assert queue is not None
        assert listener.attach("run-a", queue)
        assert not listener.attach("run-b", "amq.gen-not-this-one")
        publisher.publish([("run-a", b"a closed", queue), ("run-c", b"c closed", None)])
        await heard.next()
        assert (heard.keys, heard.bodies) == (["run-a"], [b"a closed"])

        assert await close_connections_named(broker.connection.name) == 1
        async with asyncio.timeout(20):
            await heard.resynced.wait()
        assert listener.queue_name not in (None, queue)
        publisher.publish([("run-a", b"a again", queue)])  # the old queue is gone: bound now
        await heard.next()
        assert heard.keys == ["run-a", "run-a"]
    finally:
        await listener.close()
        await publisher.close()
        async with broker.admin.channel() as channel:
            await channel.exchange_delete(broker.topology.runs_exchange_name)
