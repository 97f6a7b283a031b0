"""History paging for workers and clients (PROTOCOL.md 9): from sequence 1, token base64(seq)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from burrow.server.errors import ApiError
from burrow.store.models import HistoryEvent, JsonDict


def encode_token(after_sequence: int) -> str:
    """The page token that continues after `after_sequence`."""
    return base64.b64encode(str(after_sequence).encode()).decode()


def decode_token(token: str | None) -> int:
    """The sequence a page token continues after (0 for none); 400 `invalid_page_token`."""
    if not token:
        return 0
    try:
        text = base64.b64decode(token.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = ""
    if not text.isdigit():
        raise ApiError(400, "invalid_page_token", f"invalid page token {token!r}")
    return int(text)


def page(events: Sequence[HistoryEvent], page_size: int) -> tuple[list[HistoryEvent], str | None]:
    """The first `page_size` events and the token for the rest (None when there is none)."""
    shown = list(events[:page_size])
    if len(events) > page_size and shown:
        return shown, encode_token(shown[-1].sequence)
    return shown, None


def worker_event(event: HistoryEvent, namespace: str) -> JsonDict:
    """The worker-facing record (PROTOCOL.md 8.1)."""
    return {**event.to_json(), "namespace": namespace}


def client_event(event: HistoryEvent) -> JsonDict:
    """The control-plane record (PROTOCOL.md 8.1): `timestamp` beside `recorded_at`."""
    record = event.to_json()
    record["timestamp"] = record["recorded_at"]
    return record
