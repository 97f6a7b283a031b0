"""Paging the control plane's workflow list (PROTOCOL.md 17)."""

from __future__ import annotations

from tests.integration.server.conftest import Api


async def test_list_pages_through_every_run_once(api: Api) -> None:
    """PROTOCOL 17: `page_size` and `next_page_token` walk all runs, newest first, each once;
    filters apply before paging."""
    ids = [f"wf-{n}" for n in range(5)]
    for workflow_id in ids:
        await api.start(workflow_id)
    await api.start("other-1", workflow_type="other")
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        params = {"workflow_type": "greeter", "page_size": "2"}
        if token is not None:
            params["next_page_token"] = token
        response = await api.control("GET", "/api/workflows", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        assert len(body["workflows"]) <= 2
        seen += [w["workflow_id"] for w in body["workflows"]]
        pages += 1
        token = body["next_page_token"]
        if token is None:
            break
    assert seen == list(reversed(ids))
    assert pages == 3
    running = await api.control("GET", "/api/workflows", params={"status": "running"})
    assert len(running.json()["workflows"]) == 6
    assert running.json()["next_page_token"] is None


async def test_list_refuses_a_bad_token_or_status(api: Api) -> None:
    """PROTOCOL 2.4: a malformed token is 400 `invalid_page_token`; an unknown status 422."""
    bad = await api.control("GET", "/api/workflows", params={"next_page_token": "not-a-token"})
    assert (bad.status_code, bad.json()["reason"]) == (400, "invalid_page_token")
    status = await api.control("GET", "/api/workflows", params={"status": "sleeping"})
    assert (status.status_code, status.json()["reason"]) == (422, "validation_failed")
