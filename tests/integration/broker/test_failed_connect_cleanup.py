"""A failed connect attempt closes the connection object it made (broker invariant 5, D1).

aio-pika leaves a connection whose first connect failed to its `__del__`, which schedules
`close()` on the event loop running when the object is collected. In a worker that can be the
deterministic loop of a workflow task: the replay then fails with "attached to a different
loop" (seen in the chaos soak right after a worker restarted while RabbitMQ was down).
"""

from __future__ import annotations

import asyncio
import gc
import socket

import aio_pika

from burrow.broker import BrokerConnection


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


def _open_robust_connections() -> list[aio_pika.RobustConnection]:
    gc.collect()
    return [
        obj
        for obj in gc.get_objects()
        if isinstance(obj, aio_pika.RobustConnection) and not obj.is_closed
    ]


async def test_connect_attempts_against_a_down_broker_leave_no_open_connection() -> None:
    """Broker invariant 5: start() and its retries against a down broker close what they made."""
    before = len(_open_robust_connections())
    url = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/"
    connection = BrokerConnection(url, name="failed-connect-test", reconnect_interval_seconds=0.1)
    await connection.start()  # does not raise: it retries in the background
    await asyncio.sleep(0.5)  # the first attempt and a few retries fail
    try:
        assert not connection.healthy
        assert len(_open_robust_connections()) == before
    finally:
        await connection.close()
