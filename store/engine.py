"""Engine creation and database bootstrap."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, make_url
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from burrow.errors import ConfigurationError, redact_passwords

DEFAULT_POOL_SIZE = 10
DEFAULT_APPLICATION_NAME = "burrow"


def async_url(database_url: str) -> URL:
    """Normalise a postgres URL to the asyncpg driver."""
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        shown = redact_passwords(database_url)
        raise ConfigurationError(f"not a database URL: {shown!r}") from exc
    return url.set(drivername="postgresql+asyncpg")


def create_engine(
    database_url: str,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    application_name: str = DEFAULT_APPLICATION_NAME,
) -> AsyncEngine:
    """Create the async engine every store transaction runs on.

    No pre-ping: it costs a BEGIN/ROLLBACK round trip per checkout; a dead connection surfaces as
    StoreUnavailable instead, and callers retry. `application_name` names the connections in
    `pg_stat_activity` (the matching role is counted by it).
    """
    engine = create_async_engine(
        async_url(database_url),
        pool_size=pool_size,
        # Overflow connections are closed on return: under load that means reconnecting all the
        # time. A fixed pool makes callers wait briefly for a connection instead.
        max_overflow=0,
        pool_timeout=60,
        connect_args={
            "server_settings": {
                "application_name": application_name,
                # Plan each prepared statement once per connection. Left to choose, Postgres
                # re-plans the store's claim statements on every execution (their LIMIT and flags
                # look selective), and planning was a third of its time per workflow. Statements
                # name their states as literals (fragments.state_is), so a generic plan still uses
                # the partial indexes.
                "plan_cache_mode": "force_generic_plan",
            },
            "timeout": 10,
        },
    )
    event.listen(engine.sync_engine, "connect", _uuids_as_text)
    return engine


def _uuids_as_text(dbapi_connection: Any, _record: Any) -> None:
    """Ids are str throughout the store: decode uuid columns as text in the driver itself.

    That spares per-row conversion in hot-path text statements, which have no column types.
    """
    dbapi_connection.run_async(
        lambda conn: conn.set_type_codec(
            "uuid", encoder=str, decoder=str, schema="pg_catalog", format="text"
        )
    )


async def create_database_if_missing(database_url: str) -> bool:
    """Create the database named by the URL when it does not exist; True when created."""
    url = async_url(database_url)
    name = url.database
    admin = create_async_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            exists = await conn.exec_driver_sql(
                "SELECT 1 FROM pg_database WHERE datname = $1", (name,)
            )
            if exists.first() is not None:
                return False
            quoted = '"' + str(name).replace('"', '""') + '"'
            await conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
            return True
    finally:
        await admin.dispose()
