"""Publish wakes after commit; a wake is a hint, so broker trouble is logged and never raised.

Callers publish only after the transaction that made work ready has committed (broker
invariant 1). A lost wake costs latency until the next re-poll, so `WakePublisher` swallows
`BrokerError`s and timeouts, logs `wake_publish_failed` and counts them in `failures`.

A wake with a sticky target goes to that worker's queue as a mandatory publish. The queue is
exclusive to the worker's connection, so when the worker died or lost its connection the broker
returns the wake (basic.return before the confirm) and it goes to the shared queue at once,
where any compatible worker claims it with a cold replay (S5, broker invariant 4).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import aio_pika
import aiormq
import structlog
from aio_pika.abc import AbstractExchange, AbstractRobustChannel
from aiormq.abc import DeliveredMessage

from burrow.broker.connection import BrokerConnection
from burrow.broker.errors import BrokerError, translate_amqp_errors
from burrow.broker.messages import TaskKind, Wake
from burrow.broker.topology import Topology

log = structlog.get_logger("burrow.broker")

PUBLISH_TIMEOUT_SECONDS = 2.0
_PROPERTIES = aiormq.spec.Basic.Properties(
    content_type="application/json", delivery_mode=int(aio_pika.DeliveryMode.NOT_PERSISTENT)
)
_DUE_SLACK = timedelta(milliseconds=5)


class ReadyNotice(Protocol):
    """What a wake is built from: a store ready notice (`sticky_worker_id` read if present)."""

    @property
    def namespace(self) -> str:
        """The task's namespace."""

    @property
    def connection(self) -> str:
        """The task's connection."""

    @property
    def queue(self) -> str:
        """The task's queue."""

    @property
    def kind(self) -> str:
        """`workflow` or `activity` (anything else is skipped)."""

    @property
    def task_id(self) -> str | None:
        """The task, a hint for the claim."""

    @property
    def available_at(self) -> datetime | None:
        """When the task is due; None or a past time for now."""


class WakePublisher:
    """Publishes wakes to the topology's exchange with publisher confirms.

    Args:
        connection: The process's broker connection.
        topology: Names and declarations.
        copies: Publish every wake this many times (fault tests simulate duplicates).
        timeout_seconds: How long one publish may wait for its confirm.
    """

    def __init__(
        self,
        connection: BrokerConnection,
        topology: Topology,
        *,
        copies: int = 1,
        timeout_seconds: float = PUBLISH_TIMEOUT_SECONDS,
    ) -> None:
        if copies < 1:
            raise ValueError(f"copies must be >= 1, got {copies}")
        self._connection = connection
        self._topology = topology
        self._copies = copies
        self._timeout = timeout_seconds
        self._channel: AbstractRobustChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._lock = asyncio.Lock()
        self._timers: set[asyncio.TimerHandle] = set()
        self._tasks: set[asyncio.Task[int]] = set()
        self._closed = False
        self._in_flight: dict[str, bool] = {}  # routing key -> a newer wake is waiting for it
        self.failures = 0
        """Wake messages that could not be published (each copy counts)."""
        self.sticky_fallbacks = 0
        """Sticky wakes the broker returned as unroutable and that went to the shared queue."""

    async def publish_wakes(self, wakes: Iterable[Wake]) -> int:
        """Publish wakes, deduplicated by (routing key, task id); never raises for broker trouble.

        Args:
            wakes: The wakes to publish.

        Returns:
            How many messages the broker confirmed.
        """
        unique: dict[tuple[str, str | None], Wake] = {}
        for wake in wakes:
            unique.setdefault((self._topology.routing_key(wake), wake.task_id), wake)
        if not unique:
            return 0
        try:
            exchange = await self._ensure_exchange()
        except Exception as exc:  # BrokerError, or a surprise: a wake is never worth raising
            for wake in unique.values():
                self._record_failure(wake, exc, self._copies)
            return 0
        sends = [wake for wake in unique.values() for _ in range(self._copies)]
        if len(sends) == 1:  # the usual case: no gather, no extra task
            return await self._publish_one(exchange, sends[0])
        return sum(await asyncio.gather(*(self._publish_one(exchange, w) for w in sends)))

    def announce(self, wakes: Iterable[Wake]) -> None:
        """Publish at most one wake per queue at a time, plus one trailing wake after it.

        A wake makes the worker claim and then keep claiming while work remains, so one wake
        per queue in flight is enough; a wake asked for meanwhile is sent once the current one
        is confirmed, so work committed after it was sent is still announced (never stranded).
        Task id hints are dropped: a coalesced wake stands for several tasks. Returns at once:
        the caller, already past its commit, never waits on RabbitMQ (`flush()` does).
        """
        for wake in wakes:
            key = self._topology.routing_key(wake)
            if key in self._in_flight:
                self._in_flight[key] = True
                continue
            if self._closed:
                return
            self._in_flight[key] = False
            self._track(self._drain(key, wake.model_copy(update={"task_id": None})))

    async def flush(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the wakes announced so far to be confirmed."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def _drain(self, key: str, wake: Wake) -> int:
        try:
            sent = 0
            while True:
                sent += await self.publish_wakes([wake])
                if not self._in_flight.get(key):
                    return sent
                self._in_flight[key] = False
        finally:
            self._in_flight.pop(key, None)

    def publish_later(self, wakes: Iterable[Wake], delay_seconds: float) -> None:
        """Publish wakes after a delay (e.g. a retry's backoff); `close()` cancels pending ones.

        Args:
            wakes: The wakes to publish.
            delay_seconds: How long to wait first.
        """
        batch = list(wakes)
        if not batch or self._closed:
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            self._spawn(batch)

        handle = loop.call_later(max(delay_seconds, 0.0), fire)
        self._timers.add(handle)

    def publish_ready(self, notices: Iterable[ReadyNotice]) -> None:
        """Publish wakes for store ready notices: due ones now, later ones when they are due.

        Args:
            notices: Objects with `namespace, connection, queue, kind, task_id, available_at`
                (`available_at` a tz-aware datetime or None), such as `burrow.store` notices;
                an optional `sticky_worker_id` routes a workflow wake to that worker's queue.
        """
        now = datetime.now(UTC)
        due: list[Wake] = []
        for notice in notices:
            try:
                kind = TaskKind(notice.kind)
                sticky = getattr(notice, "sticky_worker_id", None)
                wake = Wake(
                    namespace=notice.namespace,
                    connection=notice.connection,
                    queue=notice.queue,
                    kind=kind,
                    task_id=notice.task_id,
                    sticky_worker_id=sticky if kind is TaskKind.WORKFLOW else None,
                )
            except (ValueError, AttributeError) as exc:
                log.warning("ready_notice_skipped", notice=repr(notice), error=str(exc))
                continue
            available_at: datetime | None = notice.available_at
            if available_at is not None and available_at.tzinfo is None:
                available_at = available_at.replace(tzinfo=UTC)  # the store keeps UTC
            if available_at is None or available_at <= now + _DUE_SLACK:
                due.append(wake)
            else:
                self.publish_later([wake], (available_at - now).total_seconds())
        if due:
            self.announce(due)

    async def close(self) -> None:
        """Cancel delayed publishes, wait out in-flight ones and close the channel (idempotent)."""
        self._closed = True
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        channel, self._channel, self._exchange = self._channel, None, None
        if channel is not None and not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()

    def _spawn(self, batch: list[Wake]) -> None:
        if not self._closed:
            self._track(self.publish_wakes(batch))

    def _track(self, publishing: Coroutine[object, None, int]) -> None:
        task = asyncio.get_running_loop().create_task(publishing)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ensure_exchange(self) -> AbstractExchange:
        async with self._lock:
            if self._closed:
                raise BrokerError("wake publisher is closed")
            if self._exchange is not None and self._channel is not None:
                if not self._channel.is_closed:
                    return self._exchange
                if self._connection.healthy:
                    # Closed although connected: a channel error the robust channel could not
                    # repair. Start over on a new channel rather than wait for it.
                    with contextlib.suppress(Exception):
                        await self._channel.close()
                    self._channel = self._exchange = None
                else:
                    raise BrokerError("broker connection is reconnecting")
            with translate_amqp_errors():
                async with asyncio.timeout(self._timeout):
                    channel = await self._connection.channel(confirms=True)
                    try:
                        # Declared once per channel; the robust channel re-declares it later.
                        exchange = await self._topology.declare_exchange(channel)
                    except BaseException:
                        with contextlib.suppress(Exception):
                            await channel.close()
                        raise
            self._channel, self._exchange = channel, exchange
            return exchange

    async def _publish_one(self, exchange: AbstractExchange, wake: Wake) -> int:
        if wake.sticky_worker_id is not None:
            return await self._publish_sticky(exchange, wake)
        try:
            with translate_amqp_errors():
                # Straight to the current aiormq channel: an aio_pika.Message per wake costs a
                # fifth of the publish, and a wake needs none of its features.
                if self._channel is None:
                    raise BrokerError("wake publisher is closed")
                channel = await self._channel.get_underlay_channel()
                await channel.basic_publish(
                    wake.encode(),
                    exchange=exchange.name,
                    routing_key=self._topology.routing_key(wake),
                    properties=_PROPERTIES,
                    mandatory=False,  # no bound queue: the broker drops the wake (a hint)
                    timeout=self._timeout,
                )
        except Exception as exc:  # translated BrokerError, or a surprise
            self._record_failure(wake, exc, 1)
            return 0
        return 1

    async def _publish_sticky(self, exchange: AbstractExchange, wake: Wake) -> int:
        try:
            returned = await self._publish_mandatory(exchange, wake)
        except Exception as exc:  # translated BrokerError, or a surprise
            self._record_failure(wake, exc, 1)
            return 0
        if not returned:
            return 1
        # S5: the owner's queue is gone (worker dead or disconnected): any worker may claim.
        self.sticky_fallbacks += 1
        log.info("sticky_wake_fallback", worker_id=wake.sticky_worker_id, task_id=wake.task_id)
        fallback = {"sticky_worker_id": None, "unroutable_owner": wake.sticky_worker_id}
        return await self._publish_one(exchange, wake.model_copy(update=fallback))

    async def _publish_mandatory(self, exchange: AbstractExchange, wake: Wake) -> bool:
        """Publish to the wake's sticky queue; True when the broker returned it unroutable."""
        with translate_amqp_errors():
            if self._channel is None:
                raise BrokerError("wake publisher is closed")
            channel = await self._channel.get_underlay_channel()
            try:
                confirmation = await channel.basic_publish(
                    wake.encode(),
                    exchange=exchange.name,
                    routing_key=self._topology.routing_key(wake),
                    # Fresh properties: aiormq matches a basic.return to its publish by message
                    # id, which it writes into the properties object when none is set.
                    properties=_mandatory_properties(),
                    mandatory=True,
                    timeout=self._timeout,
                )
            except aiormq.exceptions.PublishError:  # a channel opened with on_return_raises
                return True
        # Robust channels use on_return_raises=False: the confirm resolves to the returned
        # message (a Basic.Return delivery) instead of the Basic.Ack.
        return isinstance(confirmation, DeliveredMessage)

    def _record_failure(self, wake: Wake, exc: BaseException, count: int) -> None:
        self.failures += count
        level = log.warning if self._connection.healthy else log.debug
        level(
            "wake_publish_failed",
            queue=self._topology.routing_key(wake),
            task_id=wake.task_id,
            error=str(exc),
        )


def _mandatory_properties() -> aiormq.spec.Basic.Properties:
    return aiormq.spec.Basic.Properties(
        content_type=_PROPERTIES.content_type, delivery_mode=_PROPERTIES.delivery_mode
    )
