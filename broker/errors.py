"""Broker errors and the one place where AMQP client errors are translated."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import aio_pika.exceptions
import aiormq.exceptions

from burrow.errors import BurrowError


class BrokerError(BurrowError):
    """Base class of errors raised by the broker layer."""


class BrokerUnavailable(BrokerError):
    """RabbitMQ cannot be reached right now; wakes are lost, durable polling carries on."""


class TopologyMismatch(BrokerError):
    """A wake queue already exists with other arguments (declared by another Burrow version)."""


class QueueTypeMismatch(TopologyMismatch):
    """A wake queue exists as the other queue type (classic vs quorum) than this process wants.

    RabbitMQ never converts a queue's type: the declaration is refused until the queue is
    deleted (it holds only wakes, which are hints) or the setting matches the queue again.
    """

    queue: str
    wanted: str

    def __init__(self, queue: str, *, wanted: str) -> None:
        existing = "classic" if wanted == "quorum" else "quorum"
        super().__init__(
            f"wake queue {queue!r} exists as a {existing} queue but BURROW_AMQP_QUEUE_TYPE is"
            f" {wanted}: delete it (rabbitmqctl delete_queue {queue}; it holds only wakes) or set"
            f" BURROW_AMQP_QUEUE_TYPE={existing}. Until then this process finds work by durable"
            " polling only",
            queue=queue,
            wanted=wanted,
        )


_UNAVAILABLE = (
    TimeoutError,
    aiormq.exceptions.AMQPError,
    aio_pika.exceptions.AMQPException,
    ConnectionError,
    OSError,
    RuntimeError,
)


@contextlib.contextmanager
def translate_amqp_errors() -> Iterator[None]:
    """Map aio-pika/aiormq errors to BrokerError, chaining the cause."""
    try:
        yield
    except aiormq.exceptions.ChannelPreconditionFailed as exc:
        raise TopologyMismatch(
            f"{exc}: a wake queue exists with other arguments; delete it (rabbitmqctl"
            " delete_queue NAME) or set another BURROW_AMQP_PREFIX. Until then this process"
            " finds work by durable polling only"
        ) from exc
    except _UNAVAILABLE as exc:
        raise BrokerUnavailable(f"broker unavailable: {exc!r}") from exc
