"""Held polls woken by RabbitMQ: work another process made ready reaches them at once (M5, C1).

Burrow publishes a wake to the wake exchange, routed by the shared wake queue's name, whenever a
commit makes a task ready, whichever process commits it (a Burrow client, worker or another
server). The server taps those wakes without taking them from Burrow's own workers: it binds a
private queue of its own (exclusive, auto-deleted, server-named) to the same routing keys, and
a direct exchange hands every bound queue its own copy. A routing key is bound the first time a
poll waits on that queue. Run changes (a query answered, an update completed) arrive the same
way, through a run-change listener bound to the keys callers wait on.

Wakes stay hints: with the broker down, or a wake lost, a held poll still finds the work at its
next Postgres re-probe; after a reconnect every waiter re-checks (wakes may have been missed).
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from aio_pika.abc import (
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
)

from burrow.broker.errors import BrokerError, translate_amqp_errors
from burrow.broker.messages import TaskKind, Wake
from burrow.server.wakes import PollWakes, change_key
from burrow.wakes import WakeLink

log = structlog.get_logger("burrow.server")
SETUP_TIMEOUT_SECONDS = 2.0


class WakeTap:
    """A private copy of the wakes of the queues this server's polls wait on."""

    def __init__(self, link: WakeLink, wakes: PollWakes) -> None:
        self._link = link
        self._wakes = wakes
        self._keys: set[str] = set()
        self._bound: set[str] = set()
        self._channel: AbstractRobustChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        link.connection.on_reconnect(self._reconnected)
        self._changes = link.listen_for_run_changes(
            on_change=self._changed, on_resync=wakes.wake_all
        )

    async def watch_queue(self, *, namespace: str, connection: str, queue: str, kind: str) -> None:
        """Hear the wakes of one (namespace, connection, queue, kind) from now on.

        Never fails: without the broker the poll relies on its Postgres re-probe.
        """
        name = self._link.topology.queue_name(
            namespace=namespace, connection=connection, queue=queue, kind=TaskKind(kind)
        )
        self._keys.add(name)
        if name in self._bound and self._queue is not None and self._link.healthy:
            return
        try:
            bound_queue, exchange = await self._set_up()
            if name not in self._bound:
                with translate_amqp_errors():
                    await bound_queue.bind(
                        exchange, routing_key=name, timeout=SETUP_TIMEOUT_SECONDS
                    )
                self._bound.add(name)
        except Exception as exc:  # BrokerError or a surprise: the re-probe covers it
            log.debug("wake_tap_bind_failed", routing_key=name, error=str(exc))

    async def watch_change(self, key: str) -> None:
        """Hear when `key` (a query task id, a run id) changes; never fails."""
        await self._changes.bind(key)

    def unwatch_change(self, key: str) -> None:
        """Stop hearing changes of `key`."""
        self._changes.unbind(key)

    async def _set_up(self) -> tuple[AbstractQueue, AbstractExchange]:
        async with self._lock:
            if self._closed:
                raise BrokerError("wake tap is closed")
            queue, exchange = self._queue, self._exchange
            if queue is not None and exchange is not None and self._link.healthy:
                return queue, exchange
            topology = self._link.topology
            with translate_amqp_errors():
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    channel = await self._link.connection.channel(confirms=False)
                    exchange = await topology.declare_exchange(channel)
                    # Not restored by the robust channel: after a reconnect this declares a new
                    # queue and binds every key again (see Topology.declare_sticky_queue).
                    queue = await channel.declare_queue(
                        "",
                        durable=False,
                        exclusive=True,
                        auto_delete=True,
                        arguments=topology.sticky_queue_arguments(),
                        robust=False,
                    )
                    for key in sorted(self._keys):
                        await queue.bind(exchange, routing_key=key)
                    await queue.consume(self._deliver, no_ack=True, robust=False)
            old, self._channel = self._channel, channel
            self._queue, self._exchange = queue, exchange
            self._bound = set(self._keys)
            if old is not None and not old.is_closed:
                with contextlib.suppress(Exception):
                    await old.close()
            return queue, exchange

    def _changed(self, key: str, *_body: object) -> None:
        """A run change wakes its waiters; they re-read Postgres, whatever the body says."""
        self._wakes.wake(change_key(key))

    async def _deliver(self, message: AbstractIncomingMessage) -> None:
        try:
            wake = Wake.decode(message.body)
        except BrokerError as exc:  # wakes are fungible: a malformed one is dropped
            log.debug("wake_tap_malformed", error=str(exc))
            return
        self._wakes.wake((wake.kind.value, wake.namespace, wake.queue))

    async def _reconnected(self) -> None:
        """The old queue died with the old connection: declare a new one, then re-check."""
        self._queue = None
        if self._closed:
            return
        if self._keys:
            try:
                await self._set_up()
            except Exception as exc:
                log.warning("wake_tap_setup_failed", error=str(exc))
        self._wakes.wake_all()

    async def close(self) -> None:
        """Close the channel; the broker deletes the queue (idempotent)."""
        self._closed = True
        channel, self._channel, self._queue = self._channel, None, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()
