"""Runtime external payloads over HTTP: `/api/external-payloads/v1` as SDK 2.12.0 uses it.

PROTOCOL.md 10 (external payloads): discovery advertises the transport manifest the SDK checks;
an upload keeps the blob in Postgres and answers its reference; a fetch gives the bytes back
with their integrity headers; a request carrying `{codec, external_payload}` is served as if it
carried the blob, and a bad reference refuses it with nothing written.
"""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa

from burrow import codec
from burrow.store import schema as s
from tests.integration.server.conftest import CONTROL, QUEUE, Api

UPLOAD = "/api/external-payloads/v1"


def _headers(data: bytes, **overrides: str) -> dict[str, str]:
    return {
        **CONTROL,
        "Content-Type": "application/octet-stream",
        "X-Durable-Workflow-Payload-Codec": "avro",
        "X-Durable-Workflow-Payload-Size": str(len(data)),
        "X-Durable-Workflow-Payload-SHA256": hashlib.sha256(data).hexdigest(),
        **overrides,
    }


async def _upload(api: Api, data: bytes, **overrides: str) -> Any:
    return await api.http.post(UPLOAD, content=data, headers=_headers(data, **overrides))


async def _written(api: Api) -> tuple[int, int, int]:
    """How many blobs, runs and history events the database holds."""
    async with api.state.store.engine.begin() as conn:
        counts = [
            (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()
            for table in (s.external_payloads, s.runs, s.history_events)
        ]
    return counts[0], counts[1], counts[2]


def _start_body(workflow_id: str, envelope: dict[str, Any]) -> dict[str, Any]:
    return {
        "workflow_id": workflow_id,
        "workflow_type": "greeter",
        "task_queue": QUEUE,
        "input": envelope,
    }


async def test_discovery_upload_fetch_and_a_start_through_a_reference(api: Api) -> None:
    """PROTOCOL.md 10: the manifest in discovery; upload answers the SDK's reference shape (the
    same bytes again, the same reference); fetch returns the bytes and integrity headers; a
    start whose input is a reference runs with the blob itself."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    assert info["worker_protocol"]["server_capabilities"]["runtime_external_payload_transport"]
    policy = info["namespace"]["external_payload_storage"]
    assert policy["status"] == "available"
    assert policy["transport"]["upload"] == {"method": "POST", "path": UPLOAD}
    limit = info["limits"]["max_payload_bytes"]
    assert policy["transport"]["limits"]["max_payload_bytes"] == limit >= policy["threshold_bytes"]

    envelope = dict(codec.encode(["x" * 1000]))
    data = envelope["blob"].encode()
    uploaded = await _upload(api, data)
    assert uploaded.status_code == 201, uploaded.text
    body = uploaded.json()
    assert (body["schema"], body["transport_version"]) == (
        "durable-workflow.v2.runtime-external-payload-upload.v1",
        1,
    )
    ref = body["reference"]
    assert set(ref) == {"schema", "reference_id", "codec", "size_bytes", "sha256"}
    assert (ref["codec"], ref["size_bytes"]) == ("avro", len(data))
    assert (await _upload(api, data)).json()["reference"] == ref

    fetched = await api.http.get(f"{UPLOAD}/{ref['reference_id']}", headers=CONTROL)
    assert fetched.status_code == 200
    assert fetched.content == data
    assert fetched.headers["X-Durable-Workflow-Payload-SHA256"] == ref["sha256"]
    assert fetched.headers["X-Durable-Workflow-Payload-Size"] == str(len(data))

    started = await api.control(
        "POST",
        "/api/workflows",
        json=_start_body("wf-external", {"codec": "avro", "external_payload": ref}),
    )
    assert started.status_code == 201, started.text
    described = (await api.control("GET", "/api/workflows/wf-external")).json()
    assert described["input_envelope"] == envelope


async def test_bad_uploads_and_bad_references_write_nothing(api: Api) -> None:
    """PROTOCOL.md 2.4, 10: another codec (415 `unsupported_payload_codec`), a body that is not
    what its headers say (422 `external_payload_integrity_mismatch`), above the limit (413
    `payload_too_large`), missing headers (422); a request naming an unknown (404
    `external_payload_not_found`), contradicted (422) or malformed (422 `validation_failed`)
    reference, or standing for more than the request cap with its blobs (413): each refused,
    nothing written."""
    data = dict(codec.encode(["y" * 100]))["blob"].encode()
    ref = (await _upload(api, data)).json()["reference"]
    before = await _written(api)
    limit = api.state.store.max_payload_bytes
    uploads: list[tuple[bytes, dict[str, str], int, str]] = [
        (data, {"X-Durable-Workflow-Payload-Codec": "json"}, 415, "unsupported_payload_codec"),
        (
            data,
            {"X-Durable-Workflow-Payload-Size": "3"},
            422,
            "external_payload_integrity_mismatch",
        ),
        (
            data,
            {"X-Durable-Workflow-Payload-SHA256": "0" * 64},
            422,
            "external_payload_integrity_mismatch",
        ),
        (data, {"X-Durable-Workflow-Payload-SHA256": "nope"}, 422, "validation_failed"),
        (data, {"X-Durable-Workflow-Payload-Size": str(limit + 1)}, 413, "payload_too_large"),
    ]
    for content, overrides, status, reason in uploads:
        response = await _upload(api, content, **overrides)
        assert (response.status_code, response.json()["reason"]) == (status, reason), overrides

    unknown = {**ref, "reference_id": "ep_" + "0" * 26}
    contradicted = {**ref, "size_bytes": ref["size_bytes"] + 1}
    references: list[tuple[dict[str, Any], int, str]] = [
        ({"codec": "avro", "external_payload": unknown}, 404, "external_payload_not_found"),
        (
            {"codec": "avro", "external_payload": contradicted},
            422,
            "external_payload_integrity_mismatch",
        ),
        ({"codec": "avro", "external_payload": {**ref, "extra": 1}}, 422, "validation_failed"),
        ({"codec": "avro", "external_payload": ref, "blob": "x"}, 422, "validation_failed"),
    ]
    many = [{"codec": "avro", "external_payload": {**ref, "size_bytes": limit}}] * 100
    too_many = {**_start_body("wf-bad", dict(codec.encode([]))), "memo": many}
    response = await api.control("POST", "/api/workflows", json=too_many)
    assert (response.status_code, response.json()["reason"]) == (413, "payload_too_large")
    for envelope, status, reason in references:
        response = await api.control("POST", "/api/workflows", json=_start_body("wf-bad", envelope))
        assert (response.status_code, response.json()["reason"]) == (status, reason), envelope
    missing = await api.http.get(f"{UPLOAD}/ep_{'0' * 26}", headers=CONTROL)
    assert (missing.status_code, missing.json()["reason"]) == (404, "external_payload_not_found")
    assert await _written(api) == before
