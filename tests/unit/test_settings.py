"""Settings.load(): defaults, then the environment, then overrides, for every entry point."""

from __future__ import annotations

import pydantic
import pytest

from burrow import Client, Settings, Worker, WorkerSettings
from burrow.demo import app
from burrow.errors import ConfigurationError

# Points at a closed port: a test that reached the database by mistake would fail, not hang.
ENV_URL = "postgresql://env@127.0.0.1:1/envdb"
FLAG_URL = "postgresql://flag@127.0.0.1:1/flagdb"


def test_load_without_variables_or_overrides_is_the_defaults() -> None:
    assert Settings.load({}) == Settings()


def test_load_reads_the_environment_then_the_overrides() -> None:
    environ = {
        "BURROW_DATABASE_URL": ENV_URL,
        "BURROW_NAMESPACE": "env-ns",
        "BURROW_AMQP_URL": "amqp://env/",
        "BURROW_CONCURRENCY": "3",
        "BURROW_LEASE_SECONDS": "7",
        "DW_WAKE_SIGNAL_TTL_SECONDS": "9",
        "DW_V2_MATCHING_ROLE_QUEUE_WAKE": "0",
    }
    settings = Settings.load(
        environ,
        namespace="flag-ns",
        worker={"lease_seconds": 2.5, "repair": None},
        wakes={"enabled": False},
    )
    assert settings.database_url == ENV_URL
    assert settings.amqp_url == "amqp://env/"
    assert settings.namespace == "flag-ns"
    assert settings.worker.concurrency == 3
    assert settings.worker.lease_seconds == 2.5
    assert settings.worker.repair is True  # None means "not given", not "off"
    assert settings.wakes.ttl_seconds == 9
    assert settings.wakes.worker_repoll is False
    assert settings.wakes.enabled is False


def test_load_reads_os_environ_when_called_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURROW_DATABASE_URL", ENV_URL)
    assert Settings.load().database_url == ENV_URL
    assert Settings.load(database_url=FLAG_URL).database_url == FLAG_URL
    assert Settings.load({}).database_url == Settings().database_url


@pytest.mark.parametrize(
    ("environ", "overrides", "field"),
    [
        ({"BURROW_CONCURRENCY": "0"}, {}, "concurrency"),
        ({}, {"worker": {"lease_seconds": -1}}, "lease_seconds"),
        ({}, {"worker": {"no_such_field": 1}}, "no_such_field"),
        ({"BURROW_MAX_PAYLOAD_BYTES": "lots"}, {}, "max_payload_bytes"),
    ],
)
def test_invalid_values_raise_a_configuration_error_naming_the_field(
    environ: dict[str, str], overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"invalid settings: {field}:") as caught:
        Settings.load(environ, **overrides)  # type: ignore[arg-type]
    assert isinstance(caught.value.__cause__, pydantic.ValidationError)


def test_from_env_still_reads_only_the_given_mapping() -> None:
    assert Settings.from_env({"BURROW_NAMESPACE": "a"}) == Settings.load({"BURROW_NAMESPACE": "a"})


async def test_worker_without_settings_honours_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURROW_DATABASE_URL", ENV_URL)
    monkeypatch.setenv("BURROW_NAMESPACE", "env-ns")
    monkeypatch.setenv("BURROW_CONCURRENCY", "3")
    worker = Worker(app)
    try:
        assert worker.settings.database_url == ENV_URL
        assert worker.settings.namespace == "env-ns"
        assert worker.settings.worker.concurrency == 3
        assert worker.store.engine.url.database == "envdb"
    finally:
        worker.executor.shutdown()
        await worker.store.close()


async def test_worker_with_settings_ignores_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURROW_DATABASE_URL", ENV_URL)
    monkeypatch.setenv("BURROW_NAMESPACE", "env-ns")
    given = Settings(database_url=FLAG_URL, worker=WorkerSettings(concurrency=2))
    worker = Worker(app, settings=given)
    try:
        assert worker.settings is given
        assert worker.store.engine.url.database == "flagdb"
    finally:
        worker.executor.shutdown()
        await worker.store.close()


async def test_client_connect_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURROW_DATABASE_URL", ENV_URL)
    monkeypatch.setenv("BURROW_NAMESPACE", "env-ns")
    monkeypatch.setenv("BURROW_WAKES", "0")  # no broker connection in a unit test
    async with await Client.connect() as client:
        assert client.settings.database_url == ENV_URL
        assert client.namespace == "env-ns"
        assert client.store.engine.url.database == "envdb"
    async with await Client.connect(FLAG_URL, namespace="flag-ns") as client:
        assert client.settings.database_url == FLAG_URL
        assert client.namespace == "flag-ns"


async def test_client_connect_with_settings_ignores_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURROW_NAMESPACE", "env-ns")
    given = Settings.load({"BURROW_WAKES": "0"}, database_url=FLAG_URL)
    async with await Client.connect(settings=given) as client:
        assert client.namespace == "default"
        assert client.store.engine.url.database == "flagdb"
    async with await Client.connect(settings=given, namespace="arg-ns") as client:
        assert client.namespace == "arg-ns"


async def test_client_connect_reads_the_given_environ_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BURROW_NAMESPACE", "process-ns")
    environ = {"BURROW_DATABASE_URL": ENV_URL, "BURROW_WAKES": "0"}
    async with await Client.connect(environ=environ) as client:
        assert client.namespace == "default"
        assert client.settings.database_url == ENV_URL


def test_sticky_settings_read_both_variable_names_and_the_burrow_name_wins() -> None:
    """S9: enabled and TTL from DW_V2_STICKY_EXECUTION_* or BURROW_STICKY_*; cache per worker."""
    settings = Settings.load(
        {
            "DW_V2_STICKY_EXECUTION_ENABLED": "0",
            "DW_V2_STICKY_EXECUTION_TTL_SECONDS": "120",
            "BURROW_STICKY_TTL_SECONDS": "60",
            "BURROW_STICKY_CACHE_CAPACITY": "0",
            "BURROW_STICKY_CACHE_MAX_BYTES": "1024",
        },
        sticky={"owner_stale_seconds": 5},
    )
    assert settings.sticky.enabled is False
    assert settings.sticky.ttl_seconds == 60
    assert settings.sticky.owner_stale_seconds == 5
    assert settings.worker.sticky_cache_capacity == 0
    assert settings.worker.sticky_cache_max_bytes == 1024
    assert Settings.load({}).sticky.ttl_seconds == 300
    assert Settings.load({}).worker.sticky_cache_capacity == 100


def test_sticky_ttl_is_bounded_like_the_protocol_says() -> None:
    """S9: a TTL over an hour is refused with the variable's field named."""
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        Settings.load({"BURROW_STICKY_TTL_SECONDS": "7200"})


def test_worker_with_sticky_disabled_keeps_no_cache() -> None:
    """S9: sticky execution off means no cache and no bindings, whatever the capacity."""
    worker = Worker(app, settings=Settings.load({}, sticky={"enabled": False}))
    assert not worker.sticky_cache.enabled
    assert worker.sticky_ttl is None


def test_worker_pool_is_sized_by_its_slots_unless_given() -> None:
    # A task holds a store connection only for its statements, so a few connections serve
    # many slots; each extra connection costs Postgres a plan of every statement it runs.
    assert WorkerSettings().pool_size() == 8  # 16 + 8 slots
    assert WorkerSettings(concurrency=100, workflow_concurrency=28).pool_size() == 32
    assert WorkerSettings(concurrency=1000).pool_size() == 32
    assert WorkerSettings(concurrency=1, workflow_concurrency=1).pool_size() == 8
    from_env = Settings.load({"BURROW_DATABASE_POOL_SIZE": "3"})
    assert from_env.worker.pool_size() == 3
    assert Settings.load(worker={"database_pool_size": 50}).worker.pool_size() == 50
    with pytest.raises(ConfigurationError, match="database_pool_size"):
        Settings.load({"BURROW_DATABASE_POOL_SIZE": "0"})


async def test_worker_store_pool_has_the_configured_size() -> None:
    given = Settings.load({"BURROW_WAKES": "0"}, database_url=FLAG_URL)
    worker = Worker(
        app, settings=given.model_copy(update={"worker": WorkerSettings(database_pool_size=5)})
    )
    try:
        assert worker.store.engine.pool.size() == 5  # type: ignore[attr-defined]
    finally:
        worker.executor.shutdown()
        await worker.store.close()


@pytest.mark.parametrize(
    "environ",
    [
        {"BURROW_DATABASE_URL": "mysql://burrow:s3cret-pw@db.internal:3306/burrow"},
        {"BURROW_AMQP_URL": "http://guest:s3cret-pw@mq.internal:5672/"},
    ],
)
def test_a_refused_url_is_named_without_its_password(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.load(environ)
    message = str(refused.value)
    assert "s3cret-pw" not in message
    assert "://burrow:***@db.internal" in message or "://guest:***@mq.internal" in message


def test_an_unparsable_database_url_is_named_without_its_password() -> None:
    from burrow.store.engine import async_url

    with pytest.raises(ConfigurationError) as refused:
        async_url("post gres://burrow:s3cret-pw@db/burrow")
    assert "s3cret-pw" not in str(refused.value)
    assert "burrow:***@db" in str(refused.value)


def test_libpq_sslmode_becomes_the_driver_ssl_and_other_parameters_are_refused_by_name() -> None:
    """Managed databases hand out `?sslmode=require`: it is taken, not a driver traceback."""
    from burrow.store.engine import async_url

    url = async_url("postgresql://burrow:pw@db/burrow?sslmode=require&target_session_attrs=any")
    assert dict(url.query) == {"ssl": "require", "target_session_attrs": "any"}
    socket = async_url("postgresql://burrow@/burrow?host=/var/run/postgresql")
    assert dict(socket.query) == {"host": "/var/run/postgresql"}
    assert url.drivername == "postgresql+asyncpg"
    with pytest.raises(ConfigurationError, match="sslmode='bogus' is not one of"):
        async_url("postgresql://burrow:s3cret-pw@db/burrow?sslmode=bogus")
    with pytest.raises(
        ConfigurationError, match=r"parameter\(s\) options not supported"
    ) as refused:
        async_url("postgresql://burrow:s3cret-pw@db/burrow?options=-c%20x%3D1")
    assert "s3cret-pw" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="cannot be parsed"):
        async_url("postgresql://burrow:s3cret-pw@db:54x/burrow")
