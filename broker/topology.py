"""AMQP names and idempotent declarations: wake and run-change exchanges, wake queues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import aio_pika
import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractQueue,
    AbstractRobustChannel,
    FieldValue,
)

from burrow.broker.errors import QueueTypeMismatch
from burrow.broker.messages import TaskKind, Wake

QueueArguments = dict[str, FieldValue]
"""`x-` arguments of a queue declaration, as AMQP field values."""

DEFAULT_PREFIX = "burrow"
DEFAULT_WAKE_TTL_SECONDS = 60.0
MAX_QUEUED_WAKES = 10_000
UNUSED_QUEUE_EXPIRY_MS = 6 * 3600 * 1000

QueueType = Literal["classic", "quorum"]


@dataclass(frozen=True, slots=True)
class Topology:
    """Names and queue arguments; a prefix isolates clusters (and test runs) on one broker."""

    prefix: str = DEFAULT_PREFIX
    wake_ttl_seconds: float = DEFAULT_WAKE_TTL_SECONDS
    # quorum: shared wake queues are replicated and outlive a cluster node (sticky queues and
    # run-change queues are exclusive to a connection and stay classic).
    queue_type: QueueType = "classic"

    @property
    def global_qos(self) -> bool:
        """Whether a consumer's channel may share one prefetch limit (quorum queues refuse it)."""
        return self.queue_type == "classic"

    @property
    def exchange_name(self) -> str:
        """The direct exchange every wake is published to."""
        return f"{self.prefix}.wake"

    @property
    def runs_exchange_name(self) -> str:
        """The topic exchange run changes are published to (`run_changes.change_routing_key`)."""
        return f"{self.prefix}.run-changes"

    def queue_name(self, *, namespace: str, connection: str, queue: str, kind: TaskKind) -> str:
        """The shared wake queue of one (namespace, connection, queue, task kind)."""
        return f"{self.prefix}.wake.{namespace}.{connection}.{queue}.{kind}"

    def sticky_queue_name(self, worker_id: str) -> str:
        """The sticky wake queue of one worker process (C1, S3: named from its worker_id)."""
        return f"{self.prefix}.sticky.{worker_id}"

    def routing_key(self, wake: Wake) -> str:
        """Where a wake goes: its sticky target's queue, else its shared queue."""
        if wake.sticky_worker_id is not None:
            return self.sticky_queue_name(wake.sticky_worker_id)
        return self.queue_name(
            namespace=wake.namespace, connection=wake.connection, queue=wake.queue, kind=wake.kind
        )

    def queue_arguments(self) -> QueueArguments:
        """Wakes expire (DW_WAKE_SIGNAL_TTL_SECONDS); a full queue drops its oldest (fungible).

        Quorum queues take the same limits (RabbitMQ 3.10 and later: message TTL, max length
        with drop-head, queue expiry). A classic queue is declared without `x-queue-type`, as
        it always was, so queues declared by earlier versions stay equivalent.
        """
        arguments: QueueArguments = {
            **self.sticky_queue_arguments(),
            # A queue nobody consumed for this long is removed; the next worker re-declares it.
            "x-expires": UNUSED_QUEUE_EXPIRY_MS,
        }
        if self.queue_type == "quorum":
            arguments["x-queue-type"] = "quorum"
        return arguments

    def sticky_queue_arguments(self) -> QueueArguments:
        """The shared queues' limits; no expiry, the queue dies with its connection instead."""
        return {
            "x-message-ttl": int(self.wake_ttl_seconds * 1000),
            "x-max-length": MAX_QUEUED_WAKES,
            "x-overflow": "drop-head",
        }

    async def declare_runs_exchange(self, channel: AbstractChannel) -> AbstractExchange:
        """Declare the run-change exchange (idempotent)."""
        return await channel.declare_exchange(
            self.runs_exchange_name, aio_pika.ExchangeType.TOPIC, durable=True
        )

    async def declare_exchange(self, channel: AbstractChannel) -> AbstractExchange:
        """Declare the wake exchange (idempotent; restored by robust channels)."""
        return await channel.declare_exchange(
            self.exchange_name, aio_pika.ExchangeType.DIRECT, durable=True
        )

    async def declare_wake_queue(
        self,
        channel: AbstractChannel,
        exchange: AbstractExchange,
        *,
        namespace: str,
        connection: str,
        queue: str,
        kind: TaskKind,
    ) -> AbstractQueue:
        """Declare and bind one shared wake queue (idempotent)."""
        name = self.queue_name(namespace=namespace, connection=connection, queue=queue, kind=kind)
        try:
            declared = await channel.declare_queue(
                name, durable=True, arguments=self.queue_arguments()
            )
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            if "x-queue-type" in str(exc):
                raise QueueTypeMismatch(name, wanted=self.queue_type) from exc
            raise
        await declared.bind(exchange, routing_key=name)
        return declared

    async def declare_sticky_queue(
        self, channel: AbstractChannel, exchange: AbstractExchange, worker_id: str
    ) -> AbstractQueue:
        """Declare and bind one worker's sticky queue (idempotent for its own connection).

        Exclusive and auto-deleted: it is gone as soon as the worker's connection is, so a
        mandatory publish to it comes back unroutable and falls back to the shared queue (S5).
        A robust channel must not restore it: while the broker still holds the previous
        connection the declaration fails (RESOURCE_LOCKED) and aio-pika would keep the whole
        connection down; the consumer re-declares it instead.
        """
        name = self.sticky_queue_name(worker_id)
        arguments = self.sticky_queue_arguments()
        declared: AbstractQueue
        if isinstance(channel, AbstractRobustChannel):
            declared = await channel.declare_queue(
                name, exclusive=True, auto_delete=True, arguments=arguments, robust=False
            )
        else:
            declared = await channel.declare_queue(
                name, exclusive=True, auto_delete=True, arguments=arguments
            )
        await declared.bind(exchange, routing_key=name)
        return declared

    async def probe_sticky_queue(self, channel: aiormq.abc.AbstractChannel, worker_id: str) -> None:
        """Declare a sticky queue on a throwaway channel of the worker's connection.

        While another connection still holds the queue the broker closes the channel it was
        declared on: probing first keeps that error off the channel that consumes wakes.
        """
        await channel.queue_declare(
            self.sticky_queue_name(worker_id),
            durable=False,
            exclusive=True,
            auto_delete=True,
            arguments=self.sticky_queue_arguments(),
        )
