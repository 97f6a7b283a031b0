"""List pages over HTTP: opaque page tokens, and the `query` parameter (PROTOCOL.md 17; issue 30).

A token names the last run of a page by its order key and run id. Newest-first lists key on
`created_at` and keep their original token (`<iso time>|<run id>`); a list in another order
(a query's ORDER BY) keys on that attribute's value, kept with its type.

`query` is the reference server's free-text term when it is one word with no operator or quote
(`order-17`: the runs whose id contains it), and otherwise a list query in Burrow's query
language, checked against the namespace's search attributes. A bad one is 422
`validation_failed` naming the position of the problem; nothing runs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from burrow.errors import InvalidListQuery
from burrow.protocol.list_query import parse_list_query
from burrow.protocol.list_query_types import AttributeType, ListQuery, bind_list_query
from burrow.server.api_errors import ApiError
from burrow.store.visibility_sql import PageKey

TERM: Final = re.compile(r"[^\s=<>!()'\"`,]+")
"""One word with none of the query language's operators or quotes: the reference's term."""


def _invalid(token: str) -> ApiError:
    return ApiError(400, "invalid_page_token", f"invalid page token {token[:80]!r}")


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:  # tokens carry UTC offsets
        raise ValueError(text)
    # In UTC, or Postgres refuses a time whose offset takes it past year 1 or 9999.
    return moment.astimezone(UTC)


def token_of(after: tuple[PageKey, str]) -> str:
    """The opaque token of the page after (order key, run_id)."""
    key, run_id = after
    if isinstance(key, datetime):
        text = f"{key.isoformat()}|{run_id}"
    else:
        kind = "null" if key is None else type(key).__name__
        text = json.dumps({"k": kind, "v": key, "id": run_id}, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode()


def _typed_key(document: Mapping[str, object]) -> PageKey:
    kind, value = document.get("k"), document.get("v")
    match kind:
        case "null" if value is None:
            return None
        case "str" if isinstance(value, str):
            return value
        case "bool" if isinstance(value, bool):
            return value
        case "int" if isinstance(value, int) and not isinstance(value, bool):
            return value
        case "float" if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    raise ValueError(kind)


def after_of(token: str | None) -> tuple[PageKey, str] | None:
    """The (order key, run_id) a token continues after; 400 `invalid_page_token`."""
    if not token:
        return None
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
        if not text.startswith("{"):
            created_at, run_id = text.split("|")
            return _utc(created_at), str(uuid.UUID(run_id))
        document = json.loads(text)
        if not isinstance(document, dict):
            raise ValueError(text)
        return _typed_key(document), str(uuid.UUID(str(document.get("id"))))
    except (ValueError, OverflowError, binascii.Error, UnicodeDecodeError):
        raise _invalid(token) from None


def created_after_of(token: str | None) -> tuple[datetime, str] | None:
    """`after_of` for a newest-first list, whose key is always a time."""
    after = after_of(token)
    if after is None:
        return None
    key, run_id = after
    if not isinstance(key, datetime):
        raise _invalid(token or "")
    return key, run_id


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
