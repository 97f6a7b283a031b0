"""Hostile page tokens and header values get a 4xx with a reason, never a 500 (issue 25 item 8).

`wrI=` (base64 of "²", a digit to str.isdigit() that int() refuses), tokens of 5,000 digits or
2**70, list tokens whose time an offset takes past year 1 or 9999,
`X-Durable-Workflow-Protocol-Version: 1.<5000 digits>` and a non-ASCII bearer token
(hmac.compare_digest refuses non-ASCII str) all used to end in a 500.
"""

from __future__ import annotations

import base64
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burrow.server.worker_protocol import CONTROL_PLANE_HEADER, WORKER_PROTOCOL_HEADER
from tests.integration.server.conftest import CONTROL, WORKER, Api


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def list_token(at: datetime, run_id: uuid.UUID) -> str:
    """A list page token as the server writes one, for any time."""
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{run_id}".encode()).decode()


RUN = uuid.UUID(int=1)
REPORTED_LIST_TOKENS = {
    "year-1-east": list_token(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), RUN),
    "year-9999-west": list_token(
        datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=23))), RUN
    ),
    "naive": list_token(datetime(2020, 1, 1), RUN),
}
REPORTED_TOKENS = {
    "superscript-two": "wrI=",
    "5000-digits": b64("9" * 5000),
    "2**70": b64(str(2**70)),
    "int4-plus-one": b64(str(2**31)),
    "negative": b64("-1"),
}


class Leased:
    """A run whose workflow task the worker holds: the history routes page through it."""

    def __init__(self, api: Api, run_id: str, task: dict[str, Any]) -> None:
        self.api = api
        self.run_id = run_id
        self.task = task

    async def worker_page(self, token: str) -> httpx.Response:
        body = {
            "lease_owner": self.task["lease_owner"],
            "workflow_task_attempt": self.task["workflow_task_attempt"],
            "next_history_page_token": token,
        }
        path = f"/api/worker/workflow-tasks/{self.task['task_id']}/history"
        return await self.api.worker("POST", path, json=body)

    async def client_page(self, token: str) -> httpx.Response:
        path = f"/api/workflows/wf-hostile/runs/{self.run_id}/history"
        return await self.api.control("GET", path, params={"next_page_token": token})

    async def list_page(self, token: str) -> httpx.Response:
        return await self.api.control("GET", "/api/workflows", params={"next_page_token": token})


@pytest.fixture
async def leased(api: Api) -> Leased:
    """Worker `w1` registered, run `wf-hostile` started and its first task leased."""
    await api.register()
    started = await api.start("wf-hostile")
    return Leased(api, started["run_id"], await api.poll_workflow())


def replacing(headers: dict[str, str], name: str, value: bytes) -> dict[bytes, bytes]:
    """`headers` with `name` set to raw bytes, as a client may send any."""
    raw = {key.encode(): text.encode() for key, text in headers.items() if key != name}
    return {**raw, name.encode(): value}


def assert_answered(response: httpx.Response) -> None:
    """2xx, or 4xx with a machine-readable reason; never a 500."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["reason"], response.text


@pytest.mark.parametrize("token", list(REPORTED_TOKENS.values()), ids=list(REPORTED_TOKENS))
async def test_a_reported_page_token_is_a_400_invalid_page_token(
    leased: Leased, token: str
) -> None:
    """Issue 25 item 8: on the worker and the control-plane history routes alike."""
    for page in (await leased.worker_page(token), await leased.client_page(token)):
        assert (page.status_code, page.json()["reason"]) == (400, "invalid_page_token")


@pytest.mark.parametrize(
    "token", list(REPORTED_LIST_TOKENS.values()), ids=list(REPORTED_LIST_TOKENS)
)
async def test_a_list_token_out_of_the_stores_range_is_a_400(api: Api, token: str) -> None:
    """Issue 25 item 8: Postgres refused the time with a 500; the offset is now taken to UTC."""
    page = await api.control("GET", "/api/workflows", params={"next_page_token": token})
    assert (page.status_code, page.json()["reason"]) == (400, "invalid_page_token")


async def test_a_protocol_version_of_5000_digits_is_unsupported_not_a_500(api: Api) -> None:
    """Issue 25 item 8: 400 `unsupported_protocol_version`, as for any version not served."""
    # Headers are read as latin-1: b"\xb2" is "²" and b"\xb9" is "¹", digits to str.isdigit().
    for version in (b"1." + b"9" * 5000, b"1.\xb2", b"\xb9.20"):
        headers = replacing(WORKER, WORKER_PROTOCOL_HEADER, version)
        response = await api.http.post(
            "/api/worker/heartbeat", json={"worker_id": "w1"}, headers=headers
        )
        assert response.status_code == 400, response.text
        assert response.json()["reason"] == "unsupported_protocol_version"


async def test_a_non_ascii_bearer_token_is_a_401(api: Api) -> None:
    """Issue 25 item 8: compared as bytes, a token the server never issued is just wrong."""
    headers = replacing(CONTROL, "Authorization", "Bearer öperator-secret".encode())
    response = await api.http.get("/api/workflows", headers=headers)
    assert (response.status_code, response.json()["reason"]) == (401, "unauthorized")


TOKENS = st.one_of(
    st.text(),
    st.text().map(b64),
    st.integers(min_value=-(2**80), max_value=2**80).map(str).map(b64),
    st.from_regex(r"[A-Za-z0-9+/=_-]{0,40}", fullmatch=True),
    st.builds(
        list_token,
        st.datetimes(
            timezones=st.none()
            | st.integers(min_value=-1439, max_value=1439).map(
                lambda minutes: timezone(timedelta(minutes=minutes))
            )
        ),
        st.uuids(),
    ),
)
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(token=TOKENS)
async def test_any_page_token_is_never_a_500(leased: Leased, token: str) -> None:
    """Issue 25 item 8 (done-when): worker history, client history and list paging."""
    assert_answered(await leased.worker_page(token))
    assert_answered(await leased.client_page(token))
    assert_answered(await leased.list_page(token))


HEADERS = [WORKER_PROTOCOL_HEADER, CONTROL_PLANE_HEADER, "X-Namespace", "Authorization"]
# Any str as UTF-8, or any bytes (read back as latin-1: "²" and "¹" among them), alone or after
# the prefix that takes a value past the first checks.
TEXT_OR_BYTES = st.text().map(lambda text: text.encode("utf-8", "surrogatepass")) | st.binary()
VALUES = st.builds(bytes.__add__, st.sampled_from([b"", b"Bearer ", b"1.", b"2"]), TEXT_OR_BYTES)


@PROPERTY
@given(name=st.sampled_from(HEADERS), value=VALUES)
async def test_any_header_value_is_never_a_500(leased: Leased, name: str, value: bytes) -> None:
    """Issue 25 item 8 (done-when): on the worker plane, the control plane and discovery."""
    api = leased.api
    worker = await api.http.post(
        "/api/worker/heartbeat", json={"worker_id": "w1"}, headers=replacing(WORKER, name, value)
    )
    assert_answered(worker)
    control_headers = replacing(CONTROL, name, value)
    assert_answered(await api.http.get("/api/workflows/wf-hostile", headers=control_headers))
    assert_answered(await api.http.get("/api/cluster/info", headers=control_headers))
