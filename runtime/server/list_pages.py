"""List pages over HTTP: page tokens and the `query` parameter (PROTOCOL.md 17; issue 30).

Page tokens are burrow.page_tokens' (shared with the client); a bad one is 400
`invalid_page_token` (api_errors).

`query` is the reference server's free-text term when it is one word with no operator or quote
(`order-17`: the runs whose id contains it), and otherwise a list query in Burrow's query
language, checked against the namespace's search attributes. A bad one is 422
`validation_failed` naming the position of the problem; nothing runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import AttributeType, ListQuery, bind_list_query
from burrow.server.api_errors import ApiError

TERM: Final = re.compile(r"[^\s=<>!()'\"`,]+")
"""One word with none of the query language's operators or quotes: the reference's term."""


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
