"""Values ↔ `{codec, blob}` envelopes, with signature types restored on decode."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from burrow import codec
from burrow.codec import Payload
from burrow.errors import PayloadError


@functools.lru_cache(maxsize=512)
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def convert(value: Any, hint: Any) -> Any:
    """Validate a decoded plain value into its declared type (no-op for Any)."""
    if hint is Any or hint is None or hint is type(None):
        return value
    try:
        return _adapter(hint).validate_python(value)
    except ValidationError as exc:
        raise PayloadError(f"payload does not match declared type {hint!r}: {exc}") from exc
    except TypeError:
        return value  # Unhashable or unsupported hint: leave the plain value.


def encode_args(
    args: Sequence[Any], *, limit: int = codec.DEFAULT_MAX_PAYLOAD_BYTES, what: str
) -> Payload:
    """Encode an argument list as one envelope (the DW wire form) and check its size."""
    payload = codec.encode(list(args))
    codec.check_size(payload, limit=limit, what=what)
    return payload


def decode_args(payload: Mapping[str, Any] | None, types: Sequence[Any] = ()) -> list[Any]:
    """Decode an argument-list envelope, converting each to its parameter type when known."""
    if payload is None:
        return []
    values = codec.decode(payload)
    if values is None:
        return []
    if not isinstance(values, list):
        raise PayloadError(f"argument payload must hold a list, got {type(values).__name__}")
    return [convert(v, types[i] if i < len(types) else Any) for i, v in enumerate(values)]


def encode_value(value: Any, *, limit: int = codec.DEFAULT_MAX_PAYLOAD_BYTES, what: str) -> Payload:
    """Encode one value and check its size."""
    payload = codec.encode(value)
    codec.check_size(payload, limit=limit, what=what)
    return payload


def decode_value(payload: Mapping[str, Any] | None, hint: Any = Any) -> Any:
    """Decode one value envelope, converting to `hint`."""
    if payload is None:
        return None
    return convert(codec.decode(payload), hint)
