"""Issue 31: who gets into the web UI, and the workflow list's filters, counts and escaping."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.ui.conftest import OPERATOR_TOKEN, WORKER_TOKEN, Browser

CONTROL = {
    "Authorization": f"Bearer {OPERATOR_TOKEN}",
    "X-Durable-Workflow-Control-Plane-Version": "2",
}
WORLD = {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgp3b3JsZAA="}


async def start(http: httpx.AsyncClient, workflow_id: str, workflow_type: str = "greeter") -> Any:
    response = await http.post(
        "/api/workflows",
        headers=CONTROL,
        json={
            "workflow_id": workflow_id,
            "workflow_type": workflow_type,
            "task_queue": "ui-q",
            "input": WORLD,
        },
    )
    assert response.status_code == 201, response.text
    return response.json()


async def test_without_a_session_pages_send_the_browser_to_login(anonymous: Browser) -> None:
    """Issue 31: the root redirects to the UI, and the UI to its login page, keeping the target."""
    root = await anonymous.http.get("/")
    assert root.status_code == 307 and root.headers["location"] == "/ui/workflows"
    page = await anonymous.http.get("/ui/workflows?status=Running&type=a%26b")
    assert page.status_code == 303
    assert page.headers["location"] == (
        "/ui/login?next=%2Fui%2Fworkflows%3Fstatus%3DRunning%26type%3Da%2526b"
    )
    back = await anonymous.http.get(page.headers["location"])
    assert 'value="/ui/workflows?status=Running&amp;type=a%26b"' in back.text
    login = await anonymous.http.get("/ui/login")
    assert login.status_code == 200 and 'type="password"' in login.text


async def test_a_worker_token_or_a_wrong_one_does_not_log_in(anonymous: Browser) -> None:
    """Issue 31: the UI needs a viewer, operator or admin token; no cookie for anything else."""
    wrong = await anonymous.login("not-a-token")
    assert wrong.status_code == 401 and "not valid" in wrong.text
    worker = await anonymous.login(WORKER_TOKEN)
    assert worker.status_code == 401 and "for workers" in worker.text
    assert "burrow_ui" not in anonymous.http.cookies


async def test_the_session_cookie_is_http_only_strict_and_holds_no_token(
    anonymous: Browser,
) -> None:
    """Issue 31: HTTP-only, SameSite cookie session; the UI never shows or stores the token."""
    response = await anonymous.login(OPERATOR_TOKEN)
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert OPERATOR_TOKEN not in cookie
    page = await anonymous.get("/ui/workflows")
    assert OPERATOR_TOKEN not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


async def test_a_forged_cookie_is_no_session(anonymous: Browser) -> None:
    """Issue 31: the cookie is signed; an edited one sends the browser to login."""
    await anonymous.login(OPERATOR_TOKEN)
    value = anonymous.http.cookies["burrow_ui"]
    anonymous.http.cookies.clear()
    anonymous.http.cookies.set("burrow_ui", value[:-2] + "xx", path="/ui")
    page = await anonymous.http.get("/ui/workflows")
    assert page.status_code == 303


async def test_a_hostile_workflow_id_renders_as_text(operator: Browser) -> None:
    """Issue 31: ids are untrusted input: a `<script>` id is escaped, never markup."""
    hostile = "<script>alert('x')</script>"
    # The HTTP API refuses such an id; the native client and the store take any string.
    await operator.state.store.start_workflow(
        namespace="default",
        workflow_id=hostile,
        workflow_type="greeter",
        task_queue="ui-q",
        input={"args": []},
    )
    page = await operator.get("/ui/workflows")
    assert page.status_code == 200
    assert hostile not in page.text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text


async def test_the_list_filters_with_a_query_and_quick_filters_and_counts_per_status(
    viewer: Browser,
) -> None:
    """Issue 31: the list takes the query language and quick filters; counts per status."""
    await start(viewer.http, "ui-list-a", "Checkout")
    await start(viewer.http, "ui-list-b", "Refund")
    page = await viewer.get("/ui/workflows", params={"query": "WorkflowType = 'Checkout'"})
    assert page.status_code == 200
    assert "ui-list-a" in page.text and "ui-list-b" not in page.text
    assert "All <b>1</b>" in page.text and "Running <b>1</b>" in page.text
    quick = await viewer.get("/ui/workflows", params={"type": "Refund", "status": "Running"})
    assert "ui-list-b" in quick.text and "ui-list-a" not in quick.text
    none = await viewer.get("/ui/workflows", params={"status": "Completed"})
    assert "ui-list-a" not in none.text and "Completed <b>0</b>" in none.text


async def test_a_bad_query_is_shown_with_its_position_and_lists_nothing(viewer: Browser) -> None:
    """Issue 31: a query the language refuses is a 422 page naming where; nothing runs."""
    page = await viewer.get("/ui/workflows", params={"query": "WorkflowType = "})
    assert page.status_code == 422
    assert "invalid list query" in page.text and "at character" in page.text
    unknown = await viewer.get("/ui/workflows", params={"query": "NoSuchAttribute = 'x'"})
    assert unknown.status_code == 422 and "NoSuchAttribute" in unknown.text
    stale = await viewer.get("/ui/workflows", params={"after": "bm90LWEtdG9rZW4="})
    assert stale.status_code == 422 and "no longer valid" in stale.text


async def test_an_unknown_namespace_is_a_404_page(viewer: Browser) -> None:
    """Issue 31: the UI serves the API's namespaces; another is a clear 404."""
    page = await viewer.get("/ui/workflows", params={"namespace": "nowhere"})
    assert page.status_code == 404 and "not served" in page.text
