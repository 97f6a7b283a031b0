"""pytest plugin (C5): real Postgres per test, from testcontainers or the local services.

Use it with `pytest_plugins = ["burrow.testing.pytest_plugin"]`. Each test gets its own
database cloned from a migrated template, so tests never see each other's tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from burrow.store import Store, migrate
from burrow.store.engine import async_url

DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _docker_available() -> bool:
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False  # no engine to ask; skip the client (it leaks a socket when it fails)
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """A Postgres server URL: BURROW_TEST_DATABASE_URL, else a container, else the local one."""
    explicit = os.environ.get("BURROW_TEST_DATABASE_URL")
    if explicit:
        yield explicit
        return
    if os.environ.get("BURROW_TEST_USE_CONTAINERS", "1") != "0" and _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver=None) as container:
            yield container.get_connection_url()
        return
    yield os.environ.get("BURROW_DATABASE_URL_SERVER", DEFAULT_SERVER_URL)


async def _admin(server_url: str, *statements: str) -> None:
    engine = create_async_engine(async_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


def _url_for(server_url: str, database: str) -> str:
    return async_url(server_url).set(database=database).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def burrow_template_database(postgres_server_url: str) -> Iterator[str]:
    """A migrated template database for this test session; dropped at the end."""
    name = f"burrow_template_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(_admin(postgres_server_url, f'CREATE DATABASE "{name}"'))
    asyncio.run(migrate.upgrade(_url_for(postgres_server_url, name), create_database=False))
    yield name
    asyncio.run(_admin(postgres_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def database_url(postgres_server_url: str, burrow_template_database: str) -> Iterator[str]:
    """A fresh, migrated database of this test's own (never the demo's `burrow`)."""
    name = f"burrow_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(
        _admin(
            postgres_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{burrow_template_database}"'
        )
    )
    url = _url_for(postgres_server_url, name).replace("postgresql+asyncpg://", "postgresql://")
    yield url
    with contextlib.suppress(Exception):
        asyncio.run(_admin(postgres_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A Store on the test's database."""
    instance = Store.connect(database_url, pool_size=5)
    yield instance
    await instance.close()
