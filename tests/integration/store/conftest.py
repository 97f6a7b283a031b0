"""Store tests run on a store whose after-commit sink records every notice (C1, C4)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from burrow.store import Store
from burrow.store.ready import Notice, ReadyTask, RunChanged


@pytest.fixture
def noticed() -> list[ReadyTask]:
    """The ready notices of the test's committed transactions, in order."""
    return []


@pytest.fixture
def run_changes() -> list[RunChanged]:
    """The run changes (result wakes) of the test's committed transactions, in order."""
    return []


@pytest.fixture
async def store(
    database_url: str, noticed: list[ReadyTask], run_changes: list[RunChanged]
) -> AsyncIterator[Store]:
    """The test's store, built with an after-commit sink that records every notice."""

    async def sink(notices: list[Notice]) -> None:
        for notice in notices:
            if isinstance(notice, ReadyTask):
                noticed.append(notice)
            else:
                run_changes.append(notice)

    instance = Store.connect(database_url, pool_size=5, after_commit=sink)
    yield instance
    await instance.close()
