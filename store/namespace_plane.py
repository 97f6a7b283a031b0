"""The Store's namespace and retention calls (issue 30)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from burrow.store import namespaces, retention
from burrow.store.facade import Facade
from burrow.store.namespace_errors import NamespaceNotFoundError
from burrow.store.namespaces import NamespaceRecord


@dataclass(frozen=True)
class RetentionStatus:
    """A namespace's window and the runs a pass would delete now (oldest first, bounded)."""

    namespace: str
    retention_days: int | None
    """None: no window is set, and the namespace keeps its runs."""
    cutoff: datetime | None
    expired_run_ids: list[str]
    scan_limit: int


class NamespacePlane(Facade):
    """What a client, the CLI and the HTTP server call to manage namespaces and retention."""

    async def create_namespace(
        self, *, name: str, description: str | None = None, retention_days: int | None = None
    ) -> NamespaceRecord:
        """Create a namespace (namespaces.create has the refusals)."""
        async with self.transactions.begin() as conn:
            return await namespaces.create(
                conn, name=name, description=description, retention_days=retention_days
            )

    async def ensure_namespaces(self, names: Sequence[str]) -> list[str]:
        """Create those of `names` that are missing; the ones created."""
        async with self.transactions.begin() as conn:
            return await namespaces.ensure(conn, list(names))

    async def list_namespaces(self) -> list[NamespaceRecord]:
        """Every namespace, by name."""
        async with self.transactions.begin(commit=False) as conn:
            return await namespaces.list_all(conn)

    async def namespace_names(self) -> frozenset[str]:
        """The names of every namespace (what the server serves)."""
        async with self.transactions.begin(commit=False) as conn:
            return await namespaces.names(conn)

    async def describe_namespace(self, *, name: str) -> NamespaceRecord:
        """One namespace; NamespaceNotFoundError when there is none."""
        async with self.transactions.begin(commit=False) as conn:
            return await namespaces.describe(conn, name=name)

    async def update_namespace(
        self, *, name: str, description: str | None = None, retention_days: int | None = None
    ) -> NamespaceRecord:
        """Change a namespace's description and/or retention window."""
        async with self.transactions.begin() as conn:
            return await namespaces.update(
                conn, name=name, description=description, retention_days=retention_days
            )

    async def delete_namespace(self, *, name: str, force: bool = False) -> dict[str, int]:
        """Delete a namespace; with `force` its runs and schedules too. Rows deleted per table.

        A forced delete removes the runs in batches of their own transactions first, so no
        transaction grows with the namespace; the last one removes the rest with the row.
        """
        stored = name.lower()
        deleted: Counter[str] = Counter()
        if force:
            while True:
                async with self.transactions.begin() as conn:
                    batch = await namespaces.delete_run_batch(conn, name=stored)
                if not batch["runs"]:
                    break
                deleted.update(batch)
        async with self.transactions.begin() as conn:
            deleted.update(await namespaces.delete(conn, name=stored, force=force))
        return {table: count for table, count in sorted(deleted.items()) if count}

    async def retention_status(
        self, *, namespace: str, limit: int = retention.SCAN_LIMIT
    ) -> RetentionStatus:
        """The namespace's window, cutoff and expired runs (NamespaceNotFoundError if none)."""
        async with self.transactions.begin(commit=False) as conn:
            if not await retention.namespace_exists(conn, namespace=namespace):
                raise NamespaceNotFoundError(namespace=namespace)
            days = await retention.retention_days(conn, namespace=namespace)
            if days is None:
                return RetentionStatus(namespace, None, None, [], limit)
            now = await retention.now_of(conn)
            ids = await retention.expired_run_ids(
                conn, namespace=namespace, retention_days=days, limit=limit
            )
        return RetentionStatus(namespace, days, retention.cutoff_of(now, days), ids, limit)

    async def retention_pass(
        self,
        *,
        namespace: str,
        limit: int = retention.SCAN_LIMIT,
        run_ids: Sequence[str] = (),
    ) -> list[retention.RunOutcome]:
        """Delete the namespace's expired runs (or the named ones that are), in one transaction."""
        async with self.transactions.begin() as conn:
            return await retention.run_pass(conn, namespace=namespace, limit=limit, run_ids=run_ids)

    async def purge_expired_runs(self, *, batch: int = retention.SWEEP_BATCH) -> int:
        """The repair pass's retention step alone, in a transaction of its own."""
        return await self.transactions.run(lambda txn: retention.purge_expired(txn, batch=batch))
