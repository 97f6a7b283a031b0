"""Store tests run on a store whose after-commit sink records every ready notice (C1, C4)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from burrow.store import Store
from burrow.store.ready import ReadyTask


@pytest.fixture
def noticed() -> list[ReadyTask]:
    """The ready notices of the test's committed transactions, in order."""
    return []


@pytest.fixture
async def store(database_url: str, noticed: list[ReadyTask]) -> AsyncIterator[Store]:
    """The test's store, built with an after-commit sink that records every notice."""

    async def sink(notices: list[ReadyTask]) -> None:
        noticed.extend(notices)

    instance = Store.connect(database_url, pool_size=5, after_commit=sink)
    yield instance
    await instance.close()
