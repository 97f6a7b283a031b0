"""The Store's visibility calls (issue 30): custom search attributes, counts of runs."""

from __future__ import annotations

from collections.abc import Sequence

from burrow.protocol.list_query_types import AttributeType, ListQuery
from burrow.protocol.shapes import JsonDict
from burrow.store import run_visibility, search_attributes, visibility_sql
from burrow.store.facade import Facade


class VisibilityPlane(Facade):
    """What a client, the CLI and the HTTP server call to manage search attributes."""

    async def register_search_attribute(
        self, *, namespace: str, name: str, type: str, limit: int = search_attributes.DEFAULT_LIMIT
    ) -> AttributeType:
        """Register a custom search attribute (search_attributes.register has the refusals)."""
        async with self.transactions.begin() as conn:
            return await search_attributes.register(
                conn, namespace=namespace, name=name, type=type, limit=limit
            )

    async def search_attributes(self, *, namespace: str) -> dict[str, AttributeType]:
        """The namespace's custom search attributes by name."""
        async with self.transactions.begin(commit=False) as conn:
            return await search_attributes.definitions(conn, namespace=namespace)

    async def remove_search_attribute(self, *, namespace: str, name: str) -> int:
        """Remove a custom search attribute and its values (search_attributes.remove)."""
        async with self.transactions.begin() as conn:
            return await search_attributes.remove(conn, namespace=namespace, name=name)

    async def count_workflows(
        self, *, namespace: str, query: ListQuery | None = None
    ) -> visibility_sql.RunCount:
        """How many runs the query selects; per ExecutionStatus with its GROUP BY (issue 30)."""
        async with self.transactions.begin(commit=False) as conn:
            return await visibility_sql.count_runs(conn, namespace=namespace, query=query)

    async def visibility_of(
        self, *, namespace: str, run_ids: Sequence[str]
    ) -> dict[str, tuple[JsonDict, JsonDict]]:
        """Each run's memo and custom search attributes, by run id (runs with neither absent)."""
        async with self.transactions.begin(commit=False) as conn:
            memos = await run_visibility.memos_of(conn, run_ids)
            held = await run_visibility.attributes_of(conn, namespace=namespace, run_ids=run_ids)
        return {
            run_id: (memos.get(run_id, {}), held.get(run_id, {}))
            for run_id in memos.keys() | held.keys()
        }
