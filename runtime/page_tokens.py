"""Opaque list page tokens: the order key and run id of a page's last run (issue 30).

Newest-first lists key on `created_at` and keep their original form (`<iso time>|<run id>`);
a list in another order (a query's ORDER BY) keys on that attribute's value, kept with its type.
The client and `burrow server` hand out and read the same tokens.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime

from burrow.errors import BurrowError
from burrow.store.visibility_sql import PageKey


class InvalidPageToken(BurrowError):
    """A page token this list did not hand out."""

    def __init__(self, token: str) -> None:
        super().__init__(f"invalid page token {token[:80]!r}", token=token[:80])


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
    """The (order key, run_id) a token continues after.

    Raises:
        InvalidPageToken: not a token of a list.
    """
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
        raise InvalidPageToken(token) from None


def created_after_of(token: str | None) -> tuple[datetime, str] | None:
    """`after_of` for a newest-first list, whose key is always a time."""
    after = after_of(token)
    if after is None:
        return None
    key, run_id = after
    if not isinstance(key, datetime):
        raise InvalidPageToken(token or "")
    return key, run_id
