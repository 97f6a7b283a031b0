"""The runtime's link to the wake path: publish after commit, consume, re-poll on reconnect."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence

import structlog

from burrow.broker.connection import BrokerConnection
from burrow.broker.consumer import WakeConsumer
from burrow.broker.messages import TaskKind, Wake, WakeDisposition
from burrow.broker.publisher import WakePublisher
from burrow.broker.run_changes import KeyListener, RunChangePublisher
from burrow.broker.topology import Topology
from burrow.config import Settings
from burrow.store.ready import Notice, ReadyTask, RunChanged

log = structlog.get_logger("burrow.wake_link")
RECONNECT_INTERVAL_SECONDS = 1.0
PUBLISH_FLUSH_SECONDS = 2.0
CLOSE_SECONDS = 5.0  # aio-pika's 5 s default would leave wakes off too long


class WakeLink:
    """One broker connection with a publisher and, for workers, a consumer."""

    def __init__(self, settings: Settings, *, name: str) -> None:
        self.settings = settings
        self.topology = Topology(
            prefix=settings.wakes.prefix,
            wake_ttl_seconds=settings.wakes.ttl_seconds,
            queue_type=settings.wakes.queue_type,
        )
        self.connection = BrokerConnection(
            settings.amqp_urls, name=name, reconnect_interval_seconds=RECONNECT_INTERVAL_SECONDS
        )
        self.publisher = WakePublisher(self.connection, self.topology, copies=settings.wakes.copies)
        self.run_changes = RunChangePublisher(self.connection, self.topology)
        self.consumer: WakeConsumer | None = None
        self._listeners: list[KeyListener] = []

    @property
    def healthy(self) -> bool:
        """Whether wakes are flowing (else callers poll durable state at the short interval)."""
        return self.connection.healthy

    async def start(self) -> None:
        """Connect in the background; never fails when the broker is down."""
        await self.connection.start()

    async def publish_ready(self, notices: Iterable[Notice]) -> None:
        """Store.after_commit: turn what a committed transaction made ready into wakes.

        Run changes (a run closed, an update completed, a query answered) go to the clients
        waiting on them. Publishing runs in the background: the caller, already past its
        commit, never waits on RabbitMQ.
        """
        ready: list[ReadyTask] = []
        changed: list[tuple[str, bytes, str | None]] = []
        for notice in notices:
            if isinstance(notice, RunChanged):
                changed.append((notice.key, notice.message(), notice.notify_queue))
            elif isinstance(notice, ReadyTask):
                ready.append(notice)
        if ready:
            self.publisher.publish_ready(ready)
        if changed:
            self.run_changes.publish(changed)

    def listen_for_run_changes(
        self, *, on_change: Callable[[str, bytes], None], on_resync: Callable[[], None]
    ) -> KeyListener:
        """A listener on this connection for the run changes a client waits on."""
        listener = KeyListener(
            self.connection, self.topology, on_change=on_change, on_resync=on_resync
        )
        self._listeners.append(listener)
        return listener

    async def consume(
        self,
        subscriptions: Sequence[tuple[str, str, str, TaskKind]],
        *,
        on_wake: Callable[[Wake], Awaitable[WakeDisposition]],
        prefetch: int,
        sticky_worker_id: str | None = None,
    ) -> None:
        """Consume the shared wake queues of these (namespace, connection, queue, kind).

        With `sticky_worker_id`, also this worker's sticky queue (S3), where wakes for workflow
        tasks bound to it arrive.
        """
        self.consumer = WakeConsumer(
            self.connection,
            self.topology,
            subscriptions=subscriptions,
            on_wake=on_wake,
            prefetch=prefetch,
            sticky_worker_id=sticky_worker_id,
        )
        await self.consumer.start()

    def on_reconnect(self, callback: Callable[[], Awaitable[None] | None]) -> None:
        """Run `callback` after every (re)connection (broker invariant 5: re-poll first)."""
        self.connection.on_reconnect(callback)

    async def stop_consuming(self) -> None:
        """Stop taking wakes (drain)."""
        if self.consumer is not None:
            await self.consumer.stop()

    async def close(self) -> None:
        """Stop everything and close the connection."""
        await self.stop_consuming()
        # Let wakes of already-committed work go out (bounded wait).
        await self.publisher.flush(PUBLISH_FLUSH_SECONDS)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_SECONDS):  # shutdown must not hang on the broker
                for listener in self._listeners:
                    await listener.close()
                await self.run_changes.close()
                await self.publisher.close()
                await self.connection.close()
