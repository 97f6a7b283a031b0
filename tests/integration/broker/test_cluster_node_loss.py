"""A clustered RabbitMQ (C1, C4, M5): the wake path moves to another node when its node is lost.

Real nodes of a private three-node cluster (bench/rabbit_cluster.py), one per module; shared wake
queues are quorum queues, so they outlive the node. After a connection lands on another node the
robust connection restores the shared queues and consumers there, the worker's sticky queue and
a client's run-change queue are declared anew, and `on_reconnect` callbacks run (the worker's
re-poll). A queue of the other type is refused with a typed error naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from uuid import uuid4

import aio_pika
import pytest
from structlog.testing import capture_logs

from bench.rabbit_cluster import RabbitCluster
from burrow.broker import BrokerConnection, Topology, Wake, WakeConsumer, WakePublisher
from burrow.broker.errors import QueueTypeMismatch
from burrow.broker.run_changes import KeyListener, RunChangePublisher
from burrow.testing import assert_eventually
from tests.integration.broker.conftest import SUBSCRIPTION, BrokerHarness, make_wake
from tests.integration.broker.test_broker import Recorder
from tests.support.private_rabbit import started_rabbit_cluster

pytestmark = pytest.mark.slow

RECONNECT_INTERVAL_SECONDS = 0.2
MOVE_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[RabbitCluster]:
    with started_rabbit_cluster(3) as started:
        yield started


@pytest.fixture
def all_nodes_up(cluster: RabbitCluster) -> RabbitCluster:
    """Every node running again (a previous test may have stopped one)."""
    for index, node in enumerate(cluster.nodes):
        if not node.is_running():
            cluster.start_node(index)
    cluster.wait_members(len(cluster.nodes))
    return cluster


class Side:
    """One process's connection, quorum topology, publisher and consumer on the cluster."""

    def __init__(self, urls: list[str], name: str) -> None:
        self.topology = Topology(prefix=f"test-{uuid4().hex[:8]}", queue_type="quorum")
        self.connection = BrokerConnection(
            urls, name=name, reconnect_interval_seconds=RECONNECT_INTERVAL_SECONDS
        )
        self.publisher = WakePublisher(self.connection, self.topology)
        self.reconnects = 0
        self.connection.on_reconnect(self._count)
        self.consumers: list[WakeConsumer] = []

    def _count(self) -> None:
        self.reconnects += 1

    def consumer(self, recorder: Recorder, *, sticky_worker_id: str | None = None) -> WakeConsumer:
        consumer = WakeConsumer(
            self.connection,
            self.topology,
            subscriptions=[SUBSCRIPTION],
            on_wake=recorder,
            prefetch=4,
            sticky_worker_id=sticky_worker_id,
        )
        self.consumers.append(consumer)
        return consumer

    async def close(self, admin_url: str) -> None:
        for consumer in self.consumers:
            await consumer.stop()
        await self.publisher.close()
        await self.connection.close()
        with contextlib.suppress(Exception):
            admin = await aio_pika.connect(admin_url)
            async with admin, admin.channel() as channel:
                name = self.topology.queue_name(
                    namespace="default", connection="default", queue="orders", kind=SUBSCRIPTION[3]
                )
                await channel.queue_delete(name)
                await channel.exchange_delete(self.topology.exchange_name)
                await channel.exchange_delete(self.topology.runs_exchange_name)


@pytest.fixture
async def side(all_nodes_up: RabbitCluster, request: pytest.FixtureRequest) -> AsyncIterator[Side]:
    made = Side(all_nodes_up.urls, name=f"{request.node.name}-{uuid4().hex[:6]}")
    await made.connection.start()
    assert made.connection.healthy
    try:
        yield made
    finally:
        running = [n.url for n in all_nodes_up.nodes if n.is_running()]
        await made.close(running[0])


async def _moved(connection: BrokerConnection, away_from: str) -> str:
    async def moved() -> bool:
        return connection.healthy and connection.node not in (None, away_from)

    await assert_eventually(moved, timeout=MOVE_TIMEOUT, message=f"moved away from {away_from}")
    node = connection.node
    assert node is not None
    return node


def _index_of(cluster: RabbitCluster, node_url: str | None) -> int:
    ports = [str(node.port) for node in cluster.nodes]
    return next(i for i, port in enumerate(ports) if node_url and f":{port}/" in node_url)


async def test_a_first_connect_tries_the_nodes_in_order(all_nodes_up: RabbitCluster) -> None:
    """C4: a node that refuses connections is skipped; the connection lands on the next one."""
    urls = ["amqp://guest:secret@127.0.0.1:1/", *all_nodes_up.urls]
    connection = BrokerConnection(urls, name=f"first-connect-{uuid4().hex[:6]}")
    try:
        await connection.start()
        assert connection.healthy
        assert _index_of(all_nodes_up, connection.node) == 0
        assert "secret" not in repr(connection.node)
    finally:
        await connection.close()


async def test_losing_the_node_moves_wakes_and_the_sticky_queue_to_the_next_node(
    all_nodes_up: RabbitCluster, side: Side
) -> None:
    """C1, C4, M5: shared quorum wake queues, consumers and the sticky queue work on the next
    node, and `on_reconnect` runs there (the worker re-polls Postgres)."""
    recorder = Recorder()
    worker_id = f"w-{uuid4().hex[:8]}"
    await side.consumer(recorder, sticky_worker_id=worker_id).start()  # shared and sticky queue
    assert await side.publisher.publish_wakes([make_wake("before")]) == 1
    await recorder.count(1)
    first = side.connection.node
    assert first is not None and _index_of(all_nodes_up, first) == 0

    all_nodes_up.stop(0)
    second = await _moved(side.connection, first)

    assert _index_of(all_nodes_up, second) == 1
    assert side.reconnects >= 1
    assert await _eventually_published(side.publisher, make_wake("after")) >= 1
    await recorder.count(2, timeout=MOVE_TIMEOUT)  # a quorum queue may be electing a leader
    # Until the sticky queue is declared on the new node, a sticky wake falls back to the
    # shared queue (S5); then one is routed to the sticky queue itself.
    bound = make_wake("sticky").model_copy(update={"sticky_worker_id": worker_id})
    async with asyncio.timeout(MOVE_TIMEOUT):
        while True:
            fallbacks = side.publisher.sticky_fallbacks
            assert await side.publisher.publish_wakes([bound]) == 1
            if side.publisher.sticky_fallbacks == fallbacks:
                break
            await asyncio.sleep(0.2)
    wakes = await recorder.count(3, timeout=MOVE_TIMEOUT)
    assert [w.task_id for w in wakes[:2]] == ["before", "after"]
    assert {w.task_id for w in wakes[2:]} == {"sticky"}


async def test_a_run_change_listener_binds_again_on_the_next_node(
    all_nodes_up: RabbitCluster, side: Side
) -> None:
    """C4: a waiting client's run changes reach it again after its node is lost (resync first)."""
    heard: list[str] = []
    resynced = asyncio.Event()
    listener = KeyListener(
        side.connection,
        side.topology,
        on_change=lambda key, _body: heard.append(key),
        on_resync=resynced.set,
    )
    changes = RunChangePublisher(side.connection, side.topology)
    try:
        assert await listener.bind("run-a")
        first = side.connection.node
        all_nodes_up.stop(_index_of(all_nodes_up, first))
        await _moved(side.connection, str(first))
        async with asyncio.timeout(MOVE_TIMEOUT):
            await resynced.wait()
            while "run-a" not in heard:
                changes.publish([("run-a", b"closed", None)])
                await asyncio.sleep(0.2)
    finally:
        await listener.close()
        await changes.close()


async def test_a_wake_queue_of_the_other_type_is_a_typed_error_naming_it(
    broker: BrokerHarness,
) -> None:
    """C1: RabbitMQ never converts a queue; the refusal says which queue and what to do."""
    await broker.declare_queue()  # classic, as `broker.topology` declares it
    quorum = Topology(prefix=broker.topology.prefix, queue_type="quorum")
    namespace, connection, queue, kind = SUBSCRIPTION
    channel = await broker.connection.channel()
    try:
        exchange = await quorum.declare_exchange(channel)
        with pytest.raises(QueueTypeMismatch) as raised:
            await quorum.declare_wake_queue(
                channel,
                exchange,
                namespace=namespace,
                connection=connection,
                queue=queue,
                kind=kind,
            )
    finally:
        with contextlib.suppress(Exception):
            await channel.close()
    assert raised.value.queue == broker.queue_name()
    assert "BURROW_AMQP_QUEUE_TYPE=classic" in str(raised.value)
    assert f"rabbitmqctl delete_queue {broker.queue_name()}" in str(raised.value)
    assert broker.connection.healthy  # a channel error: the connection stays up

    quorum_side = WakeConsumer(
        broker.connection, quorum, subscriptions=[SUBSCRIPTION], on_wake=Recorder(), prefetch=4
    )
    broker.consumers.append(quorum_side)
    with capture_logs() as logs:
        await quorum_side.start()
    assert not quorum_side.is_consuming
    errors = [e for e in logs if e["event"] == "wake_queue_mismatched"]
    assert len(errors) == 1 and errors[0]["log_level"] == "error"
    assert broker.queue_name() in errors[0]["error"]
    assert broker.connection.healthy  # polling only, but publishing and the connection go on


async def _eventually_published(publisher: WakePublisher, wake: Wake) -> int:
    # Right after a move the robust channel may still be restoring: a publish can fail once.
    async with asyncio.timeout(MOVE_TIMEOUT):
        while True:
            published = await publisher.publish_wakes([wake])
            if published:
                return published
            await asyncio.sleep(0.1)
