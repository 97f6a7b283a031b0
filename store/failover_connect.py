"""Connecting to a failover set of hosts, each tried within a timeout of its own.

asyncpg tries a list of hosts in order, but under one timeout for them all: a primary whose
machine is gone (no refusal, no answer) would use it up, and the promoted standby behind it
would never be tried. Like libpq's `connect_timeout`, each host gets its own bounded attempt
here; and the host that last took the connection is tried first, so once a standby has been
promoted new connections do not wait on the dead primary each time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import structlog
from sqlalchemy.engine import URL

log = structlog.get_logger("burrow.store")

HOST_TIMEOUT_SECONDS = 5.0
# A host that cannot take the connection now: refused, silent, a standby, starting or stopping.
_NEXT_HOST = (
    OSError,
    TimeoutError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # TargetServerAttributeNotMatched among them
    asyncpg.CannotConnectNowError,
)


class NoServerTookTheConnection(ConnectionError):
    """No host of the failover set took the connection now (each one's reason is named).

    A ConnectionError: the store reports it as StoreUnavailable, and callers retry.
    """


def failover_connector(
    url: URL, connect_args: dict[str, Any], host_timeout: float = HOST_TIMEOUT_SECONDS
) -> Callable[[], Awaitable[asyncpg.Connection]] | None:
    """An `async_creator` for a URL naming several hosts (`async_url`), else None.

    Other errors (credentials refused, no such database) are raised at once: the next host
    would say the same.
    """
    _, options = url.get_dialect()().create_connect_args(url)  # the driver's own arguments
    hosts, ports = options.pop("host", None), options.pop("port", None)
    if not isinstance(hosts, list) or not isinstance(ports, list):
        return None
    members = list(zip(hosts, ports, strict=True))
    options = {**options, **connect_args, "timeout": host_timeout}
    last_good = 0

    async def connect() -> asyncpg.Connection:
        nonlocal last_good
        failures: list[str] = []
        for i in [*range(last_good, len(members)), *range(last_good)]:
            host, port = members[i]
            try:
                conn: asyncpg.Connection = await asyncpg.connect(host=host, port=port, **options)
            except _NEXT_HOST as exc:
                log.debug("database_host_passed_over", host=host, port=port, error=repr(exc))
                failures.append(f"{host}:{port}: {type(exc).__name__}: {exc}")
                continue
            last_good = i
            return conn
        raise NoServerTookTheConnection("; ".join(failures))

    return connect
