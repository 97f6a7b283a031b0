"""The web UI's frame: login, logout, the root redirect, static files and refusal pages."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Form, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

from burrow.server.auth import roles_of
from burrow.server.deps import server_state
from burrow.ui import session as ui_session
from burrow.ui.access import UI_ROLES, LoginRequired, UiRefused, safe_next
from burrow.ui.templating import STATIC, render, set_session_cookie

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    """The server's root is the UI."""
    return RedirectResponse("/ui/workflows", status_code=307)


@router.get("/ui")
@router.get("/ui/")
async def ui_root(request: Request) -> RedirectResponse:
    """The UI opens on the workflow list (in the namespace asked for, if any)."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"/ui/workflows{query}", status_code=307)


@router.get("/ui/login")
async def login_page(request: Request, next: str | None = None) -> Response:
    """The token form (an open server needs none: straight on)."""
    if server_state(request).settings.open:
        return RedirectResponse(safe_next(next), status_code=303)
    return render(request, None, "login.html", {"next": safe_next(next), "error": None})


@router.post("/ui/login")
async def login(
    request: Request,
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "",
) -> Response:
    """Check the token once and hold its roles in a signed cookie; the token is not kept."""
    settings = server_state(request).settings
    roles = roles_of(settings, token.strip() or None)
    if not roles & UI_ROLES:
        error = (
            "That token is for workers: the UI needs a viewer, operator or admin token."
            if roles
            else "That token is not valid."
        )
        return render(
            request, None, "login.html", {"next": safe_next(next), "error": error}, status_code=401
        )
    response = RedirectResponse(safe_next(next), status_code=303)
    value = ui_session.encode(settings, ui_session.new_session(roles & UI_ROLES))
    set_session_cookie(request, response, value)
    return response


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    """End the session (no CSRF needed: logging someone out is all a forger could do)."""
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(ui_session.COOKIE, path="/ui")
    return response


async def _login_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    if request.headers.get("hx-request"):
        # htmx follows no redirect into a whole page: tell it to reload to the login page.
        return Response(status_code=204, headers={"HX-Redirect": "/ui/login"})
    return RedirectResponse(f"/ui/login?{urlencode({'next': exc.next_url})}", status_code=303)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UiRefused)
    response: HTMLResponse = render(
        request,
        None,
        "refused.html",
        {"title": exc.title, "detail": exc.detail, "status": exc.status},
        status_code=exc.status,
    )
    return response


def install(app: FastAPI) -> None:
    """Add the UI's routes, its static files and its refusal pages to the server's app."""
    from burrow.ui import routers  # the page modules import this one's helpers

    app.include_router(router)
    for page_router in routers():
        app.include_router(page_router)
    # An editable install links the package's files; the directory is still the package's own.
    app.mount("/ui/static", StaticFiles(directory=STATIC, follow_symlink=True), name="ui-static")
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(UiRefused, _refused)
