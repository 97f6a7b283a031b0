"""Per-worker sticky wake queues on a real RabbitMQ (C1, S3, S5): routing, fallback, recovery."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from structlog.testing import capture_logs

from burrow.broker import BrokerConnection, Subscription, Wake, WakeConsumer, WakeDisposition
from burrow.broker.messages import TaskKind
from burrow.store.ready import ReadyTask
from burrow.testing import assert_eventually
from tests.integration.broker.conftest import (
    SUBSCRIPTION,
    BrokerHarness,
    close_connections_named,
    free_port,
    make_wake,
    rabbitmqctl,
)

OWNER = "worker-a"
OTHER = "worker-b"


def sticky_wake(worker_id: str, task_id: str | None = None) -> Wake:
    return make_wake(task_id).model_copy(update={"sticky_worker_id": worker_id})


class Inbox:
    """An on_wake that records what one consumer received."""

    def __init__(self) -> None:
        self.wakes: list[Wake] = []

    async def __call__(self, wake: Wake) -> WakeDisposition:
        self.wakes.append(wake)
        return WakeDisposition.DONE

    async def count(self, n: int, *, timeout: float = 10.0) -> list[Wake]:
        async def enough() -> bool:
            return len(self.wakes) >= n

        await assert_eventually(enough, timeout=timeout, message=f"{n} wakes received")
        return self.wakes


async def consume(
    broker: BrokerHarness,
    inbox: Inbox,
    *,
    sticky_worker_id: str | None = None,
    subscriptions: tuple[Subscription, ...] = (SUBSCRIPTION,),
    connection: BrokerConnection | None = None,
) -> WakeConsumer:
    """A started consumer the harness stops (and whose shared queues it deletes) afterwards."""
    broker.subscriptions.update(subscriptions)
    consumer = WakeConsumer(
        connection or broker.connection,
        broker.topology,
        subscriptions=subscriptions,
        on_wake=inbox,
        prefetch=10,
        sticky_worker_id=sticky_worker_id,
    )
    broker.consumers.append(consumer)
    await consumer.start()
    assert consumer.is_consuming
    return consumer


async def sticky_consumers(broker: BrokerHarness, worker_id: str) -> int | None:
    """Consumers on a worker's sticky queue (None: no such queue), as the broker lists them.

    An exclusive queue refuses passive declarations from other connections, so ask rabbitmqctl.
    """
    rows = json.loads(await rabbitmqctl("list_queues", "name", "consumers", "--formatter", "json"))
    name = broker.topology.sticky_queue_name(worker_id)
    return next((int(row["consumers"]) for row in rows if row["name"] == name), None)


async def wait_sticky_consumed(broker: BrokerHarness, worker_id: str) -> None:
    async def consumed() -> bool:
        return await sticky_consumers(broker, worker_id) == 1

    await assert_eventually(consumed, timeout=20, interval=0.2, message="sticky queue consumed")


async def test_sticky_wakes_reach_only_the_owner(broker: BrokerHarness) -> None:
    """C1, S3: a wake for a bound workflow task goes to its worker's queue, not the shared one."""
    owner, other = Inbox(), Inbox()
    second = broker.extra_connection(broker.url, suffix="other")
    await second.start()
    await consume(broker, owner, sticky_worker_id=OWNER)
    await consume(broker, other, connection=second)  # the shared queue only
    publisher = broker.publisher()
    sent = [sticky_wake(OWNER, f"t-{i}") for i in range(10)]

    assert await publisher.publish_wakes(sent) == 10

    assert sorted(await owner.count(10), key=lambda w: w.task_id or "") == sorted(
        sent, key=lambda w: w.task_id or ""
    )
    assert await broker.queue_depth() == 0
    assert other.wakes == []
    assert publisher.sticky_fallbacks == 0


async def test_sticky_wake_for_a_worker_without_a_queue_falls_back_to_the_shared_queue(
    broker: BrokerHarness,
) -> None:
    """S5, broker invariant 4: the owner is gone (mandatory publish returned), so any worker may
    claim, cold; the wake names the owner, so claims need not wait for its heartbeat to go stale."""
    shared = Inbox()
    await consume(broker, shared)
    publisher = broker.publisher()

    with capture_logs() as logs:
        assert await publisher.publish_wakes([sticky_wake("gone", "t-1")]) == 1

    # No sticky target any more; the owner whose queue is gone is named.
    assert await shared.count(1) == [
        make_wake("t-1").model_copy(update={"unroutable_owner": "gone"})
    ]
    assert publisher.sticky_fallbacks == 1 and publisher.failures == 0
    [event] = [e for e in logs if e["event"] == "sticky_wake_fallback"]
    assert event["worker_id"] == "gone"


async def test_publish_ready_routes_only_workflow_notices_to_the_bound_worker(
    broker: BrokerHarness,
) -> None:
    """S4, S5: a ready notice's binding picks the queue; activity wakes stay on shared queues."""
    activity: Subscription = (*SUBSCRIPTION[:3], TaskKind.ACTIVITY)
    owner, shared = Inbox(), Inbox()
    second = broker.extra_connection(broker.url, suffix="shared")
    await second.start()
    await consume(broker, owner, sticky_worker_id=OWNER, subscriptions=())
    await consume(broker, shared, subscriptions=(SUBSCRIPTION, activity), connection=second)
    namespace, connection, queue, _ = SUBSCRIPTION
    publisher = broker.publisher()

    publisher.publish_ready(
        [
            ReadyTask(namespace, connection, queue, "workflow", "wf", sticky_worker_id=OWNER),
            ReadyTask(namespace, connection, queue, "activity", "act", sticky_worker_id=OWNER),
            ReadyTask(namespace, connection, queue, "workflow", "free"),
        ]
    )
    await publisher.flush(5.0)

    # Coalescing is per routing key: the sticky wake does not absorb the shared workflow wake.
    assert await owner.count(1) == [sticky_wake(OWNER)]
    received = await shared.count(2)
    assert sorted((w.kind, w.sticky_worker_id) for w in received) == [
        (TaskKind.ACTIVITY, None),
        (TaskKind.WORKFLOW, None),
    ]
    await asyncio.sleep(0.2)
    assert len(owner.wakes) == 1 and len(shared.wakes) == 2


async def test_sticky_wakes_for_different_workers_do_not_coalesce(broker: BrokerHarness) -> None:
    """C1: announce() keeps one wake in flight per queue, and each worker has its own queue."""
    first, second_inbox = Inbox(), Inbox()
    second = broker.extra_connection(broker.url, suffix="b")
    await second.start()
    await consume(broker, first, sticky_worker_id=OWNER, subscriptions=())
    await consume(broker, second_inbox, sticky_worker_id=OTHER, subscriptions=(), connection=second)
    publisher = broker.publisher()

    publisher.announce([sticky_wake(OWNER, "a"), sticky_wake(OTHER, "b")])
    await publisher.flush(5.0)

    assert await first.count(1) == [sticky_wake(OWNER)]
    assert await second_inbox.count(1) == [sticky_wake(OTHER)]
    assert publisher.sticky_fallbacks == 0


async def test_sticky_queue_deleted_under_a_live_worker_is_declared_again(
    broker: BrokerHarness,
) -> None:
    """C1, S3: the broker cancels the consumer of a deleted queue; the worker consumes it again."""
    owner = Inbox()
    await consume(broker, owner, sticky_worker_id=OWNER, subscriptions=())
    await wait_sticky_consumed(broker, OWNER)

    with capture_logs() as logs:
        # Exclusive: no other AMQP connection may delete it, an operator can.
        await rabbitmqctl("delete_queue", broker.topology.sticky_queue_name(OWNER))
        await wait_sticky_consumed(broker, OWNER)

    assert any(e["event"] == "sticky_consumer_cancelled" for e in logs)
    publisher = broker.publisher()
    assert await publisher.publish_wakes([sticky_wake(OWNER, "after")]) == 1
    assert await owner.count(1) == [sticky_wake(OWNER, "after")]
    assert publisher.sticky_fallbacks == 0


async def test_sticky_queue_is_consumed_again_after_the_connection_is_closed(
    broker: BrokerHarness,
) -> None:
    """C1, S3, S5: the queue dies with the connection (wakes fall back), and returns with it."""
    connection = broker.extra_connection(broker.url, suffix="owner")
    await connection.start()
    owner = Inbox()
    consumer = await consume(
        broker, owner, sticky_worker_id=OWNER, subscriptions=(), connection=connection
    )
    publisher = broker.publisher()  # on the harness's own connection, which stays up
    assert await publisher.publish_wakes([sticky_wake(OWNER, "before")]) == 1
    await owner.count(1)

    assert await close_connections_named(connection.name) == 1

    async def reconnected() -> bool:
        return connection.healthy and await sticky_consumers(broker, OWNER) == 1

    await assert_eventually(reconnected, timeout=20, interval=0.2, message="sticky queue back")
    assert consumer.is_consuming
    assert await publisher.publish_wakes([sticky_wake(OWNER, "after")]) == 1
    assert [w.task_id for w in await owner.count(2)] == ["before", "after"]
    assert publisher.sticky_fallbacks == 0


class PartitionProxy:
    """Forwards to the broker; `partition()` drops only the client side of each connection.

    The broker keeps the old connection (and its exclusive queues) until `heal_broker_side()`,
    as after a network fault the broker has not noticed yet.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.port = free_port()
        self._target = target
        self._server: asyncio.Server | None = None
        self._live: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._orphans: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def partition(self) -> None:
        for client, upstream in self._live:
            self._orphans.append(upstream)
            client.transport.abort()
        self._live.clear()

    def heal_broker_side(self) -> None:
        for upstream in self._orphans:
            upstream.transport.abort()  # the broker sees the old connection end
        self._orphans.clear()

    async def close(self) -> None:
        self.partition()
        self.heal_broker_side()
        if self._server is not None:
            self._server.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        pair = (writer, up_writer)
        self._live.append(pair)
        await asyncio.gather(
            self._pipe(reader, up_writer, pair),
            self._pipe(up_reader, writer, pair),
            return_exceptions=True,
        )

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while data := await reader.read(65536):
                if pair in self._live:  # after the partition the broker's bytes go nowhere
                    writer.write(data)
                    await writer.drain()
        finally:
            if pair in self._live:
                writer.close()


@pytest.fixture
async def partition_proxy(broker: BrokerHarness) -> AsyncIterator[PartitionProxy]:
    target = urlsplit(broker.url)
    proxy = PartitionProxy((target.hostname or "127.0.0.1", target.port or 5672))
    await proxy.start()
    try:
        yield proxy
    finally:
        with contextlib.suppress(Exception):
            await proxy.close()


async def test_a_sticky_queue_held_by_the_old_connection_does_not_block_the_reconnect(
    broker: BrokerHarness, partition_proxy: PartitionProxy
) -> None:
    """C1, S3: shared wakes flow at once after a reconnect; the sticky queue follows later.

    Until the broker drops the worker's old connection, that connection still holds the
    exclusive queue and re-declaring it fails (RESOURCE_LOCKED); only the sticky queue waits.
    """
    connection = broker.extra_connection(
        f"amqp://guest:guest@127.0.0.1:{partition_proxy.port}/", suffix="partitioned"
    )
    await connection.start()
    owner = Inbox()
    consumer = await consume(broker, owner, sticky_worker_id=OWNER, connection=connection)
    try:
        await _partition_then_heal(broker, partition_proxy, connection, owner)
    finally:  # before the proxy goes, or the connection keeps retrying a closed port
        await consumer.stop()
        await connection.close()


async def _partition_then_heal(
    broker: BrokerHarness, proxy: PartitionProxy, connection: BrokerConnection, owner: Inbox
) -> None:
    publisher = broker.publisher()
    with capture_logs() as logs:
        proxy.partition()

        async def reconnected() -> bool:
            await publisher.publish_wakes([make_wake("shared")])
            return connection.healthy and any(w.task_id == "shared" for w in owner.wakes)

        await assert_eventually(reconnected, timeout=20, interval=0.3, message="shared wakes")

        async def sticky_locked() -> bool:
            return any("RESOURCE_LOCKED" in e.get("error", "") for e in logs)

        await assert_eventually(sticky_locked, timeout=5, message="the old connection holds it")

    proxy.heal_broker_side()
    await wait_sticky_consumed(broker, OWNER)
    before = len(owner.wakes)
    assert await publisher.publish_wakes([sticky_wake(OWNER, "sticky")]) == 1
    assert (await owner.count(before + 1))[-1] == sticky_wake(OWNER, "sticky")
    assert publisher.sticky_fallbacks == 0
