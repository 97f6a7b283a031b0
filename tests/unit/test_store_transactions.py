"""Txn records a transaction's notices; Transactions hands on those of the committed attempt."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from burrow.store import errors, ready
from burrow.store.transactions import Transactions, Txn


@dataclass
class _Row:
    namespace: str = "ns"
    connection: str = "default"
    queue: str = "q"
    task_id: str = "t1"
    sticky_owner: str | None = "w1"


def test_a_ready_workflow_task_is_announced_to_its_sticky_owner() -> None:
    txn = Txn(conn=None)
    txn.notify_workflow_task(_Row())
    assert txn.notices == [ready.ReadyTask("ns", "default", "q", "workflow", "t1", None, "w1")]


def test_retract_drops_only_the_ready_tasks_named() -> None:
    txn = Txn(conn=None)
    txn.notify("ns", "default", "q", "activity", "a1")
    txn.notify("ns", "default", "q", "activity", "a2")
    txn.notify_run("ns", "a1", ready.Change.QUERY)
    txn.retract({"a1"})
    assert [getattr(n, "task_id", None) for n in txn.notices] == ["a2", None]


def test_what_was_recorded_after_a_checkpoint_can_be_discarded() -> None:
    txn = Txn(conn=None)
    txn.notify("ns", "default", "q", "workflow", "kept")
    mark = txn.checkpoint()
    txn.notify("ns", "default", "q", "workflow", "rolled-back")
    txn.discard_after(mark)
    assert [n.task_id for n in txn.notices if isinstance(n, ready.ReadyTask)] == ["kept"]


@pytest.fixture
def heard() -> list[list[ready.Notice]]:
    return []


@pytest.fixture
async def transactions(heard: list[list[ready.Notice]]) -> AsyncIterator[Transactions]:
    async def after_commit(notices: list[ready.Notice]) -> None:
        heard.append(list(notices))

    engine = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")
    yield Transactions(engine, after_commit=after_commit)
    await engine.dispose()


def _task_ids(heard: list[list[ready.Notice]]) -> list[list[str | None]]:
    return [[n.task_id for n in notices if isinstance(n, ready.ReadyTask)] for notices in heard]


@contextlib.asynccontextmanager
async def _opened() -> AsyncIterator[str]:
    yield "conn"


async def test_what_a_txn_records_reaches_after_commit_once_in_order(
    transactions: Transactions, heard: list[list[ready.Notice]]
) -> None:
    async def body(txn: Txn[str]) -> str:
        txn.notify("ns", "default", "q", "activity", "first")
        txn.notify_run("ns", "run-1", ready.Change.CLOSED)
        txn.notify("ns", "default", "q", "workflow", "second")
        return txn.conn

    assert await transactions._retried(_opened, body) == "conn"
    assert len(heard) == 1
    assert [type(n).__name__ for n in heard[0]] == ["ReadyTask", "RunChanged", "ReadyTask"]
    assert _task_ids(heard) == [["first", "second"]]


def test_the_store_keeps_no_context_variable() -> None:
    """Notices travel only on the Txn a function is given (no ambient collector to miss)."""
    assert not hasattr(ready, "_pending")


async def test_a_retried_attempt_hands_on_only_the_notices_of_the_attempt_that_committed(
    transactions: Transactions, heard: list[list[ready.Notice]]
) -> None:
    attempts: list[int] = []

    async def body(txn: Txn[str]) -> None:
        attempts.append(len(attempts))
        txn.notify("ns", "default", "q", "workflow", f"attempt-{len(attempts)}")
        if len(attempts) == 1:
            raise errors.RetryableConflict("deadlock detected")

    await transactions._retried(_opened, body)
    assert len(attempts) == 2
    assert [
        [n.task_id for n in notices if isinstance(n, ready.ReadyTask)] for notices in heard
    ] == [["attempt-2"]]


async def test_a_failed_transaction_hands_on_nothing(
    transactions: Transactions, heard: list[list[ready.Notice]]
) -> None:
    async def body(txn: Txn[str]) -> None:
        txn.notify("ns", "default", "q", "workflow", "never")
        raise errors.StaleLease(task_id="t1", lease_token="x")

    with pytest.raises(errors.StaleLease):
        await transactions._retried(_opened, body)
    assert heard == []
