"""The ``avro`` codec: Durable Workflow's fixed Avro ``Value`` schema, byte-for-byte."""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from enum import Enum
from typing import Any

import fastavro

from burrow.codec import Plain, to_plain
from burrow.errors import PayloadError

__all__ = ["FINGERPRINT", "MAGIC", "MAX_DEPTH", "SCHEMA_JSON", "decode_value", "encode_value"]

SCHEMA_JSON = (
    '{"type":"record","name":"Value","namespace":"durable_workflow.protocol",'
    '"fields":[{"name":"value","type":["null",'
    '{"type":"record","name":"BooleanValue","fields":[{"name":"boolean","type":"boolean"}]},'
    '{"type":"record","name":"LongValue","fields":[{"name":"long","type":"long"}]},'
    '{"type":"record","name":"DoubleValue","fields":[{"name":"double","type":"double"}]},'
    '{"type":"record","name":"BytesValue","fields":[{"name":"bytes","type":"bytes"}]},'
    '{"type":"record","name":"StringValue","fields":[{"name":"string","type":"string"}]},'
    '{"type":"record","name":"ArrayValue","fields":[{"name":"items",'
    '"type":{"type":"array","items":"Value"}}]},'
    '{"type":"record","name":"MapValue","fields":[{"name":"entries",'
    '"type":{"type":"map","values":"Value"}}]}]}]}'
)
"""The ``durable_workflow.protocol.Value`` schema, exactly as Durable Workflow 2.x spells it."""

MAGIC = b"\xc3\x01"
"""Avro single-object encoding marker."""

FINGERPRINT = bytes.fromhex("e2a33dff55802237")
"""CRC-64-AVRO fingerprint of :data:`SCHEMA_JSON`."""

MAX_DEPTH = 100
"""Deepest list/map nesting encoded or decoded.

fastavro's C reader and writer recurse on the C stack (about 3 KiB a level) without a
guard, so a deeply nested blob would crash the process instead of raising.
"""

_HEADER = MAGIC + FINGERPRINT
_SCHEMA = fastavro.parse_schema(json.loads(SCHEMA_JSON))
_NS = "durable_workflow.protocol."
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def encode_value(value: object) -> str:
    """Encode a value as a base64 Avro single-object ``Value`` blob.

    The result is byte-for-byte what ``durable_workflow._avro.encode`` produces for
    ``durable_workflow.serializer.to_avro_payload_value(value)``.

    Args:
        value: Anything :func:`burrow.codec.to_plain` accepts.

    Returns:
        The base64 (standard alphabet, padded) blob.

    Raises:
        PayloadError: The value cannot be represented (unsupported type, non-``str`` map key,
            int outside the signed 64-bit range, NaN or infinite float, nesting deeper than
            :data:`MAX_DEPTH`).
    """
    try:
        datum = _to_datum(value, 0)
    except RecursionError:
        raise PayloadError("payload nests too deeply (or contains itself)") from None
    buffer = io.BytesIO()
    buffer.write(_HEADER)
    fastavro.schemaless_writer(buffer, _SCHEMA, datum)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_value(blob: str) -> Plain:
    """Decode a base64 Avro single-object ``Value`` blob.

    Args:
        blob: Text produced by :func:`encode_value` or a Durable Workflow 2.x SDK.

    Returns:
        The plain value: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``
        or ``dict[str, ...]``.

    Raises:
        PayloadError: The blob is not strict base64, lacks the ``c301`` marker, names another
            schema fingerprint, or holds a truncated, malformed, too deeply nested or
            over-long datum.
    """
    if not isinstance(blob, str):
        raise PayloadError(f"avro payload blob must be str, got {type(blob).__name__}")
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise PayloadError("avro payload blob is not valid base64") from None
    if len(raw) < len(_HEADER) or raw[: len(MAGIC)] != MAGIC:
        raise PayloadError("avro payload lacks the Avro single-object marker c301")
    fingerprint = raw[len(MAGIC) : len(_HEADER)]
    if fingerprint != FINGERPRINT:
        raise PayloadError(
            f"avro payload names unknown schema fingerprint {fingerprint.hex()}"
            f" (expected {FINGERPRINT.hex()})"
        )
    body = raw[len(_HEADER) :]
    if refusal := _refusal(body):
        raise PayloadError(f"avro payload datum {refusal}")
    try:
        datum = fastavro.schemaless_reader(io.BytesIO(body), _SCHEMA)
    except Exception as exc:  # e.g. invalid UTF-8 in a string
        raise PayloadError(f"avro payload datum is malformed ({exc!r})") from None
    return _from_datum(datum)


def _to_datum(value: object, depth: int) -> dict[str, object]:
    # Plain values convert in one pass; anything else goes through to_plain first.
    if value is None:
        return {"value": None}
    if isinstance(value, Enum):
        return _to_datum(to_plain(value), depth)
    if isinstance(value, bool):
        return {"value": (_NS + "BooleanValue", {"boolean": value})}
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise PayloadError(f"int {value} is outside the signed 64-bit range of an avro long")
        return {"value": (_NS + "LongValue", {"long": value})}
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PayloadError(f"float {value} cannot be encoded; avro payload doubles are finite")
        return {"value": (_NS + "DoubleValue", {"double": value})}
    if isinstance(value, bytes):
        return {"value": (_NS + "BytesValue", {"bytes": value})}
    if isinstance(value, str):
        return {"value": (_NS + "StringValue", {"string": value})}
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        raise PayloadError(f"payload nests lists/maps deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        items = [_to_datum(item, depth + 1) for item in value]
        return {"value": (_NS + "ArrayValue", {"items": items})}
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        entries = {key: _to_datum(item, depth + 1) for key, item in value.items()}
        return {"value": (_NS + "MapValue", {"entries": entries})}
    return _to_datum(to_plain(value), depth)  # raises PayloadError if there is no plain form


def _from_datum(datum: Any) -> Plain:  # fastavro's reader output
    branch = datum["value"]
    if branch is None:
        return None
    if "items" in branch:
        return [_from_datum(item) for item in branch["items"]]
    if "entries" in branch:
        return {key: _from_datum(item) for key, item in branch["entries"].items()}
    if "double" in branch and not math.isfinite(branch["double"]):
        raise PayloadError("avro payload holds a non-finite double")
    scalar: Plain
    (scalar,) = branch.values()
    return scalar


def _refusal(body: bytes) -> str | None:
    """Walk a datum iteratively the way fastavro reads it; say why it must be refused, if so.

    fastavro's C reader recurses on the C stack without a guard (about 3 KiB a level), so a
    deeply nested blob would crash the process rather than raise; it also takes over-long
    varints and negative union indexes. Vetting the bytes first keeps it on safe input.
    """
    pos, end = 0, len(body)

    def long() -> int:
        nonlocal pos
        acc = 0
        for shift in range(0, 70, 7):
            byte = body[pos]
            pos += 1
            acc |= (byte & 0x7F) << shift
            if byte < 0x80:
                acc &= 0xFFFF_FFFF_FFFF_FFFF
                return (acc >> 1) ^ -(acc & 1)
        raise ValueError("has an over-long varint")

    def skip(size: int) -> None:
        nonlocal pos
        if size < 0:
            raise ValueError("has a negative length")
        if pos + size > end:
            raise IndexError
        pos += size

    levels = [[1, 0]]  # per open level: [values left in the current block, 1 if a map]
    try:
        while len(levels) > 1 or levels[0][0]:
            level = levels[-1]
            if not level[0]:
                if (count := long()) < 0:
                    long()  # block byte size
                if (count := abs(count)) > end - pos:
                    raise IndexError  # every value takes a byte; also stops fastavro's -2**63
                level[0] = count
                if not count:
                    levels.pop()
                continue
            level[0] -= 1
            if level[1]:
                skip(long())  # map key
            kind = long()
            if kind in (6, 7):
                if len(levels) > MAX_DEPTH:
                    return f"nests lists/maps deeper than {MAX_DEPTH} levels"
                levels.append([0, kind - 6])
            elif kind in (4, 5):
                skip(long())
            elif kind == 2:
                long()
            elif 0 <= kind <= 3:
                skip((0, 1, 0, 8)[kind])
            else:
                return f"has unknown Value branch {kind}"
    except IndexError:
        return "is truncated"
    except ValueError as exc:
        return str(exc)
    return "has trailing bytes" if pos < end else None
