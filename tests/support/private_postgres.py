"""A throwaway Postgres server of a test's own, which it may stop and restart at will.

The shared test server must never be stopped: outage tests run against this one instead. The
server itself lives in bench/services.py, which the chaos soak shares.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from bench.services import PrivatePostgres, ServiceError, close_postgres, new_private_postgres
from burrow.store import migrate

__all__ = ["PrivatePostgres", "private_postgres"]


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started, migrated private server; stopped and removed afterwards."""
    try:
        server, root = new_private_postgres()
    except ServiceError as exc:
        pytest.skip(str(exc))
    try:
        server.start()
        asyncio.run(migrate.upgrade(server.url(), create_database=True))
        yield server
    finally:
        close_postgres(server, root)
