"""One robust AMQP connection per process: start never fails, reconnects trigger a re-poll.

`BrokerConnection.start()` tries `aio_pika.connect_robust` once; if RabbitMQ is down it keeps
retrying in a background task with capped exponential backoff instead of raising, because wakes
are only hints and the worker must run on durable polling alone (broker invariant 5). Once
connected, aio-pika's robust connection restores channels, exchanges, queues, bindings and
consumers after a drop; `on_reconnect` callbacks then run so the worker re-polls Postgres before
trusting the broker again.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import structlog
from aio_pika.abc import (
    AbstractConnection,
    AbstractRobustChannel,
    AbstractRobustConnection,
    TimeoutType,
)

from burrow.broker.errors import BrokerUnavailable, translate_amqp_errors

log = structlog.get_logger("burrow.broker")

ReconnectCallback = Callable[[], Awaitable[None] | None]

CONNECT_TIMEOUT_SECONDS = 5.0
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0


class _ClosingRobustConnection(aio_pika.RobustConnection):
    """A robust connection that closes itself when its first connect fails.

    aio-pika drops such a connection without closing it, and its `__del__` later schedules
    `close()` on whatever event loop is running when it is collected: in a worker, possibly the
    deterministic loop of a workflow task, whose replay then fails. Reconnects after a first
    success are aio-pika's own, unchanged.
    """

    _connected_once = False

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
        url: The AMQP URL, e.g. `amqp://guest:guest@127.0.0.1:5672/`.
        name: The connection name shown by RabbitMQ (`connection_name` client property).
        reconnect_interval_seconds: aio-pika's pause between reconnect attempts; a connection
            lost less than this long after it was made waits out the rest of it. Default: the
            URL's `reconnect_interval` query parameter, else aio-pika's 5 s.
    """

    def __init__(
        self, url: str, *, name: str, reconnect_interval_seconds: float | None = None
    ) -> None:
        self._url = url
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
        self, *, prefetch: int | None = None, confirms: bool = True
    ) -> AbstractRobustChannel:
        """Open a robust channel (restored with its QoS after a reconnect).

        Args:
            prefetch: Unacked deliveries allowed on the whole channel (all its consumers).
            confirms: Whether publishes on the channel wait for publisher confirms.

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
                await channel.set_qos(prefetch_count=prefetch, global_=True)
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
        options: dict[str, Any] = {}  # connect_robust takes it through **kwargs: Any
        if self._reconnect_interval is not None:
            options["reconnect_interval"] = self._reconnect_interval
        with translate_amqp_errors():
            conn = await aio_pika.connect_robust(
                self._url,
                client_properties={"connection_name": self._name},
                timeout=CONNECT_TIMEOUT_SECONDS,
                connection_class=_ClosingRobustConnection,
                **options,
            )
        if self._closed:  # close() ran while we were connecting
            await conn.close()
            return
        conn.close_callbacks.add(self._on_connection_lost)
        conn.reconnect_callbacks.add(self._on_reconnected)
        self._connection = conn
        self._connected = True
        log.info("broker_connected", connection_name=self._name)

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
            log.warning("broker_connection_lost", connection_name=self._name, error=repr(exc))
        self._connected = False

    def _on_reconnected(self, _sender: AbstractRobustConnection | None) -> None:
        # aio-pika calls this after it has restored channels, queues and consumers.
        self._connected = True
        log.info("broker_reconnected", connection_name=self._name)
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
