"""Run changes: a client waiting on a result, an update or a query answer hears of it at once.

Whoever commits such a change publishes it, after commit, to the `<prefix>.runs` direct exchange
with the waited-on key (a run id, or a query task id) as routing key. A waiting client consumes
one exclusive, auto-deleted, server-named queue of its own, bound to exactly the keys it waits on,
so a change reaches only the clients that wait for it.

Like wakes, these are hints: a lost one costs a waiter its fallback poll interval, never a wrong
answer. The body is the publisher's (a closed run's outcome, as committed, say); this module
only carries it. So publishes are not confirmed, and the
listener's queue is not restored by the robust channel (a fixed exclusive queue can lock a
reconnect, see `Topology.declare_sticky_queue`): after a reconnect the listener declares a new
queue, binds every key again and tells its owner to re-check (missed changes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

import aio_pika
import aiormq
import structlog
from aio_pika.abc import (
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
)

from burrow.broker.connection import BrokerConnection
from burrow.broker.errors import BrokerError, translate_amqp_errors
from burrow.broker.topology import Topology

log = structlog.get_logger("burrow.broker")

SETUP_TIMEOUT_SECONDS = 5.0
_PROPERTIES = aiormq.spec.Basic.Properties(
    content_type="application/json", delivery_mode=int(aio_pika.DeliveryMode.NOT_PERSISTENT)
)


class RunChangePublisher:
    """Publishes run changes in the background, unconfirmed; failures are logged and counted."""

    def __init__(self, connection: BrokerConnection, topology: Topology) -> None:
        self._connection = connection
        self._topology = topology
        self._channel: AbstractRobustChannel | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self.failures = 0
        """Run changes that could not be published."""

    def publish(self, changes: Iterable[tuple[str, bytes]]) -> None:
        """Publish (key, body) pairs; returns at once (the caller is past its commit)."""
        batch = list(changes)
        if not batch or self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._publish(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, batch: list[tuple[str, bytes]]) -> None:
        try:
            channel = await self._ensure_channel()
            with translate_amqp_errors():
                underlay = await channel.get_underlay_channel()
                for key, body in batch:
                    await underlay.basic_publish(
                        body,
                        exchange=self._topology.runs_exchange_name,
                        routing_key=key,
                        properties=_PROPERTIES,
                    )
        except Exception as exc:  # a hint is never worth raising
            self.failures += len(batch)
            level = log.warning if self._connection.healthy else log.debug
            level("run_change_publish_failed", keys=[key for key, _ in batch], error=str(exc))

    async def _ensure_channel(self) -> AbstractRobustChannel:
        async with self._lock:
            if self._closed:
                raise BrokerError("run change publisher is closed")
            if self._channel is not None and not self._channel.is_closed:
                return self._channel
            with translate_amqp_errors():
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    channel = await self._connection.channel(confirms=False)
                    await self._topology.declare_runs_exchange(channel)
            self._channel = channel
            return channel

    async def close(self) -> None:
        """Let in-flight publishes finish briefly, then close the channel (idempotent)."""
        self._closed = True
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()


class RunChangeListener:
    """A client's queue of run changes, bound to the keys it waits on.

    Args:
        connection: The client's broker connection.
        topology: Names and declarations.
        on_change: Called with the key and body of every change that arrives.
        on_resync: Called after a (re)connect: changes may have been missed meanwhile.
    """

    def __init__(
        self,
        connection: BrokerConnection,
        topology: Topology,
        *,
        on_change: Callable[[str, bytes], None],
        on_resync: Callable[[], None],
    ) -> None:
        self._connection = connection
        self._topology = topology
        self._on_change = on_change
        self._on_resync = on_resync
        self._keys: set[str] = set()
        self._channel: AbstractRobustChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._lock = asyncio.Lock()
        self._unbinding: dict[str, asyncio.Task[None]] = {}
        self._closed = False
        connection.on_reconnect(self._reconnected)

    @property
    def ready(self) -> bool:
        """Whether changes are flowing (else the owner relies on its fallback poll)."""
        return self._queue is not None and self._connection.healthy

    async def bind(self, key: str) -> bool:
        """Hear changes of `key` from now on; False when the broker cannot be used now."""
        pending = self._unbinding.pop(key, None)
        if pending is not None:
            await asyncio.gather(pending, return_exceptions=True)  # keep bind after unbind
        self._keys.add(key)
        try:
            queue, exchange = await self._set_up()
            with translate_amqp_errors():
                await queue.bind(exchange, routing_key=key, timeout=SETUP_TIMEOUT_SECONDS)
        except Exception as exc:  # BrokerError or a surprise: the fallback poll covers it
            log.debug("run_change_bind_failed", key=key, error=str(exc))
            self._queue = None
            return False
        return True

    def unbind(self, key: str) -> None:
        """Stop hearing changes of `key` (in the background)."""
        self._keys.discard(key)
        queue, exchange = self._queue, self._exchange
        if queue is None or exchange is None or self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._unbind(queue, exchange, key))
        self._unbinding[key] = task
        task.add_done_callback(lambda _: self._forget_unbind(key, task))

    def _forget_unbind(self, key: str, task: asyncio.Task[None]) -> None:
        if self._unbinding.get(key) is task:
            del self._unbinding[key]

    async def _unbind(self, queue: AbstractQueue, exchange: AbstractExchange, key: str) -> None:
        with contextlib.suppress(Exception):  # a stale binding only costs a stray message
            await queue.unbind(exchange, routing_key=key, timeout=SETUP_TIMEOUT_SECONDS)

    async def _set_up(self) -> tuple[AbstractQueue, AbstractExchange]:
        async with self._lock:
            if self._closed:
                raise BrokerError("run change listener is closed")
            queue, exchange = self._queue, self._exchange
            if queue is not None and exchange is not None and self._connection.healthy:
                return queue, exchange
            with translate_amqp_errors():
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    channel = await self._connection.channel(confirms=False)
                    exchange = await self._topology.declare_runs_exchange(channel)
                    queue = await channel.declare_queue(
                        "", durable=False, exclusive=True, auto_delete=True, robust=False
                    )
                    for key in list(self._keys):  # waiters may add keys meanwhile
                        await queue.bind(exchange, routing_key=key)
                    await queue.consume(self._deliver, no_ack=True, robust=False)
            old, self._channel = self._channel, channel
            self._queue, self._exchange = queue, exchange
            if old is not None and not old.is_closed:
                with contextlib.suppress(Exception):
                    await old.close()
            return queue, exchange

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        if message.routing_key:
            self._on_change(message.routing_key, message.body)

    async def _reconnected(self) -> None:
        """The old queue died with the old connection: declare a new one, then re-check."""
        self._queue = None
        if self._closed:
            return
        if self._keys:
            try:
                await self._set_up()
            except Exception as exc:
                log.warning("run_change_listener_setup_failed", error=str(exc))
        self._on_resync()

    async def close(self) -> None:
        """Close the channel; the broker deletes the queue (idempotent)."""
        self._closed = True
        # Pending unbinds end with the channel (a cancelled RPC would log a channel error).
        channel, self._channel, self._queue = self._channel, None, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()
