"""The token is checked before a body is read, and bodies are capped (issue 25 item 2).

A 200 MB unauthenticated POST used to be read and parsed whole before its 401 (server RSS went
from 101 MB to 1.3 GB). The request gate refuses it before the first byte of its body, and
counts an authenticated body as it streams in: 413 once it passes the cap.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from burrow.server.worker_protocol import WORKER_PROTOCOL_HEADER, WORKER_PROTOCOL_VERSION
from tests.integration.server.conftest import GREET, WORKER, Api, ApiFactory, fence

CHUNK = b"x" * 65_536
REGISTER = "/api/worker/register"


class Upload:
    """A request body streamed in chunks, counting the chunks the server pulled."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.pulled += 1
            yield CHUNK


async def test_an_unauthenticated_upload_is_refused_before_its_body_is_read(api: Api) -> None:
    """Issue 25 item 2: 401 in the error shape, and not one chunk of the body pulled."""
    upload = Upload(chunks=100)
    headers = {"Authorization": "Bearer wrong", WORKER_PROTOCOL_HEADER: "1.20"}
    refused = await api.http.post(REGISTER, content=upload, headers=headers)
    assert (refused.status_code, refused.json()["reason"]) == (401, "unauthorized")
    assert upload.pulled == 0
    assert refused.json()["protocol_version"] == WORKER_PROTOCOL_VERSION
    assert refused.headers[WORKER_PROTOCOL_HEADER] == WORKER_PROTOCOL_VERSION


async def test_a_body_past_the_cap_is_refused_with_413_as_it_streams(
    make_api: ApiFactory,
) -> None:
    """Issue 25 item 2: with no Content-Length, the count stops the body one chunk past the cap."""
    api = await make_api(max_request_bytes=4 * len(CHUNK))
    upload = Upload(chunks=100)
    refused = await api.http.post(REGISTER, content=upload, headers=WORKER)
    assert refused.status_code == 413, refused.text
    assert refused.json()["reason"] == "request_too_large"
    assert refused.json()["max_request_bytes"] == 4 * len(CHUNK)
    assert refused.headers[WORKER_PROTOCOL_HEADER] == WORKER_PROTOCOL_VERSION
    assert upload.pulled == 5


async def test_a_declared_length_past_the_cap_is_refused_before_the_body_is_read(
    make_api: ApiFactory,
) -> None:
    """Issue 25 item 2: a Content-Length over the cap is enough for the 413."""
    api = await make_api(max_request_bytes=4 * len(CHUNK))
    upload = Upload(chunks=100)
    headers = {**WORKER, "Content-Length": str(100 * len(CHUNK))}
    refused = await api.http.post(REGISTER, content=upload, headers=headers)
    assert (refused.status_code, refused.json()["reason"]) == (413, "request_too_large")
    assert upload.pulled == 0


async def test_health_stays_open_without_a_token(api: Api) -> None:
    """Issue 25 item 2: the gate lets open routes through with no Authorization at all."""
    health = await api.http.get("/api/health")
    assert (health.status_code, health.json()["status"]) == (200, "serving")


async def test_a_completion_with_several_full_size_payloads_passes_the_default_cap(
    api: Api,
) -> None:
    """Issue 25 item 2: five 2 MiB activity arguments in one completion are taken (cap 16 MiB)."""
    await api.register()
    await api.start("wf-big")
    task = await api.poll_workflow()
    blob = "A" * api.state.runtime.max_payload_bytes
    command = {**GREET, "arguments": {"codec": "avro", "blob": blob}}
    path = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", path, json=fence(task, commands=[command] * 5))
    assert done.status_code == 200, done.text[:500]
