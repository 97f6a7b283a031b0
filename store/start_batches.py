"""Concurrent starts on one store written together: one statement and one commit per batch.

A service that starts many workflows at once (a request fan-out, a backfill) would otherwise pay
a commit per start. Starts asked for while a batch is being written wait for the next one, so a
lone start is written at once and a burst is written in as few statements as it takes: group
commit, with no timer and no added wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg

from burrow.store import errors
from burrow.store.models import RunInfo
from burrow.store.runs import NewRun, Refused, answer_start

MAX_BATCH = 100
"""Starts per statement at most: keeps each statement's parameters and locks small."""

Write = Callable[[Sequence[NewRun]], Awaitable[list[RunInfo | Refused]]]


@dataclass(slots=True)
class _Asked:
    run: NewRun
    answer: asyncio.Future[RunInfo] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class StartBatcher:
    """Writes the starts asked for meanwhile as one batch, one batch at a time.

    Args:
        write: Writes a batch in one statement (`runs.create_runs` in a store statement).
    """

    def __init__(self, write: Write) -> None:
        self._write = write
        self._asked: list[_Asked] = []
        self._writer: asyncio.Task[None] | None = None

    async def start(self, run: NewRun) -> RunInfo:
        """Create the run with whatever starts are asked for meanwhile.

        Returns:
            The created run, or the running run a `USE_EXISTING` start met.

        Raises:
            WorkflowAlreadyStartedError: its id-reuse policy refused it (a run of its id started
                earlier in its batch counts as running).
            StoreError: as a start of its own would.
        """
        asked = _Asked(run)
        self._asked.append(asked)
        writer = self._writer
        # A writer left pending by a loop that has since closed never runs again.
        if writer is None or writer.done() or writer.get_loop() is not asyncio.get_running_loop():
            self._writer = asyncio.create_task(self._write_all(), name="burrow-start-batches")
        return await asked.answer

    async def _write_all(self) -> None:
        loop = asyncio.get_running_loop()
        while self._asked:
            batch, self._asked = self._asked[:MAX_BATCH], self._asked[MAX_BATCH:]
            # Cancelled asks, and asks of a loop that has closed since, are dropped.
            live = [a for a in batch if not a.answer.done() and a.answer.get_loop() is loop]
            if live:
                await self._write_batch(live)

    async def _write_batch(self, batch: list[_Asked]) -> None:
        try:
            created = await self._write([asked.run for asked in batch])
        except errors.StoreUnavailable as exc:
            _fail(batch, exc)
            return
        except (errors.StoreError, asyncpg.PostgresError) as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            # Something in one start the database refused: write each alone, so only it fails.
            for asked in batch:
                await self._write_batch([asked])
            return
        except asyncio.CancelledError:
            for asked in batch:
                asked.answer.cancel()
            raise
        except Exception as exc:  # a bug: each caller sees it, the next batch is still written
            _fail(batch, exc)
            return
        for asked, outcome in zip(batch, created, strict=True):
            if asked.answer.done():
                continue
            try:
                asked.answer.set_result(answer_start(asked.run, outcome))
            except errors.WorkflowAlreadyStartedError as exc:
                asked.answer.set_exception(exc)


def _fail(batch: list[_Asked], exc: Exception) -> None:
    for asked in batch:
        if not asked.answer.done():
            asked.answer.set_exception(exc)
