"""Payload codecs: every value Burrow stores travels as a ``{codec, blob}`` payload."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import TypeAlias
from uuid import UUID

from pydantic import BaseModel, JsonValue
from typing_extensions import TypedDict  # pydantic validates it on Python 3.11

from burrow.errors import PayloadError, PayloadTooLarge

__all__ = [
    "CODEC_NAMES",
    "DEFAULT_CODEC",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "Payload",
    "Plain",
    "as_object",
    "check_size",
    "decode",
    "decode_blob",
    "encode",
    "encode_blob",
    "payload_size",
    "to_plain",
]

DEFAULT_CODEC = "avro"
"""The codec new payloads use unless told otherwise."""

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
"""Largest encoded blob, in UTF-8 bytes, Burrow writes by default."""

CODEC_NAMES = ("avro", "json")
"""The codecs Burrow reads and writes."""


Plain: TypeAlias = "bool | int | float | str | bytes | list[Plain] | dict[str, Plain] | None"
"""A plain value, what every codec carries: a decoded payload before its declared type applies."""


class Payload(TypedDict):
    """An encoded value as it is stored: the codec name and the codec's text blob."""

    codec: str
    blob: str


def as_object(payload: Payload) -> dict[str, JsonValue]:
    """The envelope as a plain JSON object, for a column or a field typed as JSON."""
    return {"codec": payload["codec"], "blob": payload["blob"]}


def to_plain(value: object) -> Plain:
    """Convert a rich Python value to the plain kinds every codec carries.

    Mirrors ``durable_workflow.serializer.to_avro_payload_value``: enums become their value,
    datetimes, dates and times their ISO-8601 text, UUIDs and Decimals their ``str``, mappings
    dicts, dataclasses and attrs classes dicts of their fields, pydantic models their
    ``model_dump(mode="json")``, other sequences (tuples, ranges, ...) lists. Range checks
    (64-bit ints, finite floats) are left to the codec.

    Args:
        value: The value to convert.

    Returns:
        A tree of ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list`` and
        ``dict[str, ...]``.

    Raises:
        PayloadError: A map key is not a ``str``, a value has no plain form, or the value
            nests too deeply (or contains itself).
    """
    try:
        return _plain(value)
    except RecursionError:
        raise PayloadError("payload nests too deeply (or contains itself)") from None


def _plain(value: object) -> Plain:
    if isinstance(value, Enum):
        return _plain(value.value)
    if value is None or isinstance(value, str | bytes | int | float):
        return value
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, UUID | Decimal):
        return str(value)
    if isinstance(value, Mapping):
        plain: dict[str, Plain] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise PayloadError(
                    f"payload map keys must be str, got {type(key).__name__} key {key!r};"
                    " keys are never stringified"
                )
            plain[key] = _plain(item)
        return plain
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"))
    attrs_fields = getattr(type(value), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return {f.name: _plain(getattr(value, f.name)) for f in attrs_fields}
    if isinstance(value, Sequence) and not isinstance(value, bytearray):
        return [_plain(item) for item in value]
    raise PayloadError(
        f"cannot encode a value of type {type(value).__qualname__} as a payload; adapt it to"
        " None, bool, int, float, str, bytes, list or dict[str, ...] (or a dataclass, pydantic"
        " model, enum, datetime, UUID or Decimal) first"
    )


_Codec: TypeAlias = tuple[Callable[[object], str], Callable[[str], Plain]]
_CODECS: dict[object, _Codec] = {}


def _codec(name: object) -> _Codec:
    found = _CODECS.get(name)
    if found is not None:
        return found
    # Imported here, once: the codec modules import to_plain from this package.
    from burrow.codec import avro, json

    _CODECS.update(
        {
            "avro": (avro.encode_value, avro.decode_value),
            "json": (json.encode_value, json.decode_value),
        }
    )
    found = _CODECS.get(name)
    if found is None:
        known = ", ".join(CODEC_NAMES)
        raise PayloadError(f"unknown payload codec {name!r}; known codecs: {known}")
    return found


def encode_blob(value: object, *, codec: str = DEFAULT_CODEC) -> str:
    """Encode a value to a blob with the named codec.

    Args:
        value: Anything :func:`to_plain` accepts.
        codec: ``"avro"`` or ``"json"``.

    Returns:
        The codec's text blob.

    Raises:
        PayloadError: Unknown codec, or the value cannot be encoded.
    """
    return _codec(codec)[0](value)


def decode_blob(blob: str, *, codec: str = DEFAULT_CODEC) -> Plain:
    """Decode a blob with the named codec.

    Args:
        blob: Text from :func:`encode_blob`.
        codec: ``"avro"`` or ``"json"``.

    Returns:
        The plain value.

    Raises:
        PayloadError: Unknown codec or malformed blob.
    """
    return _codec(codec)[1](blob)


def encode(value: object, *, codec: str = DEFAULT_CODEC) -> Payload:
    """Encode a value as a ``{codec, blob}`` payload.

    Args:
        value: Anything :func:`to_plain` accepts.
        codec: ``"avro"`` or ``"json"``.

    Returns:
        The payload.

    Raises:
        PayloadError: Unknown codec, or the value cannot be encoded.
    """
    return {"codec": codec, "blob": encode_blob(value, codec=codec)}


def decode(payload: Mapping[str, object]) -> Plain:
    """Decode a ``{codec, blob}`` payload.

    Args:
        payload: A mapping with a ``str`` ``codec`` and a ``str`` ``blob``.

    Returns:
        The plain value.

    Raises:
        PayloadError: The payload is misshapen, names an unknown codec, or its blob is
            malformed.
    """
    if not isinstance(payload, Mapping):
        raise PayloadError(f"payload must be a mapping, got {type(payload).__name__}")
    codec, blob = payload.get("codec"), payload.get("blob")
    if not isinstance(codec, str) or not isinstance(blob, str):
        raise PayloadError(
            "payload must have a str 'codec' and a str 'blob', got"
            f" codec={type(codec).__name__} blob={type(blob).__name__}"
        )
    return decode_blob(blob, codec=codec)


def payload_size(payload: Payload) -> int:
    """Return the size of a payload's blob in UTF-8 bytes.

    Args:
        payload: A ``{codec, blob}`` payload.

    Returns:
        ``len(payload["blob"].encode("utf-8"))``.
    """
    return len(payload["blob"].encode("utf-8"))


def check_size(
    payload: Payload, *, limit: int = DEFAULT_MAX_PAYLOAD_BYTES, what: str = "payload"
) -> None:
    """Refuse a payload whose blob is over the size limit.

    Args:
        payload: A ``{codec, blob}`` payload.
        limit: Largest allowed blob, in UTF-8 bytes.
        what: What the payload is (``"workflow input"``, ...), for the error message.

    Raises:
        PayloadTooLarge: The blob is larger than ``limit`` bytes.
    """
    size = payload_size(payload)
    if size > limit:
        raise PayloadTooLarge(size=size, limit=limit, what=what)
