"""OutcomeWaiter: a commit of this process wakes its waiters; a close carries its outcome."""

from __future__ import annotations

import asyncio
from typing import cast

from burrow.outcomes import OutcomeWaiter
from burrow.store import Store
from burrow.store.ready import Change, RunChanged, RunOutcome

# Long enough that only a notice can end a wait within the test's own timeout.
NO_FALLBACK_SECONDS = 60.0


class _NoStore:
    async def closed_runs(self, run_ids: list[str]) -> dict[str, RunOutcome | None]:
        return {}


def _waiter() -> OutcomeWaiter:
    store = cast(Store, _NoStore())
    return OutcomeWaiter(
        store, fallback_seconds=NO_FALLBACK_SECONDS, unheard_seconds=NO_FALLBACK_SECONDS
    )


async def test_local_commit_wakes_a_query_waiter_which_reads_again() -> None:
    waiter = _waiter()
    answers: list[str | None] = [None, "answered"]
    reads = 0
    first_read = asyncio.Event()

    async def fetch() -> str | None:
        nonlocal reads
        reads += 1
        first_read.set()
        return answers[min(reads - 1, 1)]

    wait = asyncio.create_task(waiter.wait_for("q1", fetch, lambda row: row == "answered", 30))
    await first_read.wait()
    waiter.after_commit([RunChanged(namespace="default", key="q1", change=Change.QUERY)])
    assert await asyncio.wait_for(wait, 5) == "answered"
    assert reads == 2
    await waiter.close()


async def test_local_close_notice_answers_a_close_waiter_with_its_outcome() -> None:
    waiter = _waiter()
    outcome = RunOutcome(status="completed", result={"codec": "json", "blob": "1"})
    async with waiter.watch("r1", closes_with_run=True) as watch:
        waiter.after_commit(
            [RunChanged(namespace="default", key="r1", change=Change.CLOSED, outcome=outcome)]
        )
        await asyncio.wait_for(watch.wait(None), 5)
        assert watch.outcome == outcome
    await waiter.close()


async def test_timed_out_wait_returns_the_last_read() -> None:
    waiter = _waiter()

    async def fetch() -> str:
        return "leased"

    assert await waiter.wait_for("q2", fetch, lambda row: row == "done", 0.01) == "leased"
    await waiter.close()
