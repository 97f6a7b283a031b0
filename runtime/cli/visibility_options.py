"""`--memo` and `--search-attributes` of `burrow workflow start` (issue 30): JSON objects.

Parsed while the flags are read, so a value that is not a JSON object exits 2 before anything
connects; the namespace's registry types the attributes when the run is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer

from burrow.cli.output import EXIT_USAGE, fail
from burrow.errors import InvalidSearchAttribute
from burrow.protocol.shapes import JsonDict


def _object(value: str | None, flag: str) -> JsonDict | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        fail(f"{flag} is not JSON: {exc.msg} at character {exc.pos}", code=EXIT_USAGE)
    if not isinstance(parsed, dict):
        fail(f'{flag} must be a JSON object, e.g. \'{{"customer": "c-17"}}\'', code=EXIT_USAGE)
    return parsed


def parse_memo(value: str | None) -> JsonDict | None:
    """--memo as an object; exit 2 otherwise."""
    return _object(value, "--memo")


def parse_search_attributes(value: str | None) -> JsonDict | None:
    """--search-attributes as an object; exit 2 otherwise."""
    return _object(value, "--search-attributes")


MemoOption = Annotated[
    str | None,
    typer.Option(
        "--memo",
        help="The run's memo: a JSON object, shown by describe and lists (at most 256 KiB).",
    ),
]
SearchAttributesOption = Annotated[
    str | None,
    typer.Option(
        "--search-attributes",
        help='The run\'s search attributes as a JSON object, e.g. \'{"CustomerId": "c-17"}\';'
        " each must be registered (burrow search-attribute create) and of its type.",
    ),
]


@contextmanager
def refusing_bad_attributes() -> Iterator[None]:
    """An attribute the namespace's registry refuses exits 2, as bad flags do."""
    try:
        yield
    except InvalidSearchAttribute as exc:
        fail(str(exc), code=EXIT_USAGE)
