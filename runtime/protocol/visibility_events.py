"""History events of a run's memo and search attributes (PROTOCOL.md 8.2, issue 30).

Re-exported by `burrow.protocol.events`. Each is a workflow step (`sequence` is its step number,
PROTOCOL.md 8.3) written by the task whose code upserted: replay meets it where the code upserts
again and compares what it holds, so a cached and a cold replay agree on the run's metadata.

`MemoUpserted` keeps the catalogue's shape the SDK checks: `entries` (the patch as the code gave
it, `None` deleting a key) and `merged` (the whole memo after it), both exactly `{codec, blob}`.
`SearchAttributesUpserted` keeps `attributes` (the patch, `None` removing one) and `merged`.
"""

from __future__ import annotations

from typing import ClassVar

from burrow.codec import Payload
from burrow.protocol.event_base import Event
from burrow.protocol.shapes import JsonDict, Omitted


class MemoUpserted(Event):
    """Workflow code merged `entries` into the run's memo; `merged` is the memo after it."""

    event_type: ClassVar[str] = "MemoUpserted"
    sequence: int
    entries: Payload
    merged: Payload


class SearchAttributesUpserted(Event):
    """Workflow code set (or, with `None`, removed) search attributes; `merged` is all after."""

    event_type: ClassVar[str] = "SearchAttributesUpserted"
    sequence: int
    attributes: JsonDict
    merged: JsonDict
    attribute_types: dict[str, str] | None = Omitted
    """The registered type of each attribute named, as the namespace held them then."""


VISIBILITY_EVENTS = (MemoUpserted, SearchAttributesUpserted)
"""The step events of memo and search attribute upserts."""
