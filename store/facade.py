"""What the Store's method groups share: its transactions, payload limit and run lookup."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from burrow.protocol import commands as cmd
from burrow.store import payloads, runs
from burrow.store.models import RunRow
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
