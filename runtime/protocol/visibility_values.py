"""Memo and search attribute values checked before anything is written (issue 30).

A run's search attributes are typed by its namespace's registry: `typed_attributes` turns what a
start or an upsert gives into the rows `run_search_attributes` holds (one per value, one per
element of a keyword list), refusing an unregistered or built-in name and a value that is not of
its attribute's type. `plain_attributes` turns rows back into the JSON a describe shows.

A memo is any JSON object: `check_memo` refuses anything else and one over the namespace's byte
limit (PROTOCOL.md `limits.max_memo_bytes`, as its compact JSON), and `merge_memo` applies a patch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from burrow.errors import InvalidSearchAttribute, PayloadError, PayloadTooLarge
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES, AttributeType
from burrow.protocol.shapes import JsonDict

MAX_MEMO_BYTES: Final = 256 * 1024
"""PROTOCOL.md `limits.max_memo_bytes`."""
MAX_RUN_ATTRIBUTES: Final = 100
"""PROTOCOL.md `limits.max_search_attributes`: values a run may hold at once."""
MAX_KEYWORD_BYTES: Final = 2048
"""The reference's `max_search_attribute_value_bytes`, for one keyword (or list element)."""
MAX_TEXT_BYTES: Final = 64 * 1024
MAX_LIST_ELEMENTS: Final = 100

K = AttributeType


@dataclass(frozen=True, slots=True)
class StoredValue:
    """One `run_search_attributes` row of a run, without its run."""

    name: str
    ordinal: int = 0
    keyword_value: str | None = None
    int_value: int | None = None
    double_value: float | None = None
    bool_value: bool | None = None
    datetime_value: datetime | None = None
    text_value: str | None = None

    def row(self, *, run_id: str, namespace: str) -> JsonDict:
        """The columns of the row for `run_id`."""
        return {
            "run_id": run_id,
            "namespace": namespace,
            "name": self.name,
            "ordinal": self.ordinal,
            "keyword_value": self.keyword_value,
            "int_value": self.int_value,
            "double_value": self.double_value,
            "bool_value": self.bool_value,
            "datetime_value": self.datetime_value,
            "text_value": self.text_value,
        }


def _refuse(name: str, reason: str) -> InvalidSearchAttribute:
    return InvalidSearchAttribute(name=name, reason=reason)


def _string(name: str, value: object, limit: int, kind: AttributeType) -> str:
    if not isinstance(value, str):
        raise _refuse(name, f"a {kind} attribute takes a string, not {value!r}")
    if len(value.encode()) > limit:
        raise _refuse(name, f"a {kind} value is at most {limit} bytes")
    if "\x00" in value:
        raise _refuse(name, "a value may not hold a NUL character")
    return value


def _datetime(name: str, value: object) -> datetime:
    if isinstance(value, datetime):
        parsed: datetime | None = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise _refuse(name, f"a datetime attribute takes RFC 3339 with an offset, not {value!r}")
    return parsed


def typed_values(name: str, kind: AttributeType, value: object) -> list[StoredValue]:
    """The rows of one attribute's value; InvalidSearchAttribute when it is not of `kind`."""
    match kind:
        case K.KEYWORD:
            return [StoredValue(name, keyword_value=_string(name, value, MAX_KEYWORD_BYTES, kind))]
        case K.TEXT:
            return [StoredValue(name, text_value=_string(name, value, MAX_TEXT_BYTES, kind))]
        case K.INT if isinstance(value, int) and not isinstance(value, bool):
            if -(2**63) <= value < 2**63:
                return [StoredValue(name, int_value=value)]
        case K.DOUBLE if isinstance(value, int | float) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                return [StoredValue(name, double_value=float(value))]
        case K.BOOL if isinstance(value, bool):
            return [StoredValue(name, bool_value=value)]
        case K.DATETIME:
            return [StoredValue(name, datetime_value=_datetime(name, value))]
        case K.KEYWORD_LIST:
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or len(items) > MAX_LIST_ELEMENTS:
                raise _refuse(name, f"a keyword_list takes at most {MAX_LIST_ELEMENTS} strings")
            return [
                StoredValue(
                    name, ordinal, keyword_value=_string(name, item, MAX_KEYWORD_BYTES, K.KEYWORD)
                )
                for ordinal, item in enumerate(items)
            ]
    raise _refuse(name, f"a {kind} attribute cannot hold {value!r}")


def typed_attributes(
    attributes: Mapping[str, object], registry: Mapping[str, AttributeType]
) -> dict[str, list[StoredValue]]:
    """Each named attribute's rows; an empty list where the value is None (a removal).

    Raises:
        InvalidSearchAttribute: a built-in or unregistered name, or a value not of its type.
    """
    typed: dict[str, list[StoredValue]] = {}
    for name, value in attributes.items():
        if name in BUILTIN_ATTRIBUTES:
            raise _refuse(name, "a built-in attribute is set by Burrow, not by a start or upsert")
        kind = registry.get(name)
        if kind is None:
            raise _refuse(name, "not a registered search attribute of this namespace")
        typed[name] = [] if value is None else typed_values(name, kind, value)
    return typed


def check_attribute_count(names: Iterable[str]) -> None:
    """Refuse a run holding more than `MAX_RUN_ATTRIBUTES` attributes at once."""
    held = sorted(set(names))
    if len(held) > MAX_RUN_ATTRIBUTES:
        raise _refuse(
            held[MAX_RUN_ATTRIBUTES],
            f"a run holds at most {MAX_RUN_ATTRIBUTES} search attributes",
        )


def plain_attributes(
    rows: Iterable[StoredValue], registry: Mapping[str, AttributeType]
) -> JsonDict:
    """The JSON a describe shows: a value per attribute, a list for a keyword list."""
    shown: JsonDict = {}
    for row in sorted(rows, key=lambda r: (r.name, r.ordinal)):
        if row.keyword_value is not None and registry.get(row.name) == K.KEYWORD_LIST:
            shown.setdefault(row.name, []).append(row.keyword_value)
            continue
        value: object = next(
            v
            for v in (
                row.keyword_value,
                row.int_value,
                row.double_value,
                row.bool_value,
                row.datetime_value,
                row.text_value,
            )
            if v is not None
        )
        shown[row.name] = value.isoformat() if isinstance(value, datetime) else value
    return shown


def plain_value(value: object) -> object:
    """A value as a command carries it: a datetime (with its zone) as RFC 3339 text."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime search attribute needs a time zone")
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [plain_value(item) for item in value]
    return value


def plain_values(attributes: Mapping[str, object]) -> JsonDict:
    """Every value of `attributes` as `plain_value` gives it."""
    return {str(name): plain_value(value) for name, value in attributes.items()}


def check_memo(memo: object, *, limit: int = MAX_MEMO_BYTES, what: str = "memo") -> JsonDict:
    """The memo as a JSON object; PayloadError if it is not one, PayloadTooLarge over `limit`."""
    if not isinstance(memo, Mapping) or not all(isinstance(key, str) for key in memo):
        raise PayloadError(f"{what} must be a JSON object with string keys", what=what)
    try:
        text = json.dumps(memo, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} must be plain JSON: {exc}", what=what) from exc
    size = len(text.encode())
    if size > limit:
        raise PayloadTooLarge(size=size, limit=limit, what=what)
    loaded: JsonDict = json.loads(text)
    return loaded


def merge_memo(memo: Mapping[str, object], patch: Mapping[str, object]) -> JsonDict:
    """`memo` with `patch` applied: a key set to None is deleted; keys in sorted order."""
    merged = {key: value for key, value in memo.items() if key not in patch}
    merged.update({key: value for key, value in patch.items() if value is not None})
    return {key: merged[key] for key in sorted(merged)}
