"""One robust AMQP connection per process: start never fails, reconnects trigger a re-poll.

`BrokerConnection.start()` tries `aio_pika.connect_robust` once; if RabbitMQ is down it keeps
retrying in a background task with capped exponential backoff instead of raising, because wakes
are only hints and the worker must run on durable polling alone (broker invariant 5). Once
connected, aio-pika's robust connection restores channels, exchanges, queues, bindings and
consumers after a drop; `on_reconnect` callbacks then run so the worker re-polls Postgres before
trusting the broker again.

A RabbitMQ cluster is given as several node URLs. A first connect tries them in order; once
connected, a connection that is lost, or a reconnect attempt that fails, moves on to the next
node (`_ClosingRobustConnection` rotates its URL), so the robust connection restores channels,
exchanges, queues, bindings and consumers on whichever node it lands. Connection options (the
query of a URL) are read from the first node's URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aio_pika
import structlog
from aio_pika.abc import (
    AbstractConnection,
    AbstractRobustChannel,
    AbstractRobustConnection,
    TimeoutType,
)
from aio_pika.connection import make_url

from burrow.broker.errors import BrokerUnavailable, translate_amqp_errors
from burrow.errors import redact_passwords

log = structlog.get_logger("burrow.broker")

ReconnectCallback = Callable[[], Awaitable[None] | None]

CONNECT_TIMEOUT_SECONDS = 5.0
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0


class _ClosingRobustConnection(aio_pika.RobustConnection):
    """A robust connection that closes itself when a first connect fails; moves between nodes.

    aio-pika drops a connection whose first connect failed without closing it, and its
    `__del__` later schedules `close()` on whatever event loop is running when it is collected:
    in a worker, possibly the deterministic loop of a workflow task, whose replay then fails.
    Reconnects after a first success are aio-pika's own, except that each one that follows a
    loss or a failed attempt goes to the next node given to `follow_nodes`.
    """

    _connected_once = False
    _nodes: tuple[str, ...] = ()
    _node = 0

    def follow_nodes(self, urls: Sequence[str], current: int) -> None:
        """Reconnect to the node after `current` in `urls` whenever a connection is lost."""
        self._nodes = tuple(urls)
        self._node = current

    @property
    def node(self) -> str:
        """The URL of the node this connection is on (or trying next), without its password."""
        return str(redact_passwords(str(self.url.with_query(None))))  # options are not the node

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        # Called for a lost connection and for each failed reconnect attempt alike. aio-pika's
        # reconnect reads `self.url` for its next attempt, which waits for this to return.
        await super()._on_connection_close(closing)
        if len(self._nodes) > 1 and not self.close_called and not self.is_closed:
            self._node = (self._node + 1) % len(self._nodes)
            self.url = make_url(self._nodes[self._node])

    async def connect(self, timeout: TimeoutType = None) -> None:
        if self._connected_once:
            await super().connect(timeout)
            return
        try:
            await super().connect(timeout)
        except BaseException:
            await self.close()
            raise
        self._connected_once = True


class BrokerConnection:
    """A robust RabbitMQ connection that tolerates the broker being down at start.

    Args:
        url: The AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672/`; for a cluster, its nodes'
            URLs, as a sequence or comma-separated, tried in order.
        name: The connection name shown by RabbitMQ (`connection_name` client property).
        reconnect_interval_seconds: aio-pika's pause between reconnect attempts; a connection
            lost less than this long after it was made waits out the rest of it. Default: the
            URL's `reconnect_interval` query parameter, else aio-pika's 5 s.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        name: str,
        reconnect_interval_seconds: float | None = None,
    ) -> None:
        urls = url.split(",") if isinstance(url, str) else url
        self._urls = tuple(u.strip() for u in urls if u.strip())
        if not self._urls:
            raise ValueError("BrokerConnection needs at least one AMQP URL")
        self._name = name
        self._reconnect_interval = reconnect_interval_seconds
        self._connection: AbstractRobustConnection | None = None
        self._connected = False  # our view: set after connect/restore, cleared on drop
        self._callbacks: list[ReconnectCallback] = []
        self._retry_task: asyncio.Task[None] | None = None
        self._callback_tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def name(self) -> str:
        """The connection name shown by RabbitMQ."""
        return self._name

    @property
    def node(self) -> str | None:
        """The URL (password masked) of the node the connection is on; None before a connect."""
        conn = self._connection
        return conn.node if isinstance(conn, _ClosingRobustConnection) else None

    @property
    def healthy(self) -> bool:
        """True only while connected: not closed, not down, not waiting for a reconnect."""
        conn = self._connection
        return (
            self._connected
            and conn is not None
            and not conn.is_closed
            and conn.connected.is_set()
            and not conn.reconnecting
        )

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        """Register a callback run after every reconnection (and a late first connect).

        Args:
            callback: A function or coroutine function without arguments; errors are logged.
        """
        self._callbacks.append(callback)

    async def start(self) -> None:
        """Connect, or keep retrying in the background if the broker is down; never raises."""
        if self._closed or self._connection is not None or self._retry_task is not None:
            return
        try:
            await self._connect()
        except BrokerUnavailable as exc:
            log.warning("broker_connect_failed", connection_name=self._name, error=str(exc))
            self._retry_task = asyncio.create_task(self._retry(), name=f"broker-retry-{self._name}")

    async def channel(
        self, *, prefetch: int | None = None, confirms: bool = True, global_qos: bool = True
    ) -> AbstractRobustChannel:
        """Open a robust channel (restored with its QoS after a reconnect).

        Args:
            prefetch: Unacked deliveries allowed on the whole channel (all its consumers).
            confirms: Whether publishes on the channel wait for publisher confirms.
            global_qos: False: `prefetch` applies to each consumer started afterwards instead
                (quorum queues refuse a channel-wide limit).

        Raises:
            BrokerUnavailable: There is no open connection right now.
        """
        conn = self._connection
        if conn is None or not self.healthy:
            raise BrokerUnavailable(f"broker connection {self._name!r} is not connected")
        with translate_amqp_errors():
            channel = await conn.channel(publisher_confirms=confirms)
            if prefetch is not None:
                # global_: one limit shared by every consumer on the channel, changeable live
                await channel.set_qos(prefetch_count=prefetch, global_=global_qos)
        return channel

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """Wait until the connection is healthy; False when `timeout` passes first."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.healthy:
            if self._closed or (deadline is not None and loop.time() >= deadline):
                return False
            await asyncio.sleep(0.05)
        return True

    async def close(self) -> None:
        """Close the connection and stop retrying (idempotent)."""
        self._closed = True
        self._connected = False
        tasks = [t for t in (self._retry_task, *self._callback_tasks) if t is not None]
        self._retry_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        conn, self._connection = self._connection, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
            log.debug("broker_connection_closed", connection_name=self._name)

    async def _connect(self) -> None:
        error: BrokerUnavailable | None = None
        for index, url in enumerate(self._urls):  # a first connect tries the nodes in order
            try:
                conn = await self._connect_to(url)
            except BrokerUnavailable as exc:
                error = exc
                log.debug("broker_node_unavailable", connection_name=self._name, error=str(exc))
                continue
            if self._closed:  # close() ran while we were connecting
                await conn.close()
                return
            conn.follow_nodes(self._urls, index)
            conn.close_callbacks.add(self._on_connection_lost)
            conn.reconnect_callbacks.add(self._on_reconnected)
            self._connection = conn
            self._connected = True
            log.info("broker_connected", connection_name=self._name, node=conn.node)
            return
        assert error is not None  # there is at least one URL
        raise error

    async def _connect_to(self, url: str) -> _ClosingRobustConnection:
        options: dict[str, Any] = {}  # connect_robust takes it through **kwargs: Any
        if self._reconnect_interval is not None:
            options["reconnect_interval"] = self._reconnect_interval
        with translate_amqp_errors():
            conn: _ClosingRobustConnection = await aio_pika.connect_robust(
                url,
                client_properties={"connection_name": self._name},
                timeout=CONNECT_TIMEOUT_SECONDS,
                connection_class=_ClosingRobustConnection,
                **options,
            )
        return conn

    async def _retry(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while not self._closed:
            await asyncio.sleep(delay)
            try:
                await self._connect()
            except Exception as exc:  # a background task: never die on a surprise
                delay = min(delay * 2, MAX_RETRY_SECONDS)
                log.debug("broker_connect_failed", connection_name=self._name, error=repr(exc))
                continue
            if not self._closed:
                await self._run_callbacks()  # the worker missed wakes while we were down
            return

    def _on_connection_lost(
        self, _sender: AbstractConnection | None, exc: BaseException | None
    ) -> None:
        if self._connected:
            log.warning(
                "broker_connection_lost",
                connection_name=self._name,
                node=self.node,
                error=str(redact_passwords(repr(exc))),
            )
        self._connected = False

    def _on_reconnected(self, _sender: AbstractRobustConnection | None) -> None:
        # aio-pika calls this after it has restored channels, queues and consumers.
        self._connected = True
        log.info("broker_reconnected", connection_name=self._name, node=self.node)
        task = asyncio.create_task(self._run_callbacks())
        self._callback_tasks.add(task)
        task.add_done_callback(self._callback_tasks.discard)

    async def _run_callbacks(self) -> None:
        for callback in tuple(self._callbacks):
            try:
                result = callback()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("broker_reconnect_callback_failed", connection_name=self._name)
