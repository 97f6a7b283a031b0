"""Runtime external payload transport (PROTOCOL.md 10; SDK 2.12.0's `/api/external-payloads/v1`).

A client uploads a payload blob above `threshold_bytes` (`POST /api/external-payloads/v1`, the
bytes as the body, codec, size and SHA-256 in headers) and sends `{codec, external_payload:
reference}` in its place; `GET /api/external-payloads/v1/{referenceId}` reads the bytes back.
Blobs are kept in Postgres, at most the store's payload limit each. A request that carries
references has them replaced by their blobs before any route reads it
(external_payload_ingress.py), so everything behind the routes sees ordinary envelopes, and
no response ever holds a reference.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from burrow.server.api_errors import ApiError
from burrow.server.auth import API_ROLES, Caller, authorize
from burrow.server.deps import State, server_state
from burrow.server.routing import ResponseBody
from burrow.store.external_payloads import StoredPayload

router = APIRouter(prefix="/api/external-payloads/v1")

TRANSPORT_SCHEMA = "durable-workflow.v2.runtime-external-payload-transport.v1"
UPLOAD_SCHEMA = "durable-workflow.v2.runtime-external-payload-upload.v1"
REFERENCE_SCHEMA = "durable-workflow.v2.runtime-external-payload-reference.v1"
CODEC = "avro"
THRESHOLD_BYTES = 256 * 1024
"""Blobs above this are uploaded by SDK clients (at most the store's payload limit)."""
REQUEST_TIMEOUT_SECONDS = 30
CODEC_HEADER = "x-durable-workflow-payload-codec"
SIZE_HEADER = "x-durable-workflow-payload-size"
SHA256_HEADER = "x-durable-workflow-payload-sha256"
REFERENCE_ID = re.compile(r"ep_[0-9A-HJKMNP-TV-Z]{26}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SIZE = re.compile(r"[0-9]{1,12}")


async def payload_caller(request: Request) -> Caller:
    """Workers and clients both move payloads: any role, in a namespace the server serves."""
    state = server_state(request)
    roles = authorize(request, state.settings, API_ROLES)
    return Caller(roles=roles, namespace=await state.known.served(request, state.settings))


PayloadCaller = Annotated[Caller, Depends(payload_caller)]


def transport_policy(max_payload_bytes: int) -> ResponseBody:
    """`namespace.external_payload_storage` of discovery: the transport manifest the SDK checks."""
    return {
        "status": "available",
        "threshold_bytes": min(THRESHOLD_BYTES, max_payload_bytes),
        "transport": {
            "schema": TRANSPORT_SCHEMA,
            "version": 1,
            "reference_schema": REFERENCE_SCHEMA,
            "mode": "authenticated_namespace_runtime",
            "upload": {"method": "POST", "path": "/api/external-payloads/v1"},
            "fetch": {"method": "GET", "path_template": "/api/external-payloads/v1/{referenceId}"},
            "limits": {
                "max_payload_bytes": max_payload_bytes,
                "request_timeout_seconds": REQUEST_TIMEOUT_SECONDS,
            },
        },
    }


def reference(stored: StoredPayload) -> ResponseBody:
    """The reference object of a stored blob, exactly the keys the SDK accepts."""
    return {
        "schema": REFERENCE_SCHEMA,
        "reference_id": stored.reference_id,
        "codec": stored.codec,
        "size_bytes": stored.size_bytes,
        "sha256": stored.sha256,
    }


def _integrity(message: str, **extra: object) -> ApiError:
    return ApiError(422, "external_payload_integrity_mismatch", message, **extra)


def _checked_headers(request: Request) -> tuple[str, int, str]:
    """(codec, size, sha256) the upload declares; 415 for another codec, 422 when malformed."""
    codec = request.headers.get(CODEC_HEADER)
    size = request.headers.get(SIZE_HEADER, "")
    sha256 = request.headers.get(SHA256_HEADER, "")
    if codec != CODEC:
        raise ApiError(
            415,
            "unsupported_payload_codec",
            f"payload codec {codec!r} is not supported; use {CODEC!r}",
            supported_codecs=[CODEC],
        )
    if not _SIZE.fullmatch(size) or not _SHA256.fullmatch(sha256):
        raise ApiError(
            422,
            "validation_failed",
            "the upload must declare its size and lowercase hex SHA-256",
            errors={SIZE_HEADER: ["a non-negative integer"], SHA256_HEADER: ["64 hex digits"]},
        )
    return codec, int(size), sha256


@router.post("")
async def upload(request: Request, state: State, caller: PayloadCaller) -> JSONResponse:
    """Keep an uploaded blob (201); the same bytes again give the same reference.

    Refused, with nothing kept: another codec (415), a body that is not what the headers
    declare (422 `external_payload_integrity_mismatch`), or above the payload limit (413).
    """
    codec, size, sha256 = _checked_headers(request)
    limit = state.store.max_payload_bytes
    if size > limit:
        raise _too_large(size, limit)
    data = await request.body()
    if len(data) > limit:
        raise _too_large(len(data), limit)
    if len(data) != size:
        raise _integrity(f"the body has {len(data)} bytes, not the {size} declared")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise _integrity("the body's SHA-256 is not the one declared")
    stored = await state.store.put_external_payload(
        namespace=caller.namespace, codec=codec, sha256=sha256, data=data
    )
    body = {"schema": UPLOAD_SCHEMA, "transport_version": 1, "reference": reference(stored)}
    return JSONResponse(body, status_code=201)


@router.get("/{reference_id}")
async def fetch(reference_id: str, state: State, caller: PayloadCaller) -> Response:
    """The blob's bytes, with its codec, size and SHA-256 as headers; 404 when unknown."""
    stored = (
        await state.store.read_external_payloads(
            namespace=caller.namespace, reference_ids=[reference_id]
        )
        if REFERENCE_ID.fullmatch(reference_id)
        else {}
    ).get(reference_id)
    if stored is None or stored.data is None:
        raise not_found(reference_id)
    return Response(
        stored.data,
        media_type="application/octet-stream",
        headers={
            "X-Durable-Workflow-Payload-Codec": stored.codec,
            "X-Durable-Workflow-Payload-Size": str(stored.size_bytes),
            "X-Durable-Workflow-Payload-SHA256": stored.sha256,
        },
    )


def not_found(reference_id: str) -> ApiError:
    """404 `external_payload_not_found`: the namespace holds no blob of that reference."""
    return ApiError(
        404,
        "external_payload_not_found",
        f"no external payload {reference_id[:80]!r} in this namespace",
        reference_id=reference_id[:80],
    )


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(
        413,
        "payload_too_large",
        f"the payload has {size} bytes; at most {limit} are kept",
        max_payload_bytes=limit,
    )
