"""Payload size limits, checked before anything is written; failure records as stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from burrow.errors import PayloadTooLarge
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure, JsonObject

DEFAULT_MAX_PAYLOAD_BYTES = 2 * 1024 * 1024


def check_payload(payload: Mapping[str, object] | None, what: str, *, limit: int) -> None:
    """Refuse a payload envelope whose blob is larger than `limit` bytes."""
    if payload is None:
        return
    size = len(str(payload.get("blob", "")).encode())
    if size > limit:
        raise PayloadTooLarge(size=size, limit=limit, what=what)


def check_command_payloads(commands: Sequence[cmd.Command], *, limit: int) -> None:
    """Refuse a command whose payload is oversized."""
    for command in commands:
        for key, envelope in cmd.envelopes(command):
            check_payload(envelope, f"{command.type} {key}", limit=limit)


def failure_record(failure: Failure) -> JsonObject:
    """The JSON a failure column keeps: exactly the keys the record's builder set.

    A record built from some keys only (a shutdown's type and message) is stored with those
    keys only; fields left unset are not written as defaults.
    """
    return failure.model_dump(mode="json", exclude_unset=True)
