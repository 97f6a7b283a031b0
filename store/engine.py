"""Engine creation and database bootstrap."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, make_url
from sqlalchemy.engine import URL, AdaptedConnection
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from burrow.errors import ConfigurationError, redact_passwords
from burrow.store.database_urls import (
    InvalidDatabaseUrl,
    query_hosts,
    session_attrs,
    split_authority_hosts,
)
from burrow.store.failover_connect import failover_connector

DEFAULT_POOL_SIZE = 10
DEFAULT_APPLICATION_NAME = "burrow"


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
# URL parameters the driver takes as they are (`host=/var/run/postgresql`: a Unix socket);
# libpq's `sslmode` is renamed to its `ssl`, and `port` goes with `host` (a failover set).
_DRIVER_PARAMETERS = frozenset({"host", "port", "ssl", "target_session_attrs"})


def async_url(database_url: str) -> URL:
    """Normalise a postgres URL to the asyncpg driver.

    libpq's `?sslmode=require` (what managed databases hand out) becomes the driver's `ssl`;
    a parameter the driver would choke on is refused here, by name. A failover set of hosts
    (`postgresql://u@h1:5432,h2:5432/burrow`, or `?host=h1:5432&host=h2:5432`) becomes repeated
    `host=h:p` parameters, which asyncpg tries in order; it connects only to the server that
    takes writes (`target_session_attrs=read-write`, the default for a set; see
    store/database_urls.py), so after a failover new connections find the promoted standby.

    Raises:
        ConfigurationError: not a URL, an unknown sslmode or an unsupported parameter;
            InvalidDatabaseUrl (a ConfigurationError) for a malformed list of hosts.
    """
    shown = str(redact_passwords(database_url))
    try:
        rest, hosts = split_authority_hosts(database_url, shown)
        url = make_url(rest)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        raise ConfigurationError(f"database URL {shown!r} cannot be parsed") from exc
    query = dict(url.query)
    if hosts and ("host" in query or "port" in query):
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: name the hosts either in the authority or as host="
            " parameters, not both"
        )
    listed = query.get("host")
    if isinstance(listed, tuple) or "port" in query or (listed and "," in listed):
        if url.host is not None:
            raise InvalidDatabaseUrl(
                f"database URL {shown!r}: name the hosts either in the authority or as host="
                " parameters, not both"
            )
        hosts = query_hosts(query.pop("host", ()), query.pop("port", None), shown)
        if not hosts:
            raise InvalidDatabaseUrl(f"database URL {shown!r}: port= without host=")
    if "sslmode" in query:
        mode = query.pop("sslmode")
        if mode not in SSL_MODES:
            raise ConfigurationError(
                f"database URL {shown!r}: sslmode={mode!r} is not one of {', '.join(SSL_MODES)}"
            )
        query.setdefault("ssl", mode)
    unsupported = sorted(set(query) - _DRIVER_PARAMETERS)
    if unsupported:
        raise ConfigurationError(
            f"database URL {shown!r}: parameter(s) {', '.join(unsupported)} not supported;"
            " it may carry host, port, sslmode, ssl and target_session_attrs"
        )
    attrs = session_attrs(query.pop("target_session_attrs", None), hosts=len(hosts), shown=shown)
    if attrs is not None:
        query["target_session_attrs"] = attrs
    if len(hosts) == 1:  # `?host=h&port=p`: one server after all
        name, _, port = hosts[0].partition(":")
        url = url.set(host=name, port=int(port))
    elif hosts:
        query["host"] = tuple(hosts)
    return url.set(drivername="postgresql+asyncpg", query=query)


def create_engine(
    database_url: str,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    application_name: str = DEFAULT_APPLICATION_NAME,
) -> AsyncEngine:
    """Create the async engine every store transaction runs on.

    No pre-ping: it costs a BEGIN/ROLLBACK round trip per checkout. A pooled connection the
    driver already knows closed (a Postgres restart) is replaced at checkout for free; one that
    dies otherwise surfaces as StoreUnavailable, and callers retry. `application_name` names the
    connections in `pg_stat_activity` (the matching role is counted by it).

    A failover URL (several hosts) connects only to the server that takes writes, each host
    tried in turn (store/failover_connect.py): after a promotion, the pool's connections to the
    dead primary fail once and are replaced by connections to the promoted standby; nothing is
    pinned to a host (prepared statements live and die with their connection).
    """
    url = async_url(database_url)
    connect_args: dict[str, Any] = {
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
    }
    # A failover set of hosts: each host is tried within a timeout of its own (failover_connect).
    failover = failover_connector(url, connect_args)
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        # Overflow connections are closed on return: under load that means reconnecting all the
        # time. A fixed pool makes callers wait briefly for a connection instead.
        max_overflow=0,
        pool_timeout=60,
        **({"connect_args": connect_args} if failover is None else {"async_creator": failover}),
    )
    event.listen(engine.sync_engine, "connect", _uuids_as_text)
    event.listen(engine.sync_engine, "checkout", _replace_if_closed)
    return engine


def _replace_if_closed(
    dbapi_connection: AdaptedConnection,
    _record: ConnectionPoolEntry,
    _proxy: PoolProxiedConnection,
) -> None:
    """A pooled connection the server closed meanwhile is replaced before any use (issue 25).

    After a restart every pooled connection is closed, and the driver read the server's goodbye
    while it sat idle: without this the first call after each restart failed with "connection is
    closed". The check is a flag read, no round trip; the pool then connects afresh (once).
    """
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("pooled connection closed by the server (restarted?)")


def _uuids_as_text(dbapi_connection: AdaptedConnection, _record: ConnectionPoolEntry) -> None:
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
    admin_url = url.set(database="postgres")
    failover = failover_connector(admin_url, {"timeout": 10})
    admin = create_async_engine(
        admin_url,
        isolation_level="AUTOCOMMIT",
        **({} if failover is None else {"async_creator": failover}),
    )
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
