"""Run changes: a client waiting on a result, an update or a query answer hears of it at once.

Whoever commits such a change publishes it once, after commit, to the `<prefix>.run-changes`
topic exchange, routed by `<starter>.<key>` (`change_routing_key`): the key is what is waited on
(a run id, or a query task id), the starter the queue of the client that started the run
(`runs.notify_queue`; `-` for none). A waiting client consumes one exclusive, auto-deleted,
server-named queue of its own, bound to `*.<key>` for each key it waits on, and to `<itself>.*`
once: so it hears the runs it started without binding their keys (a start-then-result costs the
broker no binding to store and drop), and a change reaches only the clients that wait for it or
started its run.

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
from collections.abc import Awaitable, Callable, Iterable

import aio_pika
import aiormq
import structlog
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
)

from burrow.broker.connection import BrokerConnection
from burrow.broker.errors import BrokerError, translate_amqp_errors
from burrow.broker.topology import QueueArguments, Topology

log = structlog.get_logger("burrow.broker")

SETUP_TIMEOUT_SECONDS = 5.0
BIND_SECONDS_PER_KEY = 0.005
"""Added to a batch of binds' timeout per key: the broker stores each binding."""
_PROPERTIES = aiormq.spec.Basic.Properties(
    content_type="application/json", delivery_mode=int(aio_pika.DeliveryMode.NOT_PERSISTENT)
)


NO_STARTER = "-"


def _word(queue_name: str) -> str:
    """A queue name as one topic word (server-named queues contain dots)."""
    return queue_name.replace(".", "_")


def change_routing_key(key: str, notify_queue: str | None) -> str:
    """`<starter>.<key>`: heard by the starter's queue (`<starter>.*`) and by binds of `*.<key>`."""
    return f"{NO_STARTER if notify_queue is None else _word(notify_queue)}.{key}"


def _key_binding(key: str) -> str:
    return f"*.{key}"


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

    def publish(self, changes: Iterable[tuple[str, bytes, str | None]]) -> None:
        """Publish (key, body, notify queue) changes; returns at once (past the commit).

        Each is published once: the starter's queue (the notify queue) and every queue bound to
        its key hear it (`change_routing_key`).
        """
        batch = list(changes)
        if not batch or self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._publish(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, batch: list[tuple[str, bytes, str | None]]) -> None:
        try:
            channel = await self._ensure_channel()
            with translate_amqp_errors():
                underlay = await channel.get_underlay_channel()
                for key, body, notify_queue in batch:
                    await underlay.basic_publish(
                        body,
                        exchange=self._topology.runs_exchange_name,
                        routing_key=change_routing_key(key, notify_queue),
                        properties=_PROPERTIES,
                    )
        except Exception as exc:  # a hint is never worth raising
            self.failures += len(batch)
            level = log.warning if self._connection.healthy else log.debug
            level("run_change_publish_failed", keys=[key for key, _, _ in batch], error=str(exc))

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


class KeyListener:
    """A private queue bound to the keys its owner waits on.

    A client's run changes, or the wakes a server taps (`burrow.server.broker_wakes`).

    Args:
        connection: The owner's broker connection.
        topology: Names and declarations.
        on_change: Called with the routing key and body of every message that arrives.
        on_resync: Called after a (re)connect: messages may have been missed meanwhile.
        declare_exchange: The exchange the keys are bound on (default: the run-change one).
        queue_arguments: Arguments of the private queue (limits, TTL).
    """

    def __init__(
        self,
        connection: BrokerConnection,
        topology: Topology,
        *,
        on_change: Callable[[str, bytes], None],
        on_resync: Callable[[], None],
        declare_exchange: Callable[[AbstractChannel], Awaitable[AbstractExchange]] | None = None,
        queue_arguments: QueueArguments | None = None,
    ) -> None:
        self._connection = connection
        self._topology = topology
        self._declare_exchange = declare_exchange or topology.declare_runs_exchange
        # Run changes are routed `<starter>.<key>` (a topic exchange); another exchange by key.
        self._topic = declare_exchange is None
        self._queue_arguments = queue_arguments
        self._on_change = on_change
        self._on_resync = on_resync
        self._keys: set[str] = set()
        self._direct: set[str] = set()
        """Keys heard without a binding of their own (`attach`): through `<itself>.*`."""
        self._channel: AbstractRobustChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._lock = asyncio.Lock()
        self._batch: dict[str, asyncio.Future[bool]] = {}
        """Keys waiting to be bound in the next batch, each with its caller's answer."""
        self._binder: asyncio.Task[None] | None = None
        self._to_unbind: dict[str, None] = {}
        """Keys to unbind, in order (a bind of one drops it: its binding stays)."""
        self._unbinding: dict[str, asyncio.Task[None]] = {}
        self._unbinder: asyncio.Task[None] | None = None
        self._closed = False
        connection.on_reconnect(self._reconnected)

    @property
    def ready(self) -> bool:
        """Whether changes are flowing (else the owner relies on its fallback poll)."""
        return self._queue is not None and self._connection.healthy

    @property
    def queue_name(self) -> str | None:
        """The queue changes reach now, when ready (run changes only).

        None before this listener's first bind declared it: a client that never waits names no
        queue for its runs, so their changes are delivered to nobody.
        """
        if self._topic and self.ready and self._queue is not None:
            return self._queue.name
        return None

    async def open(self) -> bool:
        """Declare the queue now if there is none; False when the broker cannot be used now."""
        try:
            await self._set_up()
        except Exception as exc:  # the next bind tries again
            log.debug("run_change_listener_setup_failed", error=str(exc))
            return False
        return True

    def attach(self, key: str, queue_name: str) -> bool:
        """Hear `key` with no binding: its run was started naming `queue_name` (`<starter>.*`).

        True if that is still this listener's queue; else (a reconnect made a new one) the
        caller binds the key. After a reconnect an attached key is bound like the others.
        """
        if self._queue is None or self._queue.name != queue_name or not self.ready:
            return False
        self._keys.add(key)
        self._direct.add(key)
        return True

    async def bind(self, key: str) -> bool:
        """Hear changes of `key` from now on; False when the broker cannot be used now.

        Binds asked for meanwhile go out together, in one round trip (`_bind_keys`).
        """
        self._direct.discard(key)  # bound from now on: an unbind must reach the broker
        self._to_unbind.pop(key, None)  # not sent yet: the binding stays
        in_flight = self._unbinding.get(key)
        if in_flight is not None:
            await asyncio.gather(in_flight, return_exceptions=True)  # keep bind after unbind
        self._keys.add(key)
        loop = asyncio.get_running_loop()
        bound = self._batch.get(key)
        if bound is None:
            bound = self._batch[key] = loop.create_future()
        if self._binder is None:
            self._binder = loop.create_task(self._bind_batches())
        return await asyncio.shield(bound)

    async def _bind_batches(self) -> None:
        try:
            while self._batch and not self._closed:
                batch, self._batch = self._batch, {}
                ok = await self._bind_batch(list(batch))
                for bound in batch.values():
                    if not bound.done():
                        bound.set_result(ok)
        finally:
            self._binder = None
            self._fail_pending_binds()

    def _fail_pending_binds(self) -> None:
        batch, self._batch = self._batch, {}
        for bound in batch.values():
            if not bound.done():
                bound.set_result(False)

    async def _bind_batch(self, keys: list[str]) -> bool:
        try:
            queue, exchange, fresh = await self._set_up()
            if not fresh:  # a fresh queue is bound to every key already
                await self._bind_keys(queue, exchange, keys)
        except Exception as exc:  # BrokerError or a surprise: the fallback poll covers it
            log.debug("run_change_bind_failed", keys=len(keys), error=str(exc))
            self._queue = None
            return False
        return True

    async def _bind_keys(
        self, queue: AbstractQueue, exchange: AbstractExchange, keys: list[str]
    ) -> None:
        """Bind keys in one round trip: no-wait binds, then one awaited bind.

        The broker handles a channel's methods in order, so the last bind's answer means every
        binding is in place. One awaited bind per key would queue thousands of round trips on
        the channel, and an RPC that times out waiting its turn closes the channel.
        """
        if not keys:
            return
        with translate_amqp_errors():
            async with asyncio.timeout(SETUP_TIMEOUT_SECONDS + len(keys) * BIND_SECONDS_PER_KEY):
                underlay = await queue.channel.get_underlay_channel()
                bindings = [self._binding(key) for key in keys]
                for binding in bindings[:-1]:
                    await underlay.queue_bind(
                        queue.name, exchange.name, routing_key=binding, nowait=True
                    )
                await underlay.queue_bind(queue.name, exchange.name, routing_key=bindings[-1])

    def _binding(self, key: str) -> str:
        return _key_binding(key) if self._topic else key

    def unbind(self, key: str) -> None:
        """Stop hearing changes of `key` (in the background, one unbind at a time)."""
        self._keys.discard(key)
        if key in self._direct:  # never bound: nothing to undo
            self._direct.discard(key)
            return
        if self._queue is None or self._exchange is None or self._closed:
            return
        self._to_unbind[key] = None
        if self._unbinder is None:
            self._unbinder = asyncio.get_running_loop().create_task(self._unbind_all())

    async def _unbind_all(self) -> None:
        """Unbind queued keys one by one (AMQP has no no-wait unbind).

        One at a time, so no unbind waits its turn on the channel behind thousands of others
        and times out (which would close the channel).
        """
        try:
            while self._to_unbind and not self._closed:
                key = next(iter(self._to_unbind))
                del self._to_unbind[key]
                queue, exchange = self._queue, self._exchange
                if queue is None or exchange is None:
                    self._to_unbind.clear()  # a new queue is bound to the awaited keys only
                    break
                task = asyncio.get_running_loop().create_task(self._unbind(queue, exchange, key))
                self._unbinding[key] = task
                try:
                    await asyncio.gather(task, return_exceptions=True)
                finally:
                    if self._unbinding.get(key) is task:
                        del self._unbinding[key]
        finally:
            self._unbinder = None

    async def _unbind(self, queue: AbstractQueue, exchange: AbstractExchange, key: str) -> None:
        with contextlib.suppress(Exception):  # a stale binding only costs a stray message
            await queue.unbind(
                exchange, routing_key=self._binding(key), timeout=SETUP_TIMEOUT_SECONDS
            )

    async def _set_up(self) -> tuple[AbstractQueue, AbstractExchange, bool]:
        """The queue and exchange, and whether the queue was just declared (and bound)."""
        async with self._lock:
            if self._closed:
                raise BrokerError("key listener is closed")
            queue, exchange = self._queue, self._exchange
            if queue is not None and exchange is not None and self._connection.healthy:
                return queue, exchange, False
            with translate_amqp_errors():
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    channel = await self._connection.channel(confirms=False)
                    exchange = await self._declare_exchange(channel)
                    queue = await channel.declare_queue(
                        "",
                        durable=False,
                        exclusive=True,
                        auto_delete=True,
                        arguments=self._queue_arguments,
                        robust=False,
                    )
            self._to_unbind.clear()  # the new queue is bound to the awaited keys only
            self._direct.clear()  # attached keys too: changes sent to the old queue are lost
            await self._bind_keys(queue, exchange, list(self._keys))  # keys added meanwhile
            if self._topic:  # the runs this client starts from now on name this queue
                with translate_amqp_errors():
                    async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                        await queue.bind(exchange, routing_key=f"{_word(queue.name)}.*")
            with translate_amqp_errors():  # come in later batches
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    await queue.consume(self._deliver, no_ack=True, robust=False)
            old, self._channel = self._channel, channel
            self._queue, self._exchange = queue, exchange
            if old is not None and not old.is_closed:
                with contextlib.suppress(Exception):
                    await old.close()
            return queue, exchange, True

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        key = message.routing_key
        if key and self._topic:
            key = key.partition(".")[2]  # `<starter>.<key>`
        if key:
            self._on_change(key, message.body)

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
        self._fail_pending_binds()
        # Pending unbinds end with the channel (a cancelled RPC would log a channel error).
        channel, self._channel, self._queue = self._channel, None, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()
