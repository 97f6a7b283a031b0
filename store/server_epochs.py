"""Which database server an engine's connections reach: a count that moves on every change.

After a failover to an asynchronous standby, commits the old primary acknowledged may be gone.
A worker keeps state that trusts acknowledged commits (a warm workflow instance stands at the
history its last completion wrote, S6); on a new server that history may end earlier. Each new
connection reads the server's start time (one round trip per connection, none per statement):
when it differs from the last one seen, the epoch moves, and state taken under an older epoch is
not trusted. A plain restart moves it too; that costs a cold replay, never a wrong one.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import event
from sqlalchemy.engine import AdaptedConnection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

log = structlog.get_logger("burrow.store")


class ServerEpochs:
    """The engine's current server epoch: 0 for the first server it reached, +1 per change."""

    def __init__(self) -> None:
        self.epoch = 0
        self._started_at: datetime | None = None

    def connected(self, started_at: datetime) -> None:
        """A connection reached the server started at `started_at`."""
        if started_at == self._started_at:
            return
        if self._started_at is not None:
            self.epoch += 1
            log.warning(
                "database_server_changed",
                epoch=self.epoch,
                server_started_at=started_at.isoformat(),
                previous_started_at=self._started_at.isoformat(),
            )
        self._started_at = started_at


def watch(engine: AsyncEngine) -> ServerEpochs:
    """Epochs of the servers `engine`'s new connections reach (see the module)."""
    epochs = ServerEpochs()

    def on_connect(dbapi_connection: AdaptedConnection, _record: ConnectionPoolEntry) -> None:
        started = dbapi_connection.run_async(
            lambda conn: conn.fetchval("SELECT pg_postmaster_start_time()")
        )
        epochs.connected(started)

    event.listen(engine.sync_engine, "connect", on_connect)
    return epochs
