"""What the `burrow workflow` commands accept as input, checked before anything is connected.

`--input` takes a JSON array of positional arguments in one of three forms: the JSON itself,
`@PATH` (the JSON is read from a file) or `-` (read from stdin). The last two carry inputs larger
than the operating system lets a command line hold (about 128 KiB per argument on Linux). No JSON
text starts with `@` and `-` alone is not JSON, so the three forms never overlap.

Workflow ids and signal ids must be non-empty, printable and free of leading or trailing
whitespace: ids are compared exactly, so `" order-1"` would start a second, look-alike workflow
(or address none). Run ids are UUIDs, checked here so a typo gets a message instead of a
database error.

The functions raise `InputError` with the message to show; `burrow.cli.options` turns it into a
usage error (exit code 2).
"""

from __future__ import annotations

import json
import unicodedata
import uuid
from pathlib import Path
from typing import BinaryIO

from burrow.protocol import shapes
from burrow.protocol.shapes import JsonValue

STDIN = "-"
FILE_PREFIX = "@"
SHOWN_CHARS = 60
JSON_KINDS: dict[type, str] = {
    dict: "an object",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


class InputError(ValueError):
    """A command-line value that cannot be used; the message says why and what to write."""


def load_input(value: str, *, stdin: BinaryIO) -> list[JsonValue]:
    """The positional arguments of an `--input` value: JSON text, `@PATH` or `-` (stdin).

    Args:
        value: The option's value.
        stdin: Where `-` reads from.

    Returns:
        The arguments.

    Raises:
        InputError: The file cannot be read, or the text is not UTF-8, not JSON or not an array.
    """
    if value == STDIN:
        text = _decode(stdin.read(), source="from stdin")
        return _parse_array(text, source="from stdin", literal=False)
    if value.startswith(FILE_PREFIX):
        path = value[len(FILE_PREFIX) :]
        source = f"{FILE_PREFIX}{path}"
        return _parse_array(_decode(_read_file(path), source=source), source=source, literal=False)
    return _parse_array(value, source="", literal=True)


def _read_file(path: str) -> bytes:
    if not path:
        raise InputError("--input @ needs a file name after the @, e.g. --input @args.json")
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"--input @{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"--input @{path}: is a directory, not a file") from None
    except PermissionError:
        raise InputError(f"--input @{path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"--input @{path}: cannot read it ({exc.strerror or exc})") from None


def _decode(data: bytes, *, source: str) -> str:
    try:
        # utf-8-sig: a byte order mark, as some editors write, is dropped rather than refused.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"--input {source} is not UTF-8 text:"
            f" byte 0x{data[exc.start]:02x} at offset {exc.start} cannot be decoded"
        ) from None


def _parse_array(text: str, *, source: str, literal: bool) -> list[JsonValue]:
    where = f" {source}" if source else ""
    if not text.strip():
        raise InputError(f"--input{where} is empty; pass a JSON array such as '[]'")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        shown = f": {_shorten(text)}" if literal else ""
        raise InputError(
            f"--input{where} is not valid JSON ({exc.msg} at line {exc.lineno},"
            f" column {exc.colno}){shown}"
        ) from None
    if not isinstance(value, list):
        kind = JSON_KINDS.get(type(value), type(value).__name__)
        hint = f"'[{_shorten(text)}]'" if literal else "brackets: [ ... ]"
        raise InputError(
            f"--input{where} must be a JSON array of positional arguments, got {kind};"
            f" wrap a single argument in {hint}"
        )
    return value


def _shorten(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def check_id(value: str, *, what: str, if_empty: str = "") -> str:
    """Refuse an empty, blank, padded or unprintable id; return it unchanged otherwise.

    Args:
        value: The id as given.
        what: How the message names it, e.g. "workflow id" or "--signal-id".
        if_empty: Appended to the message for an empty id (what to do instead).

    Returns:
        The id.

    Raises:
        InputError: The id is empty, blank, has leading or trailing whitespace, or contains a
            control character.
    """
    if not value:
        raise InputError(f"{what} must not be empty{if_empty}")
    if not value.strip():
        raise InputError(f"{what} {value!r} is blank")
    if value != value.strip():
        raise InputError(
            f"{what} {value!r} has leading or trailing whitespace; ids are compared exactly,"
            f" so write {value.strip()!r} if that is the id you mean"
        )
    for position, char in enumerate(value):
        if unicodedata.category(char) == "Cc":
            raise InputError(
                f"{what} {_shorten(repr(value))} contains the control character"
                f" U+{ord(char):04X} at position {position}; ids must be printable"
            )
    return value


def check_run_id(value: str) -> str:
    """A run id in canonical form (lowercase, hyphenated), or InputError when it is no UUID.

    Args:
        value: The `--run-id` value.

    Returns:
        The canonical UUID text.

    Raises:
        InputError: The value is not a UUID.
    """
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise InputError(
            f"--run-id {_shorten(repr(value))} is not a run id: run ids are UUIDs such as"
            " 0b8f5c9e-2d4a-4f7e-9a51-6c3d2e1f0a9b (`burrow workflow describe ID` shows one)"
        ) from None


def check_workflow_timeouts(execution: float | None, run: float | None) -> None:
    """--execution-timeout and --run-timeout: positive seconds, the run one at most the other."""
    try:
        shapes.check_workflow_timeouts(execution, run)
    except ValueError as exc:
        message = str(exc).replace("execution_timeout", "--execution-timeout")
        raise InputError(message.replace("run_timeout", "--run-timeout")) from None
