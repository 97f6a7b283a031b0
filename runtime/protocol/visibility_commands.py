"""The commands that upsert a run's memo and search attributes (PROTOCOL.md 7, issue 30).

Re-exported by `burrow.protocol.commands`. Both are workflow steps: the store numbers them like
the others and records `MemoUpserted` / `SearchAttributesUpserted` at their step.

`upsert_memo` carries its patch as one `{codec, blob}` payload of a string-keyed map, as the SDK
sends it; `None` deletes a key. `upsert_search_attributes` carries plain JSON values: a scalar,
a list of strings (a keyword list), or `None` to remove the attribute.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field

from burrow.codec import Payload
from burrow.protocol.shapes import Omitted, WireModel

_STEP = Field(default=None, exclude=True, validation_alias=AliasChoices("seq", "sequence"))

AttributeValue = str | int | float | bool | list[str] | None
"""A search attribute value as a command carries it; typed against the namespace's registry."""


class UpsertMemo(WireModel):
    """Merge `entries` into the run's memo (`None` deletes a key)."""

    type: Literal["upsert_memo"] = "upsert_memo"
    seq: int | None = _STEP
    entries: Payload


class UpsertSearchAttributes(WireModel):
    """Set the named search attributes of the run (`None` removes one)."""

    type: Literal["upsert_search_attributes"] = "upsert_search_attributes"
    seq: int | None = _STEP
    attributes: dict[str, AttributeValue]
    attribute_types: dict[str, str] | None = Omitted
    """The types the SDK believes the attributes have (1.16); the registry decides."""
