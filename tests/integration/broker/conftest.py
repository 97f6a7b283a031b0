"""Real RabbitMQ fixtures: a name prefix per test, cleaned up afterwards; a TCP proxy for faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

import aio_pika
import pytest
from aio_pika.abc import AbstractConnection

from burrow.broker import (
    BrokerConnection,
    Subscription,
    TaskKind,
    Topology,
    Wake,
    WakeConsumer,
    WakeDisposition,
    WakePublisher,
)

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
SUBSCRIPTION: Subscription = ("default", "default", "orders", TaskKind.WORKFLOW)
RECONNECT_INTERVAL_SECONDS = 0.5


def make_wake(task_id: str | None = None, subscription: Subscription = SUBSCRIPTION) -> Wake:
    namespace, connection, queue, kind = subscription
    return Wake(namespace=namespace, connection=connection, queue=queue, kind=kind, task_id=task_id)


@dataclass
class BrokerHarness:
    """One test's topology, connection and the consumers/publishers to stop afterwards."""

    url: str
    name: str
    topology: Topology
    connection: BrokerConnection
    admin: AbstractConnection
    subscriptions: set[Subscription] = field(default_factory=set)
    consumers: list[WakeConsumer] = field(default_factory=list)
    publishers: list[WakePublisher] = field(default_factory=list)
    connections: list[BrokerConnection] = field(default_factory=list)

    def queue_name(self, subscription: Subscription = SUBSCRIPTION) -> str:
        namespace, connection, queue, kind = subscription
        return self.topology.queue_name(
            namespace=namespace, connection=connection, queue=queue, kind=kind
        )

    def consumer(
        self,
        on_wake: Callable[[Wake], Awaitable[WakeDisposition]],
        *,
        prefetch: int = 10,
        subscriptions: Sequence[Subscription] = (SUBSCRIPTION,),
        connection: BrokerConnection | None = None,
    ) -> WakeConsumer:
        self.subscriptions.update(subscriptions)
        consumer = WakeConsumer(
            connection or self.connection,
            self.topology,
            subscriptions=subscriptions,
            on_wake=on_wake,
            prefetch=prefetch,
        )
        self.consumers.append(consumer)
        return consumer

    def publisher(
        self, *, copies: int = 1, connection: BrokerConnection | None = None
    ) -> WakePublisher:
        publisher = WakePublisher(connection or self.connection, self.topology, copies=copies)
        self.publishers.append(publisher)
        return publisher

    def extra_connection(self, url: str, *, suffix: str) -> BrokerConnection:
        connection = BrokerConnection(
            url, name=f"{self.name}-{suffix}", reconnect_interval_seconds=RECONNECT_INTERVAL_SECONDS
        )
        self.connections.append(connection)
        return connection

    async def queue_depth(self, subscription: Subscription = SUBSCRIPTION) -> int:
        """Ready (not unacked) messages, by a passive declare on a throwaway channel."""
        async with self.admin.channel() as channel:
            queue = await channel.declare_queue(self.queue_name(subscription), passive=True)
            count = queue.declaration_result.message_count
            assert count is not None
            return count

    async def declare_queue(self, subscription: Subscription = SUBSCRIPTION) -> None:
        """Declare and bind a wake queue without consuming it."""
        self.subscriptions.add(subscription)
        namespace, connection, queue, kind = subscription
        async with self.admin.channel() as channel:
            exchange = await self.topology.declare_exchange(channel)
            await self.topology.declare_wake_queue(
                channel,
                exchange,
                namespace=namespace,
                connection=connection,
                queue=queue,
                kind=kind,
            )

    async def publish_raw(self, body: bytes, subscription: Subscription = SUBSCRIPTION) -> None:
        async with self.admin.channel() as channel:
            exchange = await self.topology.declare_exchange(channel)
            await exchange.publish(
                aio_pika.Message(body), routing_key=self.queue_name(subscription)
            )

    async def close(self) -> None:
        for consumer in self.consumers:
            await consumer.stop()  # before deleting queues, or the robust channel re-declares them
        for publisher in self.publishers:
            await publisher.close()
        for connection in (*self.connections, self.connection):
            await connection.close()
        async with self.admin.channel() as channel:  # deleting a missing name is a no-op
            for subscription in self.subscriptions:
                await channel.queue_delete(self.queue_name(subscription))
            await channel.exchange_delete(self.topology.exchange_name)


@pytest.fixture
def amqp_url() -> str:
    return os.environ.get("BURROW_TEST_AMQP_URL", DEFAULT_AMQP_URL)


@pytest.fixture
async def broker(request: pytest.FixtureRequest, amqp_url: str) -> AsyncIterator[BrokerHarness]:
    """A started connection named after the test, and a topology prefix of the test's own."""
    prefix = f"test-{uuid4().hex[:8]}"
    name = f"{request.node.nodeid}-{prefix}"
    connection = BrokerConnection(
        amqp_url, name=name, reconnect_interval_seconds=RECONNECT_INTERVAL_SECONDS
    )
    await connection.start()
    assert connection.healthy, f"RabbitMQ is not reachable at {amqp_url}"
    admin = await aio_pika.connect(amqp_url, client_properties={"connection_name": f"{name}-admin"})
    harness = BrokerHarness(amqp_url, name, Topology(prefix=prefix), connection, admin)
    try:
        yield harness
    finally:
        try:
            await harness.close()
        finally:
            await admin.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class TcpProxy:
    """Forwards 127.0.0.1:port to the broker; start it late to simulate a broker coming up."""

    def __init__(self, target_host: str, target_port: int, *, port: int) -> None:
        self.port = port
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.append(up_writer)
        await asyncio.gather(
            _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def rabbitmqctl(*args: str) -> str:
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed")
    process = await asyncio.create_subprocess_exec(
        "rabbitmqctl",
        *args,
        "--quiet",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def close_connections_named(name: str) -> int:
    """Force-close (CONNECTION_FORCED) only the connections with this client-provided name.

    `close_all_connections` would also break other suites running against the same broker.
    """
    rows = json.loads(
        await rabbitmqctl(
            "list_connections", "peer_port", "client_properties", "--formatter", "json"
        )
    )
    ports = {
        str(row["peer_port"])
        for row in rows
        if ["connection_name", "longstr", name] in row["client_properties"]
    }
    listing = await rabbitmqctl("list_connections", "pid", "peer_port", "--no-table-headers")
    pids = [
        line.split("\t")[0]
        for line in listing.splitlines()
        if "\t" in line and line.split("\t")[1].strip() in ports
    ]
    for pid in pids:
        await rabbitmqctl("close_connection", pid, "test")
    return len(pids)
