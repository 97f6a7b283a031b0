"""Fixtures of the worker tests that stop and restart Postgres: a private server per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.private_postgres import PrivatePostgres, private_postgres


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A private server the module stops and restarts (the shared one is never touched)."""
    with private_postgres() as instance:
        yield instance


@pytest.fixture
def pg(server: PrivatePostgres) -> PrivatePostgres:
    """The private server, running at the start of each test."""
    if not server.is_running():
        server.start()
    return server
