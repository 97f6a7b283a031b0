"""The web UI on the in-process app (httpx, lifespan included): sessions, CSRF and pages."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from burrow.server.deps import ServerState

OPERATOR_TOKEN = "operator-secret"
VIEWER_TOKEN = "viewer-secret"
WORKER_TOKEN = "worker-secret"
ADMIN_TOKEN = "admin-secret"
_CSRF = re.compile(r'data-csrf="([^"]+)"')


class Browser:
    """An httpx client on the app that keeps cookies like a browser, and the server's state."""

    def __init__(self, http: httpx.AsyncClient, state: ServerState) -> None:
        self.http = http
        self.state = state
        self.csrf: str | None = None

    async def login(self, token: str) -> httpx.Response:
        """Log in with `token`; remembers the page's CSRF token for `post`."""
        response = await self.http.post("/ui/login", data={"token": token, "next": "/ui/workflows"})
        if response.status_code == 303:
            await self.get("/ui/workflows")
        return response

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        """A page; the CSRF token it carries is kept."""
        response = await self.http.get(path, **kw)
        found = _CSRF.search(response.text)
        if found:
            self.csrf = found.group(1)
        return response

    async def post(
        self, path: str, data: dict[str, Any] | None = None, **kw: Any
    ) -> httpx.Response:
        """A form post with the session's CSRF token (pass csrf=... in `data` to override)."""
        body = {"csrf": self.csrf or "", **(data or {})}
        return await self.http.post(path, data=body, **kw)


@pytest.fixture
async def ui_app(database_url: str) -> AsyncIterator[tuple[Any, ServerState]]:
    """The app with split tokens (worker, operator, admin, viewer); its lifespan entered."""
    server = ServerSettings(
        worker_token=WORKER_TOKEN,
        operator_token=OPERATOR_TOKEN,
        admin_token=ADMIN_TOKEN,
        viewer_token=VIEWER_TOKEN,
        sweep_interval_seconds=60.0,
    )
    app = create_app(server, Settings.load(database_url=database_url))
    async with app.router.lifespan_context(app):
        yield app, app.state.burrow


def _browser(app: Any, state: ServerState) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@contextlib.asynccontextmanager
async def _logged_in(ui_app: tuple[Any, ServerState], token: str) -> AsyncIterator[Browser]:
    app, state = ui_app
    async with _browser(app, state) as http:
        browser = Browser(http, state)
        assert (await browser.login(token)).status_code == 303
        yield browser


@pytest.fixture
async def operator(ui_app: tuple[Any, ServerState]) -> AsyncIterator[Browser]:
    """A browser logged in with the operator token."""
    async with _logged_in(ui_app, OPERATOR_TOKEN) as browser:
        yield browser


@pytest.fixture
async def viewer(ui_app: tuple[Any, ServerState]) -> AsyncIterator[Browser]:
    """A browser logged in with the viewer token (reads, acts on nothing)."""
    async with _logged_in(ui_app, VIEWER_TOKEN) as browser:
        yield browser


@pytest.fixture
async def anonymous(ui_app: tuple[Any, ServerState]) -> AsyncIterator[Browser]:
    """A browser with no session."""
    app, state = ui_app
    async with _browser(app, state) as http:
        yield Browser(http, state)
