"""Operator view of wake queues: depth and consumers, by passive declaration (M8)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aio_pika

from burrow.broker.errors import BrokerUnavailable, translate_amqp_errors


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """A wake queue's ready messages and consumers, as RabbitMQ reports them."""

    messages: int
    consumers: int


async def _connect_first(urls: Sequence[str], timeout: float) -> aio_pika.abc.AbstractConnection:
    error: BrokerUnavailable | None = None
    for url in urls:  # a cluster's nodes, in order: any one sees every queue
        try:
            with translate_amqp_errors():
                return await aio_pika.connect(
                    url, timeout=timeout, client_properties={"connection_name": "burrow-queues"}
                )
        except BrokerUnavailable as exc:
            error = exc
    raise error or BrokerUnavailable("no broker node to connect to")


async def inspect_queues(
    url: str | Sequence[str], names: Iterable[str], *, timeout: float = 5.0
) -> dict[str, QueueDepth | None]:
    """Depth and consumers per queue name; None for a queue that does not exist.

    Args:
        url: The AMQP URL, or a cluster's node URLs (the first reachable one is asked).
        names: The queues.
        timeout: Connect timeout per node.

    Raises:
        BrokerUnavailable: No node can be reached.
    """
    found: dict[str, QueueDepth | None] = {}
    connection = await _connect_first([url] if isinstance(url, str) else url, timeout)
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
