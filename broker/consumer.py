"""Consume wakes: one claim attempt per delivery, ack when it ends.

Prefetch is the slot count (broker invariant 3): the QoS is channel-wide (`global_=True`), so
the limit holds across all subscribed queues and a change applies to the running consumers at
once (RabbitMQ's per-consumer QoS only affects consumers started after the change). Wakes are
fungible (broker invariant 2): a malformed body or a failing `on_wake` settles the delivery
without requeueing it, and the consumer keeps going. The one requeue: a worker with no free
slot hands a wake back so another consumer can claim now; a redelivered wake is never handed
back again, so a wake makes at most two trips however full the workers are.

A sticky-capable worker also consumes its own sticky queue on the same channel (C1, S3), so
the one QoS covers it too. The robust channel does not restore that queue (see
`Topology.declare_sticky_queue`): the consumer consumes it again, with backoff, whenever the
broker took it away, i.e. after the channel reopened (reconnects included) and after the broker
cancelled its consumer (the queue was deleted under the live worker).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import aiormq
import structlog
from aio_pika.abc import (
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
)

from burrow.broker.connection import BrokerConnection
from burrow.broker.errors import BrokerError, TopologyMismatch, translate_amqp_errors
from burrow.broker.messages import TaskKind, Wake, WakeDisposition
from burrow.broker.topology import Topology

log = structlog.get_logger("burrow.broker")

Subscription = tuple[str, str, str, TaskKind]
"""(namespace, connection name, queue, task kind) of one shared wake queue."""

SETUP_TIMEOUT_SECONDS = 10.0
QOS_TIMEOUT_SECONDS = 2.0
MAX_SETUP_RETRY_SECONDS = 5.0
FIRST_STICKY_RETRY_SECONDS = 0.1


class WakeConsumer:
    """Consumes the wake queues of a worker's subscriptions on one robust channel.

    Args:
        connection: The process's broker connection.
        topology: Names and declarations.
        subscriptions: (namespace, connection name, queue, kind) of each wake queue to consume.
        on_wake: Makes one claim attempt for a wake; the delivery is acked when it returns, or
            requeued once if it returns `WakeDisposition.HAND_BACK`.
        prefetch: Unacked deliveries allowed at once across all subscriptions (free slots).
        sticky_worker_id: Also consume this worker's sticky queue (a sticky-capable worker).
    """

    def __init__(
        self,
        connection: BrokerConnection,
        topology: Topology,
        *,
        subscriptions: Sequence[Subscription],
        on_wake: Callable[[Wake], Awaitable[WakeDisposition]],
        prefetch: int,
        sticky_worker_id: str | None = None,
    ) -> None:
        _check_prefetch(prefetch)
        self._connection = connection
        self._topology = topology
        self._subscriptions = tuple(subscriptions)
        self._on_wake = on_wake
        self._prefetch = prefetch
        self._applied_prefetch = prefetch
        self._channel: AbstractRobustChannel | None = None
        self._consumers: list[tuple[AbstractQueue, str]] = []
        self._setup_task: asyncio.Task[None] | None = None
        self._started = False
        self._stopped = False
        self._sticky_worker_id = sticky_worker_id
        self._exchange: AbstractExchange | None = None
        self._sticky_tag: str | None = None
        self._sticky_queue: AbstractQueue | None = None
        self._sticky_lost = asyncio.Event()
        self._sticky_task: asyncio.Task[None] | None = None
        self._mismatch_logged = False
        connection.on_reconnect(self._reapply_prefetch)

    @property
    def is_consuming(self) -> bool:
        """Whether the consumers are registered (they survive reconnects)."""
        return self._channel is not None

    async def start(self) -> None:
        """Consume now if the broker is reachable, else as soon as it is; never raises."""
        if self._started or self._stopped:
            return
        self._started = True
        if self._connection.healthy:
            try:
                await self._set_up()
                return
            except TopologyMismatch as exc:
                log.error("wake_queue_mismatched", error=str(exc))
                self._mismatch_logged = True
            except BrokerError as exc:
                log.warning("wake_consumer_setup_failed", error=str(exc))
        self._setup_task = asyncio.create_task(self._set_up_later(), name="wake-consumer-setup")

    async def set_prefetch(self, n: int) -> None:
        """Change how many deliveries may be unacked at once (n >= 1).

        While the broker is unreachable the new value is kept and applied after the reconnect.

        Args:
            n: The new prefetch count, usually the number of free execution slots.
        """
        _check_prefetch(n)
        self._prefetch = n
        await self._apply_prefetch()

    async def stop(self) -> None:
        """Cancel the consumers and close the channel (idempotent)."""
        self._stopped = True
        tasks = [t for t in (self._setup_task, self._sticky_task) if t is not None]
        self._setup_task = self._sticky_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        channel, self._channel = self._channel, None
        consumers, self._consumers = self._consumers, []
        if self._sticky_queue is not None and self._sticky_tag is not None:
            consumers.append((self._sticky_queue, self._sticky_tag))
        if channel is None:
            return
        for queue, tag in consumers:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(QOS_TIMEOUT_SECONDS):
                    await queue.cancel(tag)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(QOS_TIMEOUT_SECONDS):  # a drain must never hang here
                await channel.close()
        log.debug("wake_consumer_stopped")

    async def _set_up(self) -> None:
        prefetch = self._prefetch
        channel = await self._connection.channel(
            prefetch=prefetch, confirms=False, global_qos=self._topology.global_qos
        )
        consumers: list[tuple[AbstractQueue, str]] = []
        try:
            with translate_amqp_errors():
                async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                    exchange = await self._topology.declare_exchange(channel)
                    for namespace, connection, queue, kind in self._subscriptions:
                        declared = await self._topology.declare_wake_queue(
                            channel,
                            exchange,
                            namespace=namespace,
                            connection=connection,
                            queue=queue,
                            kind=kind,
                        )
                        consumers.append((declared, await declared.consume(self._on_message)))
        except BaseException:
            with contextlib.suppress(Exception):
                await channel.close()
            raise
        self._channel, self._consumers, self._exchange = channel, consumers, exchange
        self._applied_prefetch = prefetch
        log.info("wake_consumer_started", queues=[q.name for q, _ in consumers])
        if self._prefetch != self._applied_prefetch:  # set_prefetch() ran meanwhile
            await self._apply_prefetch()
        if self._sticky_worker_id is not None:
            await self._start_sticky(channel, self._sticky_worker_id)

    async def _start_sticky(self, channel: AbstractRobustChannel, worker_id: str) -> None:
        channel.reopen_callbacks.add(self._on_channel_reopened)
        try:
            await self._consume_sticky(channel, worker_id)
        except BrokerError as exc:  # the shared queues still work; the keeper retries
            log.warning("sticky_queue_setup_failed", worker_id=worker_id, error=str(exc))
            self._sticky_lost.set()
        self._sticky_task = asyncio.create_task(
            self._keep_sticky(channel, worker_id), name="sticky-queue-keeper"
        )

    async def _consume_sticky(self, channel: AbstractRobustChannel, worker_id: str) -> None:
        if self._exchange is None:
            raise BrokerError("wake consumer is not set up")
        with translate_amqp_errors():
            async with asyncio.timeout(SETUP_TIMEOUT_SECONDS):
                underlay = await channel.get_underlay_channel()
                if _has_consumer(underlay, self._sticky_tag):
                    return
                probe = await underlay.connection.channel(publisher_confirms=False)
                try:
                    await self._topology.probe_sticky_queue(probe, worker_id)
                finally:
                    with contextlib.suppress(Exception):
                        await probe.close()
                queue = await self._topology.declare_sticky_queue(
                    channel, self._exchange, worker_id
                )
                underlay.on_consumer_cancel_callbacks.add(self._on_consumer_cancelled)
                # The same tag every time, so stop() cancels whichever consumer is current.
                self._sticky_tag = await queue.consume(
                    self._on_message, consumer_tag=self._sticky_tag
                )
        self._sticky_queue = queue
        log.info("sticky_queue_consumed", queue=queue.name)

    async def _keep_sticky(self, channel: AbstractRobustChannel, worker_id: str) -> None:
        delay = FIRST_STICKY_RETRY_SECONDS
        while not self._stopped:
            await self._sticky_lost.wait()
            self._sticky_lost.clear()
            await asyncio.sleep(delay)  # never a tight loop, whatever keeps removing the queue
            if not await self._connection.wait_connected():
                return  # closed
            try:
                await self._consume_sticky(channel, worker_id)
            except Exception as exc:  # BrokerError, or a surprise: this task must not die
                log.warning("sticky_queue_setup_failed", worker_id=worker_id, error=str(exc))
                self._sticky_lost.set()
                delay = min(delay * 2, MAX_SETUP_RETRY_SECONDS)
            else:
                delay = FIRST_STICKY_RETRY_SECONDS

    def _on_channel_reopened(self, _sender: AbstractRobustChannel | None, /) -> None:
        # A new underlying channel, and after a reconnect a new connection: the broker dropped
        # the sticky consumer with the old one, and the queue with the old connection.
        self._sticky_lost.set()

    def _on_consumer_cancelled(self, frame: aiormq.spec.Basic.Cancel) -> None:
        if frame.consumer_tag == self._sticky_tag:  # e.g. the queue was deleted
            log.warning("sticky_consumer_cancelled", worker_id=self._sticky_worker_id)
            self._sticky_lost.set()

    async def _set_up_later(self) -> None:
        delay = 0.1
        while not self._stopped:
            await self._connection.wait_connected()
            try:
                await self._set_up()
                return
            except TopologyMismatch as exc:
                # Said once; the connection stays up and the declaration is retried slowly, so
                # consuming starts by itself once an operator removed the queue.
                level = log.debug if self._mismatch_logged else log.error
                level("wake_queue_mismatched", error=str(exc))
                self._mismatch_logged = True
                delay = MAX_SETUP_RETRY_SECONDS
            except BrokerError as exc:
                log.debug("wake_consumer_setup_failed", error=str(exc))
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_SETUP_RETRY_SECONDS)

    async def _apply_prefetch(self) -> None:
        channel = self._channel
        if channel is None:
            return  # _set_up() opens the channel with the current value
        wanted = self._prefetch
        try:
            with translate_amqp_errors():
                async with asyncio.timeout(QOS_TIMEOUT_SECONDS):
                    await channel.set_qos(prefetch_count=wanted, global_=self._topology.global_qos)
        except BrokerError as exc:
            log.warning("wake_prefetch_deferred", prefetch=wanted, error=str(exc))
            return
        self._applied_prefetch = wanted
        log.debug("wake_prefetch_changed", prefetch=wanted)

    async def _reapply_prefetch(self) -> None:
        # The robust channel restores the QoS it last applied; a change that failed while the
        # broker was down is applied here.
        if self._prefetch != self._applied_prefetch:
            await self._apply_prefetch()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            async with message.process(requeue=False, ignore_processed=True):
                try:
                    wake = Wake.decode(message.body)
                except BrokerError as exc:
                    log.warning("wake_rejected", error=str(exc), routing_key=message.routing_key)
                    await message.reject(requeue=False)
                    return
                disposition = await self._on_wake(wake)  # an empty claim is normal
                if disposition is WakeDisposition.HAND_BACK and not message.redelivered:
                    await message.reject(requeue=True)
        except Exception:
            # Settled without requeue by process(); a wake is a hint, the repair pass backs it up.
            log.exception("wake_handler_failed", routing_key=message.routing_key)


def _check_prefetch(n: int) -> None:
    if n < 1:
        raise ValueError(f"prefetch must be >= 1, got {n}")


def _has_consumer(underlay: aiormq.abc.AbstractChannel, tag: str | None) -> bool:
    # aiormq drops a consumer from this map on the broker's basic.cancel; a new channel has none.
    return isinstance(underlay, aiormq.Channel) and tag is not None and tag in underlay.consumers
