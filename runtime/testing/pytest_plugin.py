"""pytest plugin (C5): Burrow on real Postgres and RabbitMQ, in your test suites and in ours.

Installing burrow registers it through the `pytest11` entry point: no `pytest_plugins` line is
needed (a leftover `pytest_plugins = ["burrow.testing.pytest_plugin"]` is harmless). Async
fixtures need pytest-asyncio (installed with `burrow[test]`).

Where the services come from, per service: `BURROW_TEST_DATABASE_URL` / `BURROW_TEST_AMQP_URL`
when set; else session-scoped testcontainers (`PostgresContainer`, `RabbitMqContainer`) when a
Docker engine answers (unless `BURROW_TEST_USE_CONTAINERS=0`); else the local servers
(`postgresql://postgres@127.0.0.1:5432/postgres`, `amqp://guest:guest@127.0.0.1:5672/`). Each is
probed with a short timeout, and a test that needs one that is not reachable is skipped with a
message saying which and how to point at it.

Fixtures (all named `burrow_*`, so they never shadow a suite's own):

- `burrow_postgres_url`, `burrow_amqp_url` (session): the servers.
- `burrow_database_url`: a fresh database of the test's own, cloned from a migrated template
  (clones are made ahead of need and dropped behind, on a thread of their own).
- `burrow_amqp_prefix`: RabbitMQ names of the test's own, so runs never wake other tests' workers.
- `burrow_settings`: `Settings` on those; `burrow_env` also exports them as BURROW_* variables.
- `burrow_app`: the App under test; override the fixture or mark `@pytest.mark.burrow_app(app)`.
- `burrow_worker`: a `Worker` for `burrow_app`, started in-process and drained at teardown.
- `burrow_client`: a connected `Client`; `burrow_store`: a `Store` on the test database.

`burrow.testing.wait_for_result()` and `read_history()` help assert on the runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import threading
import urllib.parse
import uuid
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from burrow.app import App
    from burrow.client import Client
    from burrow.config import Settings
    from burrow.store import Store
    from burrow.worker.worker import Worker

try:
    from pytest_asyncio import fixture as async_fixture
except ImportError:  # pragma: no cover - without pytest-asyncio only the sync fixtures work
    async_fixture = pytest.fixture  # type: ignore[assignment]

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
POSTGRES_IMAGE = "postgres:16"
RABBITMQ_IMAGE = "rabbitmq:3-management"
# Long enough for a loaded machine to accept a connection, short enough to skip a suite quickly.
PROBE_TIMEOUT_SECONDS = 2.0
# A test that leaves runs open must not wait out the production drain (30 s) at teardown.
WORKER_DRAIN_SECONDS = 5.0
APP_MARKER = "burrow_app"
# An admin statement may wait for a busy server (a checkpoint, backends ending under FORCE).
ADMIN_TIMEOUT_SECONDS = 120.0
# Clones made ahead: one is enough while each test takes longer than a clone does.
CLONES_AHEAD = 1

T = TypeVar("T")


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker, so suites run with --strict-markers accept it."""
    config.addinivalue_line(
        "markers", f"{APP_MARKER}(app): the burrow.App that the burrow_worker fixture serves"
    )


# -- where the services are ------------------------------------------------------------------------


def _docker_available() -> bool:
    if os.environ.get("BURROW_TEST_USE_CONTAINERS", "1") == "0":
        return False
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


def _addresses(url: str, default_port: int) -> list[tuple[str, int]]:
    """Where the server of `url` listens; each member of a Postgres failover set (h1:p1,h2:p2)."""
    from burrow.store.database_urls import split_authority_hosts

    _, hosts = split_authority_hosts(url, url)
    if hosts:
        return [(host, int(port)) for host, _, port in (h.rpartition(":") for h in hosts)]
    parts = urllib.parse.urlsplit(url)
    return [(parts.hostname or "127.0.0.1", parts.port or default_port)]


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def _require(service: str, variable: str, default_url: str, default_port: int) -> str:
    """The URL when its server accepts connections; otherwise skip, saying how to fix it."""
    explicit = os.environ.get(variable)
    addresses = _addresses(explicit or default_url, default_port)
    if not any(_reachable(host, port) for host, port in addresses):
        host, port = addresses[0]
        if explicit:
            source = f"set by {variable}"
        elif os.environ.get("BURROW_TEST_USE_CONTAINERS", "1") == "0":
            source = "the local default; containers are off (BURROW_TEST_USE_CONTAINERS=0)"
        else:
            source = "the local default; no Docker engine answers for testcontainers"
        pytest.skip(
            f"Burrow test services: {service} is not reachable at {host}:{port} ({source});"
            f" start {service} there, or set {variable} to a reachable server"
        )
    return explicit or default_url


@pytest.fixture(scope="session")
def burrow_postgres_url() -> Iterator[str]:
    """A Postgres server URL (its `postgres` database); tests create databases of their own."""
    explicit = os.environ.get("BURROW_TEST_DATABASE_URL")
    if not explicit and _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer(POSTGRES_IMAGE, driver=None) as container:
            yield str(container.get_connection_url())
        return
    yield _require("Postgres", "BURROW_TEST_DATABASE_URL", DEFAULT_POSTGRES_URL, 5432)


@pytest.fixture(scope="session")
def burrow_amqp_url() -> Iterator[str]:
    """A RabbitMQ URL; tests keep apart by name prefix (`burrow_amqp_prefix`)."""
    explicit = os.environ.get("BURROW_TEST_AMQP_URL")
    if not explicit and _docker_available():
        from testcontainers.rabbitmq import RabbitMqContainer

        with RabbitMqContainer(RABBITMQ_IMAGE) as container:
            host = container.get_container_host_ip()
            port = container.get_exposed_port(container.port)
            yield f"amqp://{container.username}:{container.password}@{host}:{port}/"
        return
    yield _require("RabbitMQ", "BURROW_TEST_AMQP_URL", DEFAULT_AMQP_URL, 5672)


# -- a database and RabbitMQ names per test --------------------------------------------------------


async def _admin(server_url: str, *statements: str) -> None:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    from burrow.store.engine import async_url

    engine = create_async_engine(async_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


def _url_for(server_url: str, database: str) -> str:
    from burrow.store.engine import async_url

    url = async_url(server_url).set(database=database).render_as_string(hide_password=False)
    return url.replace("postgresql+asyncpg://", "postgresql://")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class TemplateClones:
    """Fresh databases cloned from `template`: made ahead of need, dropped behind.

    `CREATE DATABASE … TEMPLATE` and `DROP DATABASE … WITH (FORCE)` take tens of milliseconds
    each, a minute over a suite of a thousand tests when each test waits for both. A thread of
    its own runs them on one admin engine: a clone is made while the test before it runs, and a
    used one is dropped while the next runs.
    """

    def __init__(self, server_url: str, template: str, *, ahead: int = CLONES_AHEAD) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        from burrow.store.engine import async_url

        self._template = template
        self._ahead = ahead
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="burrow-test-databases", daemon=True
        )
        self._thread.start()
        # Two connections: a drop that waits for backends to end does not hold up a clone.
        self._engine: AsyncEngine = create_async_engine(
            async_url(server_url),
            isolation_level="AUTOCOMMIT",
            pool_size=2,
            max_overflow=0,
            pool_timeout=ADMIN_TIMEOUT_SECONDS,
        )
        self._ready: deque[concurrent.futures.Future[str]] = deque()
        self._drops: list[concurrent.futures.Future[None]] = []

    def take(self) -> str:
        """The name of a fresh clone, made ahead if it could be; raises if the clone failed."""
        while len(self._ready) <= self._ahead:
            self._ready.append(self._submit(self._clone()))
        name = self._ready.popleft().result(timeout=ADMIN_TIMEOUT_SECONDS)
        self._ready.append(self._submit(self._clone()))
        return name

    def release(self, name: str) -> None:
        """Drop a clone in the background (its connections are ended: WITH FORCE)."""
        self._drops = [drop for drop in self._drops if not drop.done()]
        self._drops.append(self._submit(self._drop(name)))

    def close(self) -> None:
        """Drop the spare clones and wait for every drop; then stop the thread."""
        try:
            while self._ready:
                with contextlib.suppress(Exception):
                    self.release(self._ready.popleft().result(timeout=ADMIN_TIMEOUT_SECONDS))
            concurrent.futures.wait(self._drops, timeout=ADMIN_TIMEOUT_SECONDS)
            self._submit(self._engine.dispose()).result(timeout=ADMIN_TIMEOUT_SECONDS)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=ADMIN_TIMEOUT_SECONDS)
            if not self._thread.is_alive():
                self._loop.close()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _execute(self, statement: str) -> None:
        import sqlalchemy as sa

        async with self._engine.connect() as conn:
            await conn.execute(sa.text(statement))

    async def _clone(self) -> str:
        name = f"burrow_test_{uuid.uuid4().hex[:12]}"
        await self._execute(f"CREATE DATABASE {_quoted(name)} TEMPLATE {_quoted(self._template)}")
        return name

    async def _drop(self, name: str) -> None:
        with contextlib.suppress(Exception):  # a drop that fails leaves a database, nothing else
            await self._execute(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")


@pytest.fixture(scope="session")
def burrow_template_database(burrow_postgres_url: str) -> Iterator[str]:
    """A migrated template database for this test session; dropped at the end."""
    from burrow.store import migrate

    name = f"burrow_template_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(_admin(burrow_postgres_url, f'CREATE DATABASE "{name}"'))
    asyncio.run(migrate.upgrade(_url_for(burrow_postgres_url, name), create_database=False))
    yield name
    asyncio.run(_admin(burrow_postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def _burrow_template_clones(
    burrow_postgres_url: str, burrow_template_database: str
) -> Iterator[TemplateClones]:
    """Clones of the template, made ahead and dropped behind on a thread of their own."""
    clones = TemplateClones(burrow_postgres_url, burrow_template_database)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture
def burrow_database_url(
    burrow_postgres_url: str, _burrow_template_clones: TemplateClones
) -> Iterator[str]:
    """A fresh, migrated database of this test's own, dropped after the test."""
    name = _burrow_template_clones.take()
    try:
        yield _url_for(burrow_postgres_url, name)
    finally:
        _burrow_template_clones.release(name)


@pytest.fixture
def burrow_amqp_prefix() -> str:
    """RabbitMQ exchange and queue names of this test's own (`BURROW_AMQP_PREFIX`)."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def burrow_settings(
    request: pytest.FixtureRequest, burrow_database_url: str, burrow_amqp_prefix: str
) -> Settings:
    """Settings on the test's database and RabbitMQ names; other BURROW_* variables apply.

    With `BURROW_WAKES=0` no broker is needed (workers run on durable polling alone), so
    RabbitMQ is neither probed nor required.
    """
    from burrow.config import Settings

    base = Settings.load(database_url=burrow_database_url, wakes={"prefix": burrow_amqp_prefix})
    if not base.wakes.enabled:
        return base
    amqp_url: str = request.getfixturevalue("burrow_amqp_url")
    return base.model_copy(update={"amqp_url": amqp_url})


@pytest.fixture
def burrow_env(burrow_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Export the test's settings as BURROW_* variables, and return them.

    For code under test that calls `Settings.load()`, `Client.connect()` or `Worker(app)` without
    settings, or starts `burrow` processes.
    """
    monkeypatch.setenv("BURROW_DATABASE_URL", burrow_settings.database_url)
    monkeypatch.setenv("BURROW_AMQP_URL", burrow_settings.amqp_url)
    monkeypatch.setenv("BURROW_AMQP_PREFIX", burrow_settings.wakes.prefix)
    return burrow_settings


# -- Burrow itself ---------------------------------------------------------------------------------


@async_fixture
async def burrow_store(burrow_database_url: str) -> AsyncIterator[Store]:
    """A Store on the test's database, for assertions on durable state."""
    from burrow.store import Store

    instance = Store.connect(burrow_database_url, pool_size=5)
    yield instance
    await instance.close()


@pytest.fixture
def burrow_app(request: pytest.FixtureRequest) -> App:
    """The App that `burrow_worker` serves.

    Override this fixture in your conftest.py or test module, or mark the test (or module, with
    `pytestmark`) `@pytest.mark.burrow_app(app)`.
    """
    from burrow.app import App

    marker = request.node.get_closest_marker(APP_MARKER)
    if marker is None:
        pytest.fail(
            "burrow_worker needs an App: override the burrow_app fixture"
            " (`@pytest.fixture def burrow_app() -> App: return app`) or mark the test"
            " `@pytest.mark.burrow_app(app)`",
            pytrace=False,
        )
    app = marker.args[0] if marker.args else None
    if not isinstance(app, App):
        pytest.fail(
            f"@pytest.mark.burrow_app takes one burrow.App, got {marker.args!r}", pytrace=False
        )
    return app


@async_fixture
async def burrow_worker(burrow_app: App, burrow_settings: Settings) -> AsyncIterator[Worker]:
    """A Worker for `burrow_app`, running in the test's event loop until teardown.

    It polls the test's database and consumes its RabbitMQ names; at teardown it drains
    (running tasks get a few seconds to finish) and deregisters.
    """
    from burrow.worker.worker import Worker

    worker = Worker(burrow_app, settings=burrow_settings)
    await worker.start()
    try:
        yield worker
    finally:
        await worker.shutdown(drain_seconds=WORKER_DRAIN_SECONDS)


@async_fixture
async def burrow_client(burrow_settings: Settings) -> AsyncIterator[Client]:
    """A Client on the test's database and RabbitMQ names; closed at teardown."""
    from burrow.client import Client

    client = await Client.connect(settings=burrow_settings)
    try:
        yield client
    finally:
        await client.close()
