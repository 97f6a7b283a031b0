"""The ``json`` codec: compact JSON text of the same plain values the avro codec carries."""

from __future__ import annotations

import json
from typing import NoReturn

from burrow.codec import Plain, to_plain
from burrow.errors import PayloadError

__all__ = ["decode_value", "encode_value"]


def encode_value(value: object) -> str:
    """Encode a value as compact JSON text.

    The value goes through :func:`burrow.codec.to_plain` first, then
    ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``.

    Args:
        value: Anything :func:`burrow.codec.to_plain` accepts, except ``bytes``.

    Returns:
        The JSON text.

    Raises:
        PayloadError: The value cannot be represented (unsupported type, ``bytes``,
            non-``str`` map key, NaN or infinite float, too deeply nested).
    """
    try:
        return json.dumps(
            to_plain(value),
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_reject,
        )
    except ValueError as exc:  # allow_nan=False
        raise PayloadError(f"json codec cannot encode value: {exc}") from None
    except RecursionError:
        raise PayloadError("payload nests too deeply (or refers to itself)") from None


def decode_value(blob: str) -> Plain:
    """Decode JSON text produced by :func:`encode_value`.

    Args:
        blob: The JSON text.

    Returns:
        The plain value.

    Raises:
        PayloadError: The blob is not a ``str`` or not valid (strict, finite) JSON.
    """
    if not isinstance(blob, str):
        raise PayloadError(f"json payload blob must be str, got {type(blob).__name__}")
    try:
        value: Plain = json.loads(blob, parse_constant=_reject_constant)
    except ValueError as exc:
        raise PayloadError(f"json payload blob is not valid JSON: {exc}") from None
    except RecursionError:
        raise PayloadError("json payload nests too deeply") from None
    return value


def _reject(value: object) -> NoReturn:
    hint = "; use the avro codec for bytes" if isinstance(value, bytes) else ""
    raise PayloadError(f"json codec cannot encode a value of type {type(value).__name__}{hint}")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name} is not allowed")
