"""RabbitMQ wakes: hints that a queue may have ready work, so workers notice it sooner.

Postgres is the only truth; a wake never carries state a worker acts on. The pieces:

- `BrokerConnection`: one robust connection; `start()` never fails, `on_reconnect` callbacks
  tell the worker to re-poll durable state.
- `Topology`: exchange and queue names, queue arguments, idempotent declarations.
- `WakePublisher`: `publish_wakes()` after commit; broker trouble is logged, never raised.
- `WakeConsumer`: prefetch = slots; each delivery is one claim attempt, then acked; a wake the
  worker has no slot for is handed back to the queue once.
- `Wake`, `TaskKind`, `WakeDisposition`: the message and what `on_wake` decided.
- `BrokerError`, `BrokerUnavailable`, `TopologyMismatch`: errors.
"""

from __future__ import annotations

from burrow.broker.connection import BrokerConnection
from burrow.broker.consumer import Subscription, WakeConsumer
from burrow.broker.errors import (
    BrokerError,
    BrokerUnavailable,
    TopologyMismatch,
    translate_amqp_errors,
)
from burrow.broker.messages import TaskKind, Wake, WakeDisposition
from burrow.broker.publisher import WakePublisher
from burrow.broker.topology import Topology

__all__ = [
    "BrokerConnection",
    "BrokerError",
    "BrokerUnavailable",
    "Subscription",
    "TaskKind",
    "Topology",
    "TopologyMismatch",
    "Wake",
    "WakeConsumer",
    "WakeDisposition",
    "WakePublisher",
    "translate_amqp_errors",
]
