"""Who may see and do what in the web UI: the cookie session, the namespace, CSRF and roles.

Pages need any UI role (viewer, operator, admin); actions the operator or admin role, a POST
carrying the session's CSRF token, and no cross-site origin. Refusals are exceptions the UI's
handlers turn into pages (burrow.ui.pages), never JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from burrow.server.auth import ALL_ROLES, Role
from burrow.server.deps import ServerState, server_state
from burrow.ui import session as ui_session
from burrow.ui.session import UiSession

UI_ROLES = frozenset({Role.VIEWER, Role.OPERATOR, Role.ADMIN})
NEW_COOKIE = "burrow_ui_new_cookie"
"""request.state attribute: a session cookie the response must set (an open server's)."""


class LoginRequired(Exception):
    """No valid session: the browser goes to the login page, then back to `next_url`."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class UiRefused(Exception):
    """A request the UI refuses with a page: 403 (role, CSRF), 404 (unknown namespace or run)."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail


@dataclass(frozen=True, slots=True)
class UiCaller:
    """A browser with a valid session, in a served namespace."""

    session: UiSession
    namespace: str
    namespaces: tuple[str, ...]
    state: ServerState

    @property
    def can_act(self) -> bool:
        """Whether actions are offered (and accepted): the operator or admin role."""
        return self.session.can_act


def login_target(request: Request) -> str:
    """Where to return after login: this path and query (checked by `safe_next` on the way)."""
    target = request.url.path
    if request.url.query:
        target += "?" + request.url.query
    return target


def safe_next(target: str | None) -> str:
    """A post-login target inside the UI (an absolute or scheme-relative URL is refused)."""
    if not target:
        return "/ui/workflows"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/ui") or target.startswith("//"):
        return "/ui/workflows"
    return target


async def ui_caller(request: Request) -> UiCaller:
    """The session and namespace of a page request.

    An open server (no token, loopback only) needs no login: a session is issued on the spot.

    Raises:
        LoginRequired: no valid session cookie.
        UiRefused: 404 for a namespace the server does not serve.
    """
    state = server_state(request)
    found = ui_session.decode(state.settings, request.cookies.get(ui_session.COOKIE))
    if found is None or not found.roles & UI_ROLES:
        if not state.settings.open:
            raise LoginRequired(login_target(request))
        found = ui_session.new_session(ALL_ROLES)
        setattr(request.state, NEW_COOKIE, ui_session.encode(state.settings, found))
    namespace = (request.query_params.get("namespace") or state.settings.default_namespace).lower()
    await state.known.refresh_for(namespace)
    served = tuple(sorted(state.known.names)) or state.settings.namespaces
    if namespace not in served:
        raise UiRefused(404, "Namespace not found", f"namespace {namespace!r} is not served here")
    return UiCaller(session=found, namespace=namespace, namespaces=served, state=state)


def _cross_site(request: Request) -> bool:
    # SameSite=Strict already keeps the cookie off cross-site requests; this is the second lock.
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin == "null"
    return urlsplit(origin).netloc != request.headers.get("host", "")


async def ui_actor(request: Request) -> UiCaller:
    """The caller of an action: a page caller with a matching CSRF token and the operator role.

    Raises:
        UiRefused: 403 for a missing or wrong CSRF token, a cross-site origin, or a viewer.
    """
    caller = await ui_caller(request)
    form = await request.form()
    presented = request.headers.get(ui_session.CSRF_HEADER) or form.get(ui_session.CSRF_FIELD)
    if _cross_site(request) or not caller.session.csrf_matches(
        presented if isinstance(presented, str) else None
    ):
        raise UiRefused(
            403,
            "Request refused",
            "the form's security token is missing or stale: reload the page and try again",
        )
    if not caller.can_act:
        raise UiRefused(
            403, "Operator role needed", "this action needs a token with the operator role"
        )
    return caller


Caller = Annotated[UiCaller, Depends(ui_caller)]
Actor = Annotated[UiCaller, Depends(ui_actor)]
