"""Concurrent starts on one store share a statement and its commit; each keeps its own answer.

A start asked for while a batch is being written goes in the next batch (store/start_batches.py),
so a burst of starts costs a few commits instead of one each, and a lone start is written at
once. What each caller gets must be what a start of its own would give.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from burrow.store import Store, runs
from burrow.store import schema as s
from burrow.store.errors import UnstorableText, WorkflowAlreadyStartedError
from burrow.store.models import RunInfo
from tests.support.store import NS, QUEUE, blob, rows


def _start(store: Store, workflow_id: str) -> Any:
    return store.start_workflow(
        namespace=NS, workflow_id=workflow_id, workflow_type="Flow", task_queue=QUEUE, input=blob()
    )


def _batches_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each batch the store writes, as it writes it."""
    sizes: list[int] = []
    create_runs = runs.create_runs

    async def counted(txn: Any, wanted: Any) -> list[RunInfo | None]:
        sizes.append(len(wanted))
        return await create_runs(txn, wanted)

    monkeypatch.setattr(runs, "create_runs", counted)
    return sizes


async def test_a_burst_of_starts_is_written_in_few_statements(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store invariant 3: each run gets WorkflowStarted and one ready task; far fewer commits."""
    sizes = _batches_counted(monkeypatch)

    started = await asyncio.gather(*(_start(store, f"burst-{i}") for i in range(50)))

    assert sorted(run.workflow_id for run in started) == sorted(f"burst-{i}" for i in range(50))
    assert sum(sizes) == 50 and len(sizes) <= 2
    events = await rows(store, s.history_events)
    assert sorted(e["run_id"] for e in events) == sorted(run.run_id for run in started)
    assert {(e["sequence"], e["event_type"]) for e in events} == {(1, "WorkflowStarted")}
    tasks = await rows(store, s.workflow_tasks)
    assert sorted(t["run_id"] for t in tasks) == sorted(run.run_id for run in started)
    assert {t["state"] for t in tasks} == {"ready"}


async def test_a_lone_start_is_written_alone(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _batches_counted(monkeypatch)
    first = await _start(store, "alone-1")
    second = await _start(store, "alone-2")
    assert sizes == [1, 1]
    assert first.run_id != second.run_id


async def test_the_same_workflow_id_twice_in_a_batch_starts_once(store: Store) -> None:
    """D2: one running run per workflow id, whether the second start is in the same batch."""
    outcomes = await asyncio.gather(
        _start(store, "twice"), _start(store, "twice"), return_exceptions=True
    )

    started = [o for o in outcomes if isinstance(o, RunInfo)]
    refused = [o for o in outcomes if isinstance(o, WorkflowAlreadyStartedError)]
    assert len(started) == 1 and len(refused) == 1
    assert [r["run_id"] for r in await rows(store, s.runs)] == [started[0].run_id]


async def test_a_start_the_database_refuses_fails_alone(store: Store) -> None:
    """Bad input loses nothing: the other starts of its batch are written."""
    outcomes = await asyncio.gather(
        _start(store, "fine-1"), _start(store, "nul\x00id"), _start(store, "fine-2"),
        return_exceptions=True,
    )  # fmt: skip

    assert isinstance(outcomes[0], RunInfo) and isinstance(outcomes[2], RunInfo)
    assert isinstance(outcomes[1], UnstorableText)
    assert sorted(r["workflow_id"] for r in await rows(store, s.runs)) == ["fine-1", "fine-2"]
