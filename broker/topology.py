"""AMQP names and idempotent declarations: one direct exchange, shared wake queues."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue

from burrow.broker.messages import TaskKind, Wake

DEFAULT_PREFIX = "burrow"
DEFAULT_WAKE_TTL_SECONDS = 60.0
MAX_QUEUED_WAKES = 10_000
UNUSED_QUEUE_EXPIRY_MS = 6 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Topology:
    """Names and queue arguments; a prefix isolates clusters (and test runs) on one broker."""

    prefix: str = DEFAULT_PREFIX
    wake_ttl_seconds: float = DEFAULT_WAKE_TTL_SECONDS

    @property
    def exchange_name(self) -> str:
        """The direct exchange every wake is published to."""
        return f"{self.prefix}.wake"

    def queue_name(self, *, namespace: str, connection: str, queue: str, kind: TaskKind) -> str:
        """The shared wake queue of one (namespace, connection, queue, task kind)."""
        return f"{self.prefix}.wake.{namespace}.{connection}.{queue}.{kind}"

    def routing_key(self, wake: Wake) -> str:
        """Where a wake goes: its queue's name."""
        return self.queue_name(
            namespace=wake.namespace, connection=wake.connection, queue=wake.queue, kind=wake.kind
        )

    def queue_arguments(self) -> dict[str, Any]:
        """Wakes expire (DW_WAKE_SIGNAL_TTL_SECONDS); a full queue drops its oldest (fungible)."""
        return {
            "x-message-ttl": int(self.wake_ttl_seconds * 1000),
            "x-max-length": MAX_QUEUED_WAKES,
            "x-overflow": "drop-head",
            # A queue nobody consumed for this long is removed; the next worker re-declares it.
            "x-expires": UNUSED_QUEUE_EXPIRY_MS,
        }

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
        declared = await channel.declare_queue(name, durable=True, arguments=self.queue_arguments())
        await declared.bind(exchange, routing_key=name)
        return declared
