"""libpq failover URLs become what SQLAlchemy's asyncpg dialect hands the driver (C2, D4)."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

from burrow.errors import ConfigurationError
from burrow.store.database_urls import InvalidDatabaseUrl
from burrow.store.engine import async_url


def _driver_args(database_url: str) -> dict[str, object]:
    """The keyword arguments asyncpg.connect() gets for `database_url`."""
    _, kwargs = asyncpg_dialect().create_connect_args(async_url(database_url))
    return dict(kwargs)


@pytest.mark.parametrize(
    "database_url",
    [
        "postgresql://burrow:pw@db1:5432,db2:5433/burrow?target_session_attrs=read-write",
        "postgresql://burrow:pw@/burrow?host=db1:5432&host=db2:5433",
        "postgresql://burrow:pw@/burrow?host=db1,db2&port=5432,5433",
    ],
    ids=["authority", "repeated-host", "host-and-port-lists"],
)
def test_every_failover_form_reaches_the_driver_as_host_and_port_lists_d4(
    database_url: str,
) -> None:
    """D4 (C2): a failover set of hosts reaches asyncpg as lists it tries in order, writable
    sessions only, so new connections land on whichever server is the primary."""
    args = _driver_args(database_url)
    assert args["host"] == ["db1", "db2"]
    assert args["port"] == [5432, 5433]
    assert args["target_session_attrs"] == "read-write"
    assert (args["user"], args["password"], args["database"]) == ("burrow", "pw", "burrow")


def test_a_failover_set_without_ports_takes_libpq_default_port_and_primary_is_kept() -> None:
    args = _driver_args("postgresql://u@db1,db2/burrow?target_session_attrs=primary")
    assert (args["host"], args["port"]) == (["db1", "db2"], [5432, 5432])
    assert args["target_session_attrs"] == "primary"


def test_one_host_urls_are_unchanged() -> None:
    assert _driver_args("postgresql://u@db:6543/burrow") == {
        "host": "db",
        "port": 6543,
        "user": "u",
        "database": "burrow",
    }
    one = _driver_args("postgresql://u@/burrow?host=db&port=6543")
    assert (one["host"], one["port"]) == ("db", 6543)
    assert _driver_args("postgresql://u@/burrow?host=/run/pg")["host"] == "/run/pg"
    # One server may be reached on any terms, a standby included (a read-only tool's choice).
    assert _driver_args("postgresql://u@db/b?target_session_attrs=any")["target_session_attrs"] == (
        "any"
    )


@pytest.mark.parametrize(
    ("database_url", "message"),
    [
        ("postgresql://u:s3cret@db1:1,db2:x/b", "'db2:x' in the list of hosts: the port"),
        ("postgresql://u:s3cret@db1:1,db2:70000/b", "the port must be a number"),
        ("postgresql://u:s3cret@db1:1,/b", "every member needs a host"),
        ("postgresql://u:s3cret@[::1]:1,db2:2/b", "an IPv6 address cannot be in a list"),
        ("postgresql://u:s3cret@/b?host=db1:1,/run/pg", "a Unix socket cannot be in a list"),
        ("postgresql://u:s3cret@db1:1,db2:2/b?host=db3:3", "either in the authority or as host="),
        ("postgresql://u:s3cret@db0/b?host=db1:1&host=db2:2", "either in the authority or as"),
        ("postgresql://u:s3cret@/b?host=db1,db2&port=1,2,3", "2 hosts but 3 ports"),
        ("postgresql://u:s3cret@/b?host=db1:1,db2:2&port=5", "as host=h:p or in port=, not both"),
        ("postgresql://u:s3cret@db1,db2/b?target_session_attrs=any", "must be read-write"),
        ("postgresql://u:s3cret@db1,db2/b?target_session_attrs=standby", "must be read-write"),
        ("postgresql://u:s3cret@db/b?target_session_attrs=bogus", "is not one of any, primary"),
    ],
)
def test_a_malformed_failover_url_is_a_typed_error_naming_the_fault(
    database_url: str, message: str
) -> None:
    """Bad input gets a clear typed error, its password masked, before any connection."""
    with pytest.raises(InvalidDatabaseUrl, match=message) as refused:
        async_url(database_url)
    assert isinstance(refused.value, ConfigurationError)  # the CLI's exit 2 path takes it
    assert "s3cret" not in str(refused.value)


def test_a_failover_url_survives_rendering_for_alembic_and_test_databases() -> None:
    """The migration config and the pytest plugin render the URL and parse it again."""
    url = async_url("postgresql://u:pw@db1:1,db2:2/burrow")
    again = async_url(url.set(database="other").render_as_string(hide_password=False))
    assert again.query["host"] == ("db1:1", "db2:2")
    assert again.database == "other"
