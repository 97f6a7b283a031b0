"""The client's list queries (issue 30): pages, every run, and counts, in one namespace.

A query is checked against the namespace's search attributes before anything runs; a bad one
is `InvalidListQuery` naming the position of the problem.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from burrow import page_tokens
from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import ListQuery, bind_list_query
from burrow.store import Store
from burrow.store.models import RunInfo
from burrow.store.visibility_sql import RunCount

MAX_PAGE_SIZE = 1000


@dataclass(frozen=True, slots=True)
class WorkflowPage:
    """One page of runs, and the token of the next page (None: this was the last)."""

    runs: list[RunInfo]
    next_page_token: str | None


class ListQueryMethods:
    """List queries over the client's namespace."""

    store: Store
    namespace: str

    async def checked_query(self, query: str | None) -> ListQuery | None:
        """`query` parsed and typed against this namespace's attributes (None: every run)."""
        if query is None or not query.strip():
            return None
        parsed = parse_list_query(query)  # refuses a malformed query before any round trip
        custom = await self.store.search_attributes(namespace=self.namespace)
        return bind_list_query(parsed, custom)

    async def list_workflows_page(
        self, *, query: str | None = None, page_size: int = 100, next_page_token: str | None = None
    ) -> WorkflowPage:
        """A page of the runs `query` selects, newest first unless it orders them.

        Pages are keyset pages: runs started while a caller pages through move no run to
        another page and show up on none twice.

        Raises:
            InvalidListQuery: the query does not parse or fit its attributes' types.
            InvalidPageToken: `next_page_token` is not one this list handed out.
        """
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be 1 to {MAX_PAGE_SIZE}, not {page_size}")
        checked = await self.checked_query(query)
        page = await self.store.list_runs_page(
            namespace=self.namespace,
            after=page_tokens.after_of(next_page_token),
            limit=page_size,
            query=checked,
        )
        token = None if page.next_after is None else page_tokens.token_of(page.next_after)
        return WorkflowPage([listed.run for listed in page.runs], token)

    async def iter_workflows(
        self, *, query: str | None = None, page_size: int = 100
    ) -> AsyncIterator[RunInfo]:
        """Every run `query` selects, a page at a time (`list_workflows_page`)."""
        token: str | None = None
        while True:
            page = await self.list_workflows_page(
                query=query, page_size=page_size, next_page_token=token
            )
            for run in page.runs:
                yield run
            token = page.next_page_token
            if token is None:
                return

    async def count_workflows(self, *, query: str | None = None) -> RunCount:
        """How many runs `query` selects; `GROUP BY ExecutionStatus` adds the count per status.

        Raises:
            InvalidListQuery: the query does not parse or fit its attributes' types.
        """
        checked = await self.checked_query(query)
        return await self.store.count_workflows(namespace=self.namespace, query=checked)
