"""The Workflows page: runs newest first, filtered by a list query and quick filters (issue 31).

The quick filters (status, type, queue, start time range) are predicates ANDed to the query the
user wrote, built as a tree (never by pasting text into the query). Counts per status come from
the same filter without its status. Rows refresh live: the page listens to /ui/events and
re-fetches its results fragment (burrow.ui.live).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse

from burrow import page_tokens
from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import (
    And,
    Literal,
    Node,
    Operator,
    ParsedListQuery,
    RawPredicate,
    parse_list_query,
)
from burrow.protocol.list_query_types import ListQuery, bind_list_query
from burrow.server.list_pages import TERM
from burrow.store.visibility_sql import STATUS_OF
from burrow.store.workflow_views import ListedRun, RunFilter
from burrow.ui.access import Caller, UiCaller
from burrow.ui.templating import render

router = APIRouter(prefix="/ui/workflows", include_in_schema=False)
PAGE_SIZE = 50
STATUSES = tuple(STATUS_OF)
"""The statuses as the query language names them (ExecutionStatus)."""


@dataclass(frozen=True, slots=True)
class ListForm:
    """What the filter form asked for, as typed (the page shows it back)."""

    query: str = ""
    status: str = ""
    workflow_type: str = ""
    queue: str = ""
    since: str = ""
    until: str = ""

    def params(self) -> dict[str, str]:
        """The form as URL parameters (empty ones left out)."""
        named = {
            "query": self.query,
            "status": self.status,
            "type": self.workflow_type,
            "queue": self.queue,
            "since": self.since,
            "until": self.until,
        }
        return {k: v for k, v in named.items() if v}


class FormError(ValueError):
    """A filter the page cannot apply; shown next to the form, nothing is listed."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


def _moment(text: str, label: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise FormError(f"{label}: {text!r} is not a date and time") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _predicate(attribute: str, operator: Operator, value: str) -> RawPredicate:
    return RawPredicate(attribute, operator, (Literal(value, 0),), 0)


def quick_filters(form: ListForm, *, with_status: bool = True) -> list[Node[RawPredicate]]:
    """The quick filters as predicates.

    Raises:
        FormError: an unknown status or an unreadable time.
    """
    parts: list[Node[RawPredicate]] = []
    if with_status and form.status:
        if form.status not in STATUS_OF:
            raise FormError(f"unknown status {form.status!r}")
        parts.append(_predicate("ExecutionStatus", Operator.EQ, form.status))
    if form.workflow_type.strip():
        parts.append(_predicate("WorkflowType", Operator.EQ, form.workflow_type.strip()))
    if form.queue.strip():
        parts.append(_predicate("TaskQueue", Operator.EQ, form.queue.strip()))
    if form.since.strip():
        since = _moment(form.since, "started after").isoformat()
        parts.append(_predicate("StartTime", Operator.GE, since))
    if form.until.strip():
        until = _moment(form.until, "started before").isoformat()
        parts.append(_predicate("StartTime", Operator.LT, until))
    return parts


def _written(form: ListForm) -> tuple[ParsedListQuery, str | None]:
    """The user's query parsed, or a bare word: the reference's workflow-id term."""
    text = form.query.strip()
    if TERM.fullmatch(text):
        return ParsedListQuery(None, None, None), text
    try:
        parsed = parse_list_query(form.query) if text else ParsedListQuery(None, None, None)
    except InvalidListQuery as exc:
        raise FormError(str(exc), exc.offset) from None
    if parsed.group_by is not None:
        raise FormError("GROUP BY counts runs: the status counts above are that count")
    return parsed, None


async def bound_query(caller: UiCaller, form: ListForm, *, with_status: bool = True) -> ListQuery:
    """The user's query ANDed with the quick filters, checked against the namespace's types.

    Raises:
        FormError: the query or a filter is invalid; nothing is run.
    """
    parsed, _ = _written(form)
    parts = quick_filters(form, with_status=with_status)
    if parsed.filter is not None:
        parts.append(parsed.filter)
    combined: Node[RawPredicate] | None = (
        None if not parts else parts[0] if len(parts) == 1 else And(tuple(parts))
    )
    custom = await caller.state.store.search_attributes(namespace=caller.namespace)
    try:
        return bind_list_query(replace(parsed, filter=combined), custom)
    except InvalidListQuery as exc:
        raise FormError(str(exc), exc.offset) from None


@dataclass(frozen=True, slots=True)
class Listing:
    """One page of the list and the counts above it."""

    runs: list[ListedRun]
    next_token: str | None
    counts: dict[str, int]
    total: int


async def listing(caller: UiCaller, form: ListForm, after: str | None) -> Listing:
    """The page of runs after `after` and the counts per status.

    Raises:
        FormError: the query or a filter is invalid.
    """
    store = caller.state.store
    query = await bound_query(caller, form)
    _, term = _written(form)
    wanted = RunFilter(id_contains=term)
    try:
        cursor = page_tokens.after_of(after)
    except page_tokens.InvalidPageToken:
        raise FormError("that page link is no longer valid: start from the first page") from None
    page = await store.list_runs_page(
        namespace=caller.namespace, wanted=wanted, after=cursor, limit=PAGE_SIZE, query=query
    )
    counting = await bound_query(caller, form, with_status=False)
    counted = await store.count_workflows(
        namespace=caller.namespace,
        query=replace(counting, order_by=None, group_by="ExecutionStatus"),
    )
    token = None if page.next_after is None else page_tokens.token_of(page.next_after)
    return Listing(
        runs=page.runs, next_token=token, counts=counted.groups or {}, total=counted.count
    )


def _form(
    query: str, status: str, workflow_type: str, queue: str, since: str, until: str
) -> ListForm:
    return ListForm(query, status, workflow_type, queue, since, until)


async def _page(
    request: Request, caller: UiCaller, template: str, after: str | None
) -> HTMLResponse:
    params = request.query_params
    form = _form(
        params.get("query", ""),
        params.get("status", ""),
        params.get("type", ""),
        params.get("queue", ""),
        params.get("since", ""),
        params.get("until", ""),
    )
    error: FormError | None = None
    found: Listing | None = None
    try:
        found = await listing(caller, form, after)
    except FormError as exc:
        error = exc
    return render(
        request,
        caller,
        template,
        {
            "form": form,
            "statuses": STATUSES,
            "listing": found,
            "error": error,
            "after": after,
            "page_size": PAGE_SIZE,
        },
        status_code=200 if error is None else 422,
    )


@router.get("")
async def workflows(
    request: Request, caller: Caller, after: Annotated[str | None, Query()] = None
) -> HTMLResponse:
    """The whole page."""
    return await _page(request, caller, "workflows.html", after)


@router.get("/results")
async def results(
    request: Request, caller: Caller, after: Annotated[str | None, Query()] = None
) -> HTMLResponse:
    """The counts and rows alone: what a live refresh swaps in."""
    return await _page(request, caller, "workflow_results.html", after)
