"""Long histories are read page by page behind the store API (S1, S6, D3).

A claim returns only the first page of a run's history and the store reads the rest, one page
per transaction, so a worker never holds the raw rows of a whole long history at once. The
page size is lowered to a few events so that a short history spans several pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from burrow.protocol.events import HistoryEvent
from burrow.store import Store, history
from tests.support.sticky import (
    COLD,
    HIT,
    TAIL,
    bound_run,
    claimed,
    register,
    signal,
)
from tests.support.store import start

PAGE = 3
SIGNALS = 10


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A small page, and the size of every page the store read after a claim."""
    monkeypatch.setattr(history, "HISTORY_PAGE_EVENTS", PAGE)
    read = history.read_history
    sizes: list[int] = []

    async def counted(*args: Any, **kwargs: Any) -> list[HistoryEvent]:
        page = await read(*args, **kwargs)
        if kwargs.get("limit") is not None:
            assert kwargs["limit"] == PAGE
            sizes.append(len(page))
        return page

    monkeypatch.setattr(history, "read_history", counted)
    yield sizes


def _sequences(events: list[HistoryEvent]) -> list[int]:
    return [event.sequence for event in events]


async def _signalled(store: Store, workflow_id: str, signals: int) -> None:
    for _ in range(signals):
        await signal(store, workflow_id)


async def test_cold_claim_of_a_long_history_returns_all_of_it(
    store: Store, pages: list[int]
) -> None:
    """S6, D3: a cold claim gets every event in order though the claim returned one page."""
    await register(store, "w1")
    run_id = await start(store, "wf-long")
    await _signalled(store, "wf-long", SIGNALS)

    task = await claimed(store, "w1")

    assert task.sticky.replay_mode is COLD
    assert _sequences(task.history) == list(range(1, SIGNALS + 2))
    assert sum(pages) == SIGNALS + 1 - PAGE  # the first page came with the claim
    assert max(pages) <= PAGE
    assert [e.event.event_type for e in task.history[1:]] == ["SignalReceived"] * SIGNALS
    assert task.history_bytes > 0
    assert _sequences(await store.read_history(run_id=run_id)) == _sequences(task.history)


async def test_warm_claim_of_a_long_tail_returns_the_whole_tail(
    store: Store, pages: list[int]
) -> None:
    """S5a, S7: a bound claim with tails on gets every event after the cached sequence."""
    await register(store, "w1")
    run_id, _ = await bound_run(store, owner="w1", workflow_id="wf-tail")
    await _signalled(store, "wf-tail", SIGNALS - 1)  # plus the one bound_run sent

    task = await claimed(store, "w1", sticky=TAIL)

    assert task.sticky.replay_mode is HIT
    assert task.history_after == 1
    assert _sequences(task.history) == list(range(2, SIGNALS + 2))
    assert _sequences(await store.read_history(run_id=run_id, after_seq=1)) == list(
        range(2, SIGNALS + 2)
    )


async def test_store_read_history_pages_through_a_long_history(
    store: Store, pages: list[int]
) -> None:
    """D3: Store.read_history returns the whole history, read in pages of the configured size."""
    await register(store, "w1")
    run_id = await start(store, "wf-read")
    await _signalled(store, "wf-read", SIGNALS)
    await claimed(store, "w1")
    pages.clear()

    events = await store.read_history(run_id=run_id)

    assert _sequences(events) == list(range(1, SIGNALS + 2))
    assert pages == [PAGE, PAGE, PAGE, 2]
