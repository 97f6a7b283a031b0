"""Jinja2 for the web UI: autoescaped templates shipped in the package, and their filters.

Everything a page shows from a run (ids, payloads, failure messages) is untrusted: templates
autoescape (never `|safe` on such data), and JSON is pretty-printed as text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import Request
from starlette.responses import HTMLResponse, Response

from burrow.ui import session as ui_session
from burrow.ui.access import NEW_COOKIE, UiCaller
from burrow.ui.timeline import short_duration

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def moment(value: datetime | None) -> str:
    """A UTC timestamp to the second, or an em dash."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def iso(value: datetime | None) -> str:
    """An ISO 8601 UTC timestamp (for <time datetime=...>), or empty."""
    return "" if value is None else value.astimezone(UTC).isoformat()


def duration(seconds: float | None) -> str:
    """A short human duration (850 ms, 12.4 s, 3 m 05 s, 2 h 14 m, 3 d 4 h), or an em dash."""
    return "—" if seconds is None else short_duration(seconds)


def between(start: datetime | None, end: datetime | None) -> str:
    """The duration from `start` to `end` (now when open)."""
    if start is None:
        return "—"
    return duration(((end or datetime.now(UTC)) - start).total_seconds())


def pretty(value: object) -> str:
    """JSON, indented, for a <pre> (escaped by the template like any text)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def path_part(value: str) -> str:
    """A value quoted for one URL path segment."""
    return quote(value, safe="")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        moment=moment,
        iso=iso,
        duration=duration,
        pretty=pretty,
        between=between,
        path_part=path_part,
    )
    return env


ENV = _environment()

SECURITY_HEADERS = {
    "cache-control": "no-store",
    # Scripts and styles only from the package's own files: an injected <script> cannot run.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


def link(
    caller: UiCaller, path: str, base: Mapping[str, object] | None = None, **params: object
) -> str:
    """A UI URL in the caller's namespace; `base` then `params` (non-empty ones) as its query."""
    merged: dict[str, object] = {"namespace": caller.namespace, **(base or {}), **params}
    query = {k: v for k, v in merged.items() if v not in (None, "")}
    return f"{path}?{urlencode(query)}"


def render(
    request: Request,
    caller: UiCaller | None,
    name: str,
    context: Mapping[str, Any],
    *,
    status_code: int = 200,
) -> HTMLResponse:
    """Render a template with the caller's session, and set a freshly issued session cookie."""
    html = ENV.get_template(name).render(
        {
            "caller": caller,
            "csrf": None if caller is None else caller.session.csrf,
            "link": (lambda path, base=None, **kw: link(caller, path, base, **kw))
            if caller
            else None,
            "request_path": request.url.path,
            **context,
        }
    )
    response = HTMLResponse(html, status_code=status_code)
    response.headers.update(SECURITY_HEADERS)
    fresh = getattr(request.state, NEW_COOKIE, None)
    if fresh is not None:
        set_session_cookie(request, response, fresh)
    return response


def set_session_cookie(request: Request, response: Response, value: str) -> None:
    """The session cookie: HTTP-only, SameSite=Strict, Secure over HTTPS, UI paths only."""
    response.set_cookie(
        ui_session.COOKIE,
        value,
        max_age=ui_session.MAX_AGE_SECONDS,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
