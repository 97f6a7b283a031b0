"""List pages over HTTP: page tokens and the `query` parameter (PROTOCOL.md 17; issue 30).

Tokens are burrow.page_tokens', shared with the client.

`query` is the reference server's free-text term when it is one word with no operator or quote
(`order-17`: the runs whose id contains it), and otherwise a list query in Burrow's query
language, checked against the namespace's search attributes. A bad one is 422
`validation_failed` naming the position of the problem; nothing runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from burrow import page_tokens
from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import AttributeType, ListQuery, bind_list_query
from burrow.server.api_errors import ApiError
from burrow.store.visibility_sql import PageKey

TERM: Final = re.compile(r"[^\s=<>!()'\"`,]+")
"""One word with none of the query language's operators or quotes: the reference's term."""


def _invalid(exc: page_tokens.InvalidPageToken) -> ApiError:
    return ApiError(400, "invalid_page_token", str(exc))


def token_of(after: tuple[PageKey, str]) -> str:
    """The opaque token of the page after (order key, run_id) (burrow.page_tokens)."""
    return page_tokens.token_of(after)


def after_of(token: str | None) -> tuple[PageKey, str] | None:
    """The (order key, run_id) a token continues after; 400 `invalid_page_token`."""
    try:
        return page_tokens.after_of(token)
    except page_tokens.InvalidPageToken as exc:
        raise _invalid(exc) from None


def created_after_of(token: str | None) -> tuple[datetime, str] | None:
    """`after_of` for a newest-first list, whose key is always a time."""
    try:
        return page_tokens.created_after_of(token)
    except page_tokens.InvalidPageToken as exc:
        raise _invalid(exc) from None


def list_query_of(
    text: str | None, custom: Mapping[str, AttributeType]
) -> tuple[ListQuery | None, str | None]:
    """(list query, free-text term) of the `query` parameter: at most one is set."""
    stripped = (text or "").strip()
    if not stripped:
        return None, None
    if TERM.fullmatch(stripped):
        return None, stripped
    try:
        # The text as sent: the position of a problem counts from its first character.
        return bind_list_query(parse_list_query(text or ""), custom), None
    except InvalidListQuery as exc:
        raise ApiError(
            422,
            "validation_failed",
            str(exc),
            errors={"query": [str(exc)]},
            position=exc.offset,
        ) from None
