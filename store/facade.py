"""What the Store's method groups share: its transactions, payload limit and run lookup."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from burrow.protocol import commands as cmd
from burrow.protocol.events import HistoryEvent
from burrow.store import claims, history, payloads, runs
from burrow.store.models import ClaimedWorkflowTask, RunRow
from burrow.store.transactions import Transactions, Txn

T = TypeVar("T")


class Facade:
    """The state every Store method group reads; `Store.__init__` sets it."""

    engine: AsyncEngine
    transactions: Transactions
    max_payload_bytes: int

    def check_payload(self, payload: Mapping[str, object] | None, what: str) -> None:
        """Refuse an oversized payload before anything is written."""
        payloads.check_payload(payload, what, limit=self.max_payload_bytes)

    def _check_command_payloads(self, commands: Sequence[cmd.Command]) -> None:
        """Refuse a command whose payload is oversized, before anything is written."""
        payloads.check_command_payloads(commands, limit=self.max_payload_bytes)

    async def read_history_page(
        self,
        *,
        run_id: str,
        after_seq: int = 0,
        through: int | None = None,
        page_events: int | None = None,
    ) -> list[HistoryEvent]:
        """One page of the run's events after `after_seq`, none after `through`; one transaction.

        A page of `page_events` (by default `history.HISTORY_PAGE_EVENTS`); a shorter one is
        the last. `through` fences the read at what a claim saw.
        """
        size = page_events or history.HISTORY_PAGE_EVENTS
        async with self.transactions.begin() as conn:
            page = await history.read_history(conn, run_id=run_id, after_seq=after_seq, limit=size)
        if through is not None and page and page[-1].sequence > through:
            page = [e for e in page if e.sequence <= through]
        return page

    async def history_pages(
        self,
        *,
        run_id: str,
        after_seq: int = 0,
        through: int | None = None,
        page_events: int | None = None,
    ) -> AsyncIterator[list[HistoryEvent]]:
        """The run's events after `after_seq` (up to `through`), one page per transaction.

        Lazily: the next page is read when the caller asks for it, so a caller that lets each
        page go holds one page's events, however long the history.
        """
        size = page_events or history.HISTORY_PAGE_EVENTS
        while through is None or after_seq < through:
            page = await self.read_history_page(
                run_id=run_id, after_seq=after_seq, through=through, page_events=size
            )
            if page:
                yield page
            if len(page) < size:
                return
            after_seq = page[-1].sequence

    async def _history_pages(
        self, run_id: str, after_seq: int = 0, through: int | None = None
    ) -> list[HistoryEvent]:
        """The run's events after `after_seq` (up to `through`) as one list, read page by page.

        Only one page's raw rows are held at a time, however long the history.
        """
        events: list[HistoryEvent] = []
        async for page in self.history_pages(run_id=run_id, after_seq=after_seq, through=through):
            events.extend(page)
        return events

    async def _opened(
        self, leased: claims.LeasedRun, *, whole_history: bool = True
    ) -> ClaimedWorkflowTask:
        """The typed claim with its whole history (or its new part), or with its first page.

        The claim returned only the first page. With `whole_history` the rest, committed
        already, is read page by page; without, the claim says through which sequence it is
        (`history_through`) and the claimer reads it with `history_pages` when it needs it.
        """
        claimed = leased.claimed()
        through = leased.row.position_event_seq
        if claimed.history and claimed.history[-1].sequence < through:
            if not whole_history:
                return dataclasses.replace(claimed, history_through=through)
            after = claimed.history[-1].sequence
            claimed.history.extend(await self._history_pages(claimed.run.run_id, after, through))
        return claimed

    async def _on_run(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        fn: Callable[[Txn[AsyncConnection], RunRow], Awaitable[T]],
    ) -> T:
        """`fn` in one transaction, on the run found and locked."""

        async def body(txn: Txn[AsyncConnection]) -> T:
            found = await runs.find_run(
                txn.conn, namespace=namespace, workflow_id=workflow_id, run_id=run_id
            )
            run = await runs.lock_run(txn.conn, run_id=found.run_id)
            return await fn(txn, run)

        return await self.transactions.run(body)
