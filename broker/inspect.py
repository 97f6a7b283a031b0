"""Operator view of wake queues: depth and consumers, by passive declaration (M8)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import aio_pika

from burrow.broker.errors import BrokerUnavailable, translate_amqp_errors


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A wake queue's ready messages and consumers, as RabbitMQ reports them."""

    messages: int
    consumers: int


async def inspect_queues(
    url: str, names: Iterable[str], *, timeout: float = 5.0
) -> dict[str, QueueDepth | None]:
    """Depth and consumers per queue name; None for a queue that does not exist.

    Raises:
        BrokerUnavailable: RabbitMQ cannot be reached.
    """
    found: dict[str, QueueDepth | None] = {}
    with translate_amqp_errors():
        connection = await aio_pika.connect(
            url, timeout=timeout, client_properties={"connection_name": "burrow-queues"}
        )
    try:
        for name in names:
            # A passive declare of a missing queue closes the channel: one channel per queue.
            channel = await connection.channel()
            try:
                queue = await channel.declare_queue(name, passive=True)
                result = queue.declaration_result
                found[name] = QueueDepth(result.message_count or 0, result.consumer_count or 0)
            except aio_pika.exceptions.ChannelClosed:
                found[name] = None
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()
    except BrokerUnavailable:
        raise
    finally:
        await connection.close()
    return found
