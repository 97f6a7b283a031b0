"""libpq database URLs naming one server or a failover set, as the asyncpg driver takes them.

libpq lists a failover set in the authority (`postgresql://u@h1:5432,h2:5432/burrow`) or in
`host` parameters (`?host=h1:5432&host=h2:5432`, or `?host=h1,h2&port=5432,5433`).
SQLAlchemy's URL parser reads only repeated `host=h:p` parameters, and its asyncpg dialect hands
those to the driver as lists of hosts and ports, which asyncpg tries in order, keeping the first
whose session matches `target_session_attrs`. Every form is rewritten to that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from burrow.errors import ConfigurationError

DEFAULT_PORT = 5432
SESSION_ATTRS = ("any", "primary", "standby", "prefer-standby", "read-write", "read-only")
# The store writes on every connection: of a failover set it may only use the writable server.
WRITABLE_SESSION_ATTRS = ("read-write", "primary")


class InvalidDatabaseUrl(ConfigurationError):
    """A database URL whose hosts, ports or session attributes cannot work.

    The message names the URL (its password masked) and what is wrong with it.
    """


def split_authority_hosts(database_url: str, shown: str) -> tuple[str, list[str]]:
    """The URL without a comma-separated host list in its authority, and that list as `h:p`s.

    A URL whose authority names one host (or none) comes back as it is, with no hosts.
    """
    parts = urlsplit(database_url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if "," not in hostlist:
        return database_url, []
    hosts = [host_port(entry, shown) for entry in hostlist.split(",")]
    rest = f"{parts.scheme}://{userinfo}{at}{parts.path}"
    rest += f"?{parts.query}" if parts.query else ""
    return rest, hosts


def query_hosts(
    hosts: str | Sequence[str], ports: str | Sequence[str] | None, shown: str
) -> list[str]:
    """The `host:port`s named by `host=` and `port=` parameters (repeated or comma-separated)."""
    names = [name for entry in _listed(hosts) for name in entry.split(",")]
    if ports is None:
        return [host_port(name, shown) for name in names]
    numbers = [number for entry in _listed(ports) for number in entry.split(",")]
    if len(numbers) not in (1, len(names)):
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: {len(names)} hosts but {len(numbers)} ports;"
            " give one port for all hosts or one per host"
        )
    if any(":" in name for name in names):
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: give ports as host=h:p or in port=, not both"
        )
    numbers = numbers * len(names) if len(numbers) == 1 else numbers
    return [host_port(f"{name}:{port}", shown) for name, port in zip(names, numbers, strict=True)]


def host_port(entry: str, shown: str) -> str:
    """One member of a failover set as `host:port` (libpq's default port when it has none)."""
    if entry.startswith("["):
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: {entry!r}: an IPv6 address cannot be in a list of hosts;"
            " name that server by a host name"
        )
    name, colon, port = entry.partition(":")
    if not name or name.startswith("/"):
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: {entry!r} in the list of hosts: every member needs a host"
            " name or address (a Unix socket cannot be in a list)"
        )
    if not colon:
        return f"{name}:{DEFAULT_PORT}"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: {entry!r} in the list of hosts: the port must be a number"
            " from 1 to 65535"
        )
    return f"{name}:{int(port)}"


def session_attrs(value: str | Sequence[str] | None, *, hosts: int, shown: str) -> str | None:
    """The `target_session_attrs` to pass: checked, and `read-write` for a failover set.

    With several hosts and none given, libpq would take any server, standbys included; the store
    would then fail its first write. So a failover set must name (or gets) a writable session.
    """
    if value is not None and not isinstance(value, str):
        raise InvalidDatabaseUrl(f"database URL {shown!r}: target_session_attrs given twice")
    if value is not None and value not in SESSION_ATTRS:
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: target_session_attrs={value!r} is not one of"
            f" {', '.join(SESSION_ATTRS)}"
        )
    if hosts < 2:
        return value
    if value is None:
        return "read-write"
    if value not in WRITABLE_SESSION_ATTRS:
        raise InvalidDatabaseUrl(
            f"database URL {shown!r}: with several hosts target_session_attrs must be read-write"
            f" or primary (the store writes on every connection), not {value!r}"
        )
    return value


def _listed(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
