"""Payload codecs: the avro codec is byte-for-byte the Durable Workflow SDK's Value encoding."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import random
import re
import subprocess
import sys
import uuid
from typing import Any

import pydantic
import pytest
from durable_workflow import _avro as sdk_avro
from durable_workflow import serializer as sdk_serializer

import burrow.codec
from burrow.codec import avro, json
from burrow.errors import PayloadError, PayloadTooLarge

HEADER = bytes.fromhex("c301e2a33dff55802237")


class Colour(enum.Enum):
    RED = "red"
    PAIR = (1, "two")


class Level(enum.IntEnum):
    HIGH = 3


class Order(pydantic.BaseModel):
    id: int
    sku: str
    at: datetime.datetime
    tags: list[str]
    note: str | None = None


@dataclasses.dataclass
class Line:
    sku: str
    qty: int
    price: float
    colour: Colour
    dims: tuple[int, int]


@dataclasses.dataclass
class Cart:
    lines: list[Line]
    owner: dict[str, Any]


PLAIN_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    -(2**31),
    2**62,
    2**63 - 1,
    -(2**63),
    0.0,
    -0.0,
    0.5,
    -2.75,
    1e300,
    5e-324,
    "",
    "world",
    "héllo wörld ✓ 🎉 日本語",
    "a\x00b",
    b"",
    b"\x00\xff\x80binary",
    [],
    {},
    ["world"],
    [None, True, 1, 1.5, "s", b"b", [], {}],
    {"a": 1, "b": [1, 2, {"c": None}], "": "empty key", "ключ": b"\x01"},
    [[[[["deep"]]]]],
    {"z": 1, "a": 2, "m": 3},
    list(range(-100, 100)),
    {f"k{i}": i * 0.25 for i in range(50)},
]

RICH_VALUES: list[Any] = [
    (1, 2, 3),
    ((), ("x",)),
    Colour.RED,
    Colour.PAIR,
    Level.HIGH,
    datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC),
    datetime.datetime(2024, 5, 6, 7, 8, 9),
    datetime.date(2024, 2, 29),
    datetime.time(23, 59, 58),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    decimal.Decimal("12.340"),
    range(4),
    Order(
        id=7,
        sku="W-1",
        at=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        tags=["a", "b"],
    ),
    Line(sku="W-1", qty=2, price=9.5, colour=Colour.RED, dims=(3, 4)),
    Cart(
        lines=[Line(sku="W-2", qty=1, price=0.5, colour=Colour.PAIR, dims=(1, 1))],
        owner={"name": "Ada", "level": Level.HIGH, "id": uuid.UUID(int=1)},
    ),
    {"when": datetime.date(2000, 1, 1), "items": (Colour.RED, b"x")},
]


def sdk_blob(value: Any) -> str:
    """What the SDK writes for a value once it is adapted with to_avro_payload_value."""
    return str(sdk_avro.encode(sdk_serializer.to_avro_payload_value(value)))


def same(left: Any, right: Any) -> bool:
    """Equal, and of the same kinds all the way down (True is not 1, 1.0 is not 1, -0.0 not 0.0)."""
    return repr(left) == repr(right)


@pytest.mark.parametrize("value", PLAIN_VALUES + RICH_VALUES, ids=repr)
def test_avro_blob_matches_durable_workflow_sdk_byte_for_byte(value: Any) -> None:
    assert avro.encode_value(value) == sdk_blob(value)


@pytest.mark.parametrize("value", PLAIN_VALUES, ids=repr)
def test_plain_values_need_no_adapting_for_the_sdk_serializer(value: Any) -> None:
    assert avro.encode_value(value) == sdk_serializer.encode(value)


@pytest.mark.parametrize("value", PLAIN_VALUES + RICH_VALUES, ids=repr)
def test_each_side_decodes_the_others_blob_to_the_same_value(value: Any) -> None:
    expected = sdk_serializer.to_avro_payload_value(value)
    ours, theirs = avro.encode_value(value), sdk_blob(value)
    assert same(avro.decode_value(theirs), expected)
    assert same(sdk_avro.decode(ours), expected)
    assert same(avro.decode_value(ours), sdk_avro.decode(theirs))


def test_avro_golden_vector_encodes_list_of_world() -> None:
    assert avro.encode_value(["world"]) == "wwHioz3/VYAiNwwCCgp3b3JsZAA="
    assert burrow.codec.encode(["world"]) == {
        "codec": "avro",
        "blob": "wwHioz3/VYAiNwwCCgp3b3JsZAA=",
    }
    assert avro.decode_value("wwHioz3/VYAiNwwCCgp3b3JsZAA=") == ["world"]


@pytest.mark.parametrize(
    ("value", "datum_hex"),
    [
        (None, "00"),
        (True, "0201"),
        (False, "0200"),
        (0, "0400"),
        (1, "0402"),
        (-1, "0401"),
        (2**63 - 1, "04feffffffffffffffff01"),
        (-(2**63), "04ffffffffffffffffff01"),
        (0.5, "06000000000000e03f"),
        ("", "0a00"),
        ("é", "0a04c3a9"),
        (b"\x00", "080200"),
        ([], "0c00"),
        ({}, "0e00"),
        ({"a": [1, None]}, "0e0202610c040402000000"),
    ],
    ids=repr,
)
def test_avro_blob_is_single_object_framing_of_the_value_datum(value: Any, datum_hex: str) -> None:
    # Hand-checked against the Avro spec: union index and lengths are zigzag varints.
    blob = avro.encode_value(value)
    assert base64.b64decode(blob) == HEADER + bytes.fromhex(datum_hex)
    assert same(avro.decode_value(blob), value)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (object(), "object"),
        ({1, 2}, "set"),
        (frozenset(), "frozenset"),
        (bytearray(b"x"), "bytearray"),
        (complex(1, 2), "complex"),
        ([1, {"ok": [object()]}], "object"),
        ({1: "x"}, "int"),
        ({("a",): 1}, "tuple"),
        (Line, "type"),
    ],
    ids=lambda value: re.sub(r" at 0x[0-9a-f]+", "", repr(value)),  # the same in every process
)
@pytest.mark.parametrize("codec", ["avro", "json"])
def test_unencodable_values_raise_payload_error_naming_the_type(
    value: Any, named: str, codec: str
) -> None:
    with pytest.raises(PayloadError, match=named):
        burrow.codec.encode(value, codec=codec)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, [1, 10**30], float("nan"), float("inf")])
def test_avro_refuses_out_of_range_ints_and_non_finite_floats_like_the_sdk(value: Any) -> None:
    with pytest.raises(PayloadError):
        avro.encode_value(value)
    with pytest.raises(ValueError):
        sdk_avro.encode(value)


def test_self_referencing_value_raises_payload_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    for codec in ("avro", "json"):
        with pytest.raises(PayloadError):
            burrow.codec.encode(loop, codec=codec)
    cycle: dict[str, Any] = {}
    cycle["self"] = Cart(lines=[], owner=cycle)
    with pytest.raises(PayloadError, match="too deeply"):
        burrow.codec.to_plain(cycle)


def test_avro_nesting_is_capped_at_max_depth_both_ways() -> None:
    deepest: Any = "leaf"
    for _ in range(avro.MAX_DEPTH):
        deepest = [deepest]
    assert avro.decode_value(avro.encode_value(deepest)) == deepest
    with pytest.raises(PayloadError, match="deeper than"):
        avro.encode_value([deepest])
    with pytest.raises(PayloadError, match="deeper than"):
        avro.encode_value({"k": deepest})
    too_deep = (
        HEADER + b"\x0c\x02" * (avro.MAX_DEPTH + 1) + b"\x00" + b"\x00" * (avro.MAX_DEPTH + 1)
    )
    with pytest.raises(PayloadError, match="deeper than"):
        avro.decode_value(base64.b64encode(too_deep).decode())


def test_deeply_nested_blob_raises_instead_of_crashing_the_process() -> None:
    # fastavro's C reader overflows the C stack near 2,500 levels; the SDK segfaults here.
    code = (
        "import base64\n"
        "from burrow.codec import avro\n"
        "from burrow.errors import PayloadError\n"
        f"head = {HEADER!r}\n"
        "for index in (b'\\x0c', b'\\x0e\\x02k', b'\\x01\\x02k'):\n"
        "    raw = head + (index[:1] + b'\\x02' + index[1:]) * 50_000\n"
        "    try:\n"
        "        avro.decode_value(base64.b64encode(raw).decode())\n"
        "    except PayloadError:\n"
        "        pass\n"
        "print('survived')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "survived"


def test_avro_decode_refuses_negative_union_index_that_the_sdk_wraps_around() -> None:
    # fastavro indexes the union list with Python semantics: index -8 is "null" to the SDK.
    blob = base64.b64encode(HEADER + b"\x0f").decode()
    assert sdk_avro.decode(blob) is None
    with pytest.raises(PayloadError, match="unknown Value branch -8"):
        avro.decode_value(blob)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        ("not base64!", "base64"),
        ("wwHioz3/VYAiNwwCCgp3b3JsZAA", "base64"),  # padding missing
        ("wwHi oz3/VYAiNwwCCgp3b3JsZAA=", "base64"),
        ('["world"]', "base64"),
        ("", "c301"),
        (base64.b64encode(b"\xc3\x01\xe2").decode(), "c301"),
        (base64.b64encode(b"\x4f\x62\x6a\x01" + bytes(8) + b"\x00").decode(), "c301"),
        (base64.b64encode(b"\xc3\x02" + HEADER[2:] + b"\x00").decode(), "c301"),
        (
            base64.b64encode(HEADER[:2] + bytes(8) + b"\x00").decode(),
            "fingerprint 0000000000000000",
        ),
        (base64.b64encode(HEADER).decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x0a\x0aworl").decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x06\x00\x00").decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x0c\x02\x00").decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x00\x00").decode(), "trailing"),
        (base64.b64encode(HEADER + b"\x0c" + b"\xff" * 9 + b"\x01\x00\x00").decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x0c\x7f\x00").decode(), "truncated"),
        (base64.b64encode(HEADER + b"\x10").decode(), "unknown Value branch 8"),
        (base64.b64encode(HEADER + b"\x0a\x03x").decode(), "negative length"),
        (base64.b64encode(HEADER + b"\x04" + b"\x80" * 11 + b"\x00").decode(), "over-long"),
        (base64.b64encode(HEADER + b"\x0a\x02\xff").decode(), "malformed"),
        (base64.b64encode(HEADER + b"\x06" + bytes(6) + b"\xf8\x7f").decode(), "non-finite"),
    ],
)
def test_malformed_avro_blobs_raise_payload_error(blob: str, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        avro.decode_value(blob)


def test_every_truncation_of_a_valid_avro_blob_raises_payload_error() -> None:
    raw = base64.b64decode(avro.encode_value({"a": [1, "two", 3.0, b"4", None, True, {"b": []}]}))
    for end in range(len(raw)):
        with pytest.raises(PayloadError):
            avro.decode_value(base64.b64encode(raw[:end]).decode())


def test_corrupted_avro_blobs_raise_payload_error_or_agree_with_the_sdk() -> None:
    rng = random.Random(20240506)
    raw = base64.b64decode(
        avro.encode_value({"k": [1, -(2**40), "str", b"\x00", 0.25, {"x": None}]})
    )
    for _ in range(3000):
        mutated = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(HEADER), len(mutated))] = rng.randrange(256)
        blob = base64.b64encode(bytes(mutated)).decode()
        try:
            ours = avro.decode_value(blob)
        except PayloadError:
            continue
        assert same(ours, sdk_avro.decode(blob))


def test_avro_decode_rejects_a_blob_that_is_not_str() -> None:
    with pytest.raises(PayloadError, match="must be str"):
        avro.decode_value(b"wwHioz3/VYAiNwA=")  # type: ignore[arg-type]


def has_bytes(value: Any) -> bool:
    if isinstance(value, dict):
        return any(has_bytes(item) for item in value.values())
    if isinstance(value, list):
        return any(has_bytes(item) for item in value)
    return isinstance(value, bytes)


@pytest.mark.parametrize("value", [v for v in PLAIN_VALUES if not has_bytes(v)], ids=repr)
def test_json_codec_round_trips_plain_values(value: Any) -> None:
    payload = burrow.codec.encode(value, codec="json")
    assert payload["codec"] == "json"
    assert same(burrow.codec.decode(payload), value)


def test_json_codec_writes_compact_utf8_json_of_the_plain_value() -> None:
    value = {"b": (1, 2.5), "a": [None, True, "é✓"], "c": Colour.RED, "u": uuid.UUID(int=0)}
    assert json.encode_value(value) == (
        '{"b":[1,2.5],"a":[null,true,"é✓"],"c":"red","u":"00000000-0000-0000-0000-000000000000"}'
    )
    cart = Cart(lines=[], owner={"n": 1})
    assert json.decode_value(json.encode_value(cart)) == burrow.codec.to_plain(cart)
    assert json.encode_value(2**70) == str(2**70)


@pytest.mark.parametrize("value", [b"x", [b"x"], {"k": b""}])
def test_json_codec_refuses_bytes(value: Any) -> None:
    with pytest.raises(PayloadError, match="bytes"):
        json.encode_value(value)


@pytest.mark.parametrize("value", [float("nan"), [float("inf")], {"k": float("-inf")}])
def test_json_codec_refuses_non_finite_floats(value: Any) -> None:
    with pytest.raises(PayloadError):
        json.encode_value(value)


@pytest.mark.parametrize("blob", ["", "{", "[1,]", "NaN", "[Infinity]", "{'a': 1}"])
def test_malformed_json_blobs_raise_payload_error(blob: str) -> None:
    with pytest.raises(PayloadError):
        json.decode_value(blob)


def test_encode_defaults_to_avro_and_round_trips_through_decode() -> None:
    assert burrow.codec.DEFAULT_CODEC == "avro"
    value = {"order": Order(id=1, sku="x", at=datetime.datetime(2024, 1, 1), tags=[])}
    payload = burrow.codec.encode(value)
    assert payload == {"codec": "avro", "blob": sdk_blob(value)}
    assert burrow.codec.decode(payload) == sdk_serializer.to_avro_payload_value(value)
    assert burrow.codec.decode_blob(payload["blob"]) == burrow.codec.decode(payload)
    assert burrow.codec.encode_blob(value, codec="json") == json.encode_value(value)


@pytest.mark.parametrize(
    "payload",
    [
        {"codec": "msgpack", "blob": "x"},
        {"codec": "AVRO", "blob": "wwHioz3/VYAiNwA="},
        {"codec": "", "blob": ""},
    ],
)
def test_decode_refuses_unknown_codec(payload: dict[str, Any]) -> None:
    with pytest.raises(PayloadError, match="unknown payload codec"):
        burrow.codec.decode(payload)


def test_encode_refuses_unknown_codec() -> None:
    with pytest.raises(PayloadError, match="unknown payload codec 'pickle'"):
        burrow.codec.encode(1, codec="pickle")
    with pytest.raises(PayloadError, match="unknown payload codec"):
        burrow.codec.decode_blob("1", codec="yaml")


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"codec": "avro"},
        {"blob": "wwHioz3/VYAiNwA="},
        {"codec": None, "blob": "wwHioz3/VYAiNwA="},
        {"codec": "avro", "blob": None},
        {"codec": "avro", "blob": b"wwHioz3/VYAiNwA="},
        ["avro", "wwHioz3/VYAiNwA="],
        "wwHioz3/VYAiNwA=",
    ],
    ids=repr,
)
def test_decode_refuses_misshapen_payloads(payload: Any) -> None:
    with pytest.raises(PayloadError, match="payload must"):
        burrow.codec.decode(payload)


def test_payload_size_counts_utf8_bytes_of_the_blob() -> None:
    assert burrow.codec.payload_size({"codec": "json", "blob": '"é"'}) == 4
    payload = burrow.codec.encode("x" * 1000)
    assert burrow.codec.payload_size(payload) == len(payload["blob"])


def test_check_size_raises_payload_too_large_over_the_limit() -> None:
    payload = burrow.codec.encode("x" * 100)
    size = burrow.codec.payload_size(payload)
    burrow.codec.check_size(payload, limit=size)
    with pytest.raises(PayloadTooLarge) as caught:
        burrow.codec.check_size(payload, limit=size - 1, what="workflow input")
    error = caught.value
    assert isinstance(error, PayloadError)
    assert (error.size, error.limit, error.what) == (size, size - 1, "workflow input")  # type: ignore[attr-defined]
    assert "workflow input" in str(error)


def test_check_size_defaults_to_two_mebibytes() -> None:
    assert burrow.codec.DEFAULT_MAX_PAYLOAD_BYTES == 2 * 1024 * 1024
    limit = burrow.codec.DEFAULT_MAX_PAYLOAD_BYTES
    burrow.codec.check_size({"codec": "json", "blob": "x" * limit})
    with pytest.raises(PayloadTooLarge, match="payload is"):
        burrow.codec.check_size({"codec": "json", "blob": "x" * (limit + 1)})
