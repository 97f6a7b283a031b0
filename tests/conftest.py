"""Shared fixtures: real services only; BURROW_*/DW_* variables never leak into tests.

The services, databases and RabbitMQ prefixes come from Burrow's own pytest plugin
(`burrow.testing.pytest_plugin`, loaded through its `pytest11` entry point): this suite is one of
its users. The short names below are this suite's aliases of the plugin's `burrow_*` fixtures.
"""

from __future__ import annotations

import os

import pytest

from burrow.store import Store

_KEEP = {"BURROW_TEST_DATABASE_URL", "BURROW_TEST_AMQP_URL", "BURROW_TEST_USE_CONTAINERS"}

# The longest modules (a soak, default retry backoffs, restarts of a private broker) start first,
# so that the workers running tests side by side (pytest-xdist) do not end on one of them alone.
LONGEST_FIRST = (
    "tests/acceptance/test_soak.py",
    "tests/acceptance/test_default_retry.py",
    "tests/acceptance/test_cli_workflow.py",
    "tests/acceptance/test_cli_input.py",
    "tests/acceptance/test_broker_faults.py",
    "tests/acceptance/test_id_reuse_policy.py",
    "tests/integration/worker/test_store_outages.py",
    "tests/acceptance/test_replay_verify.py",
    "tests/integration/worker/test_idle_sessions.py",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first."""
    items.sort(key=_rank)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, burrow_amqp_prefix: str) -> None:
    for key in list(os.environ):
        if (key.startswith("BURROW_") or key.startswith("DW_")) and key not in _KEEP:
            monkeypatch.delenv(key, raising=False)
    # Each test gets RabbitMQ names of its own, so runs never wake each other's workers.
    monkeypatch.setenv("BURROW_AMQP_PREFIX", burrow_amqp_prefix)
    amqp = os.environ.get("BURROW_TEST_AMQP_URL")
    if amqp:
        monkeypatch.setenv("BURROW_AMQP_URL", amqp)


@pytest.fixture
def postgres_server_url(burrow_postgres_url: str) -> str:
    """The Postgres server (its `postgres` database)."""
    return burrow_postgres_url


@pytest.fixture
def database_url(burrow_database_url: str) -> str:
    """A fresh, migrated database of this test's own (never the demo's `burrow`)."""
    return burrow_database_url


@pytest.fixture
def store(burrow_store: Store) -> Store:
    """A Store on the test's database."""
    return burrow_store
