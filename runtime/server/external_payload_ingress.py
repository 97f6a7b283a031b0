"""Runtime external payload references in a request, replaced by their blobs (PROTOCOL.md 10).

SDK 2.12.0 uploads any payload blob above the advertised threshold and sends `{codec,
external_payload: reference}` in its place, anywhere in any JSON request (inputs, results,
command arguments; a raw-blob command field such as `record_side_effect.result` too). Before a
route reads such a body, each reference is checked against the blob the caller's namespace
holds and replaced by it: `{codec, blob}`, or the raw blob where the command wants a string. A
reference that is malformed (422 `validation_failed`), unknown in the namespace (404
`external_payload_not_found`) or contradicts its blob (422
`external_payload_integrity_mismatch`) refuses the request before any route runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from burrow.server.api_errors import ApiError, response_for
from burrow.server.deps import ServerState
from burrow.server.external_payload_routes import (
    REFERENCE_ID,
    REFERENCE_SCHEMA,
    not_found,
)
from burrow.store.external_payloads import StoredPayload

MARKER = b'"external_payload"'
# Commands whose payload field is a raw blob string, not an envelope (PROTOCOL.md 10).
RAW_BLOB_FIELDS = {"record_side_effect": "result", "start_service_operation": "request_payload"}
_REFERENCE_KEYS = frozenset({"schema", "reference_id", "codec", "size_bytes", "sha256"})


class ExternalPayloadIngress:
    """Pure ASGI middleware: a JSON body holding references is passed on with their blobs."""

    def __init__(self, app: ASGIApp, *, max_request_bytes: int) -> None:
        self.app = app
        self.cap = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Buffer a JSON body; resolve its references when it names any; pass it on."""
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if "json" not in headers.get("content-type", ""):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nothing to pass on
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if MARKER in body:
            try:
                body = await _resolved(scope, body, self.cap)
            except ApiError as refused:
                await response_for(scope["path"], refused)(scope, receive, send)
                return
            scope = _with_length(scope, len(body))
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _with_length(scope: Scope, length: int) -> Scope:
    kept = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
    return {**scope, "headers": [*kept, (b"content-length", str(length).encode())]}


async def _resolved(scope: Scope, body: bytes, cap: int) -> bytes:
    try:
        document = json.loads(body)
    except ValueError:
        return body  # the route refuses it as it would any malformed body
    state: ServerState = scope["app"].state.burrow
    namespace = await state.known.served(Request(scope), state.settings)
    wanted: dict[str, dict[str, Any]] = {}
    uses: list[str] = []
    _collect(document, wanted, uses)
    if not wanted:
        return body
    # The request with its blobs is held whole, so it is bounded as the gate bounds a body: a
    # few references must not stand for more than the gate would have let in.
    resolved_bytes = len(body) + sum(int(wanted[ref_id]["size_bytes"]) for ref_id in uses)
    if resolved_bytes > cap:
        raise ApiError(
            413,
            "payload_too_large",
            f"the request with its external payloads has {resolved_bytes} bytes; at most {cap}",
            max_request_bytes=cap,
        )
    found = await state.store.read_external_payloads(
        namespace=namespace, reference_ids=sorted(wanted)
    )
    blobs = {ref_id: _blob(ref, found.get(ref_id)) for ref_id, ref in wanted.items()}
    return json.dumps(_replace(document, blobs), separators=(",", ":")).encode()


def _is_envelope(value: object) -> bool:
    return isinstance(value, Mapping) and "external_payload" in value


def _collect(value: object, wanted: dict[str, dict[str, Any]], uses: list[str]) -> None:
    if isinstance(value, list):
        for item in value:
            _collect(item, wanted, uses)
    elif isinstance(value, Mapping):
        if _is_envelope(value):
            ref = _checked_envelope(value)
            wanted[ref["reference_id"]] = ref
            uses.append(ref["reference_id"])
            return
        for item in value.values():
            _collect(item, wanted, uses)


def _checked_envelope(envelope: Mapping[str, Any]) -> dict[str, Any]:
    ref = envelope.get("external_payload")
    if (
        set(envelope) != {"codec", "external_payload"}
        or not isinstance(ref, dict)
        or set(ref) != _REFERENCE_KEYS
        or ref.get("schema") != REFERENCE_SCHEMA
        or not isinstance(ref.get("reference_id"), str)
        or not REFERENCE_ID.fullmatch(ref["reference_id"])
        or ref.get("codec") != envelope.get("codec")
        or type(ref.get("size_bytes")) is not int
        or ref["size_bytes"] < 0
        or not isinstance(ref.get("sha256"), str)
    ):
        raise ApiError(
            422,
            "validation_failed",
            "an external payload envelope must be exactly {codec, external_payload} with a"
            " runtime reference (schema, reference_id, codec, size_bytes, sha256)",
            errors={"external_payload": ["malformed runtime external payload reference"]},
        )
    return ref


def _blob(ref: Mapping[str, Any], stored: StoredPayload | None) -> str:
    reference_id = str(ref["reference_id"])
    if stored is None or stored.data is None:
        raise not_found(reference_id)
    declared = (ref["codec"], ref["size_bytes"], ref["sha256"])
    if declared != (stored.codec, stored.size_bytes, stored.sha256):
        raise ApiError(
            422,
            "external_payload_integrity_mismatch",
            f"external payload {reference_id} is not the blob its reference describes",
            reference_id=reference_id,
        )
    try:
        return stored.data.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(
            422,
            "external_payload_integrity_mismatch",
            f"external payload {reference_id} is not a UTF-8 payload blob",
            reference_id=reference_id,
        ) from None


def _replace(value: object, blobs: Mapping[str, str]) -> object:
    if isinstance(value, list):
        return [_replace(item, blobs) for item in value]
    if not isinstance(value, Mapping):
        return value
    if _is_envelope(value):
        ref = value["external_payload"]
        return {"codec": value["codec"], "blob": blobs[ref["reference_id"]]}
    replaced = {key: _replace(item, blobs) for key, item in value.items()}
    raw_field = RAW_BLOB_FIELDS.get(str(value.get("type")))
    if raw_field is not None and _is_envelope(value.get(raw_field)):
        replaced[raw_field] = blobs[value[raw_field]["external_payload"]["reference_id"]]
    return replaced
