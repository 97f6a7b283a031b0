"""Held polls woken by RabbitMQ: work another process made ready reaches them at once (M5, C1).

Burrow publishes a wake to the wake exchange, routed by the shared wake queue's name, whenever a
commit makes a task ready, whichever process commits it (a Burrow client, worker or another
server). The server taps those wakes without taking them from Burrow's own workers: it binds a
private queue of its own (exclusive, auto-deleted, server-named) to the same routing keys, and
a direct exchange hands every bound queue its own copy. A routing key is bound the first time a
poll waits on that queue. (Run changes reach the server's `OutcomeWaiter` through a run-change
listener of their own.)

Wakes stay hints: with the broker down, or a wake lost, a held poll still finds the work at its
next Postgres re-probe; after a reconnect every waiter re-checks (wakes may have been missed).
"""

from __future__ import annotations

import structlog

from burrow.broker.errors import BrokerError
from burrow.broker.messages import TaskKind, Wake
from burrow.broker.run_changes import KeyListener
from burrow.server.poll_wakes import PollWakes
from burrow.wake_link import WakeLink

log = structlog.get_logger("burrow.server")


class WakeTap:
    """A private copy of the wakes of the queues this server's polls wait on."""

    def __init__(self, link: WakeLink, wakes: PollWakes) -> None:
        self._link = link
        self._wakes = wakes
        self._bound: set[str] = set()
        """Keys bound once: the listener binds them again on every new queue."""
        # Bound on the wake exchange by shared queue name, with the shared queues' limits.
        self._tap = KeyListener(
            link.connection,
            link.topology,
            on_change=self._woken,
            on_resync=wakes.wake_all,
            declare_exchange=link.topology.declare_exchange,
            queue_arguments=link.topology.sticky_queue_arguments(),
        )

    async def watch_queue(self, *, namespace: str, connection: str, queue: str, kind: str) -> None:
        """Hear the wakes of one (namespace, connection, queue, kind) from now on.

        Never fails: without the broker the poll relies on its Postgres re-probe.
        """
        name = self._link.topology.queue_name(
            namespace=namespace, connection=connection, queue=queue, kind=TaskKind(kind)
        )
        if name in self._bound and self._tap.ready:
            return  # polls wait on the same few queues: one bind each, not one per poll
        if await self._tap.bind(name):
            self._bound.add(name)

    def _woken(self, _key: str, body: bytes) -> None:
        try:
            wake = Wake.decode(body)
        except BrokerError as exc:  # wakes are fungible: a malformed one is dropped
            log.debug("wake_tap_malformed", error=str(exc))
            return
        self._wakes.wake((wake.kind.value, wake.namespace, wake.queue))

    async def close(self) -> None:
        """Close the tap's channel; the broker deletes its queue (idempotent)."""
        await self._tap.close()
