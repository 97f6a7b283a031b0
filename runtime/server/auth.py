"""Bearer tokens, roles, version headers and namespaces (PROTOCOL.md 2.2, 2.3).

Roles: worker routes need `worker`; control routes `operator` or `admin`; discovery any role;
the web UI's pages any of `viewer`, `operator` and `admin`, and its actions `operator` or `admin`.
BURROW_AUTH_TOKEN grants every role; the split tokens grant one each. With no token set the
server is open (and binds only to loopback). Checks run before any handler, so a refused
request writes nothing.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from fastapi import Request

from burrow.server import worker_protocol
from burrow.server.api_errors import ApiError
from burrow.server.settings import ServerSettings


class Role(StrEnum):
    """What a token may do."""

    WORKER = "worker"
    OPERATOR = "operator"
    ADMIN = "admin"
    VIEWER = "viewer"
    """Reads the web UI's pages; changes nothing."""


ALL_ROLES = frozenset(Role)
API_ROLES = frozenset({Role.WORKER, Role.OPERATOR, Role.ADMIN})
"""The roles that may use the HTTP API beyond discovery (a viewer reads the UI only)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, in which namespace."""

    roles: frozenset[Role]
    namespace: str


OPEN_PATHS = frozenset({"/api/health"})
"""Routes any caller may use, with or without a token."""

UI_PREFIX = "/ui"
"""The web UI's routes: they check their own cookie session (burrow.ui.session), not a bearer."""


def checks_bearer(path: str) -> bool:
    """Whether the gate checks a bearer token on `path` (not the health check, not the UI)."""
    if path in OPEN_PATHS or path == "/":
        return False
    return not (path == UI_PREFIX or path.startswith(UI_PREFIX + "/"))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _sent_bytes(header_value: str) -> bytes:
    # Header values arrive decoded as latin-1: encoding back gives the bytes sent.
    try:
        return header_value.encode("latin-1")
    except UnicodeEncodeError:  # not from a header after all
        return header_value.encode("utf-8", "surrogatepass")


def roles_of(settings: ServerSettings, token: str | None) -> frozenset[Role]:
    """The roles a presented token grants (all of them on an open server)."""
    if settings.open:
        return ALL_ROLES
    if token is None:
        return frozenset()
    # compare_digest refuses non-ASCII str (a TypeError, so a 500, before issue 25): compare
    # the bytes sent with the configured token's UTF-8.
    presented = _sent_bytes(token)
    granted: set[Role] = set()
    for roles, configured in (
        (ALL_ROLES, settings.auth_token),
        (frozenset({Role.WORKER}), settings.worker_token),
        (frozenset({Role.OPERATOR}), settings.operator_token),
        (frozenset({Role.ADMIN}), settings.admin_token),
        (frozenset({Role.VIEWER}), settings.viewer_token),
    ):
        wanted = (configured or "").encode("utf-8", "surrogatepass")
        if wanted and hmac.compare_digest(presented, wanted):
            granted |= roles
    return frozenset(granted)


def authenticate(settings: ServerSettings, authorization: str | None) -> frozenset[Role]:
    """The roles an Authorization header grants; 401 when it grants none."""
    roles = roles_of(settings, bearer_token(authorization))
    if not roles:
        raise ApiError(401, "unauthorized", "missing or invalid bearer token")
    return roles


def authorize(
    request: Request, settings: ServerSettings, allowed: frozenset[Role]
) -> frozenset[Role]:
    """The caller's roles; 401 when the token is missing, wrong, or grants none of `allowed`."""
    roles = authenticate(settings, request.headers.get("authorization"))
    if not roles & allowed:
        needed = " or ".join(sorted(allowed))
        raise ApiError(401, "unauthorized", f"this route needs the {needed} role")
    return roles


def requested_namespace(request: Request, settings: ServerSettings) -> str:
    """X-Namespace, else ?namespace=, else the default, lowercase."""
    return (
        request.headers.get("x-namespace")
        or request.query_params.get("namespace")
        or settings.default_namespace
    ).lower()


def namespace_of(
    request: Request, settings: ServerSettings, served: Collection[str] | None = None
) -> str:
    """The requested namespace; 404 when it is not served.

    Served: `served` (the store's namespaces, namespace_cache.py), else the configured ones.
    """
    name = requested_namespace(request, settings)
    if name not in (settings.namespaces if served is None else served):
        raise ApiError(404, "namespace_not_found", f"namespace {name!r} not found", namespace=name)
    return name


def check_worker_version(request: Request) -> None:
    """400 unless the worker protocol header names a version we serve."""
    requested = request.headers.get(worker_protocol.WORKER_PROTOCOL_HEADER)
    reason = worker_protocol.accepts_worker_version(requested)
    if reason is not None:
        raise ApiError(
            400,
            reason,
            "Unsupported worker protocol version.",
            supported_version=worker_protocol.WORKER_PROTOCOL_VERSION,
            requested_version=requested,
            remediation=f"send {worker_protocol.WORKER_PROTOCOL_HEADER}: 1.x with x <= 20",
        )


def check_control_version(request: Request) -> None:
    """400 unless the control-plane header is exactly "2"."""
    requested = request.headers.get(worker_protocol.CONTROL_PLANE_HEADER)
    if requested is None:
        raise ApiError(
            400,
            "missing_control_plane_version",
            f"{worker_protocol.CONTROL_PLANE_HEADER} is required",
        )
    if requested.strip() != worker_protocol.CONTROL_PLANE_VERSION:
        raise ApiError(
            400,
            "unsupported_control_plane_version",
            f"unsupported control plane version {requested!r}; this server speaks 2",
            supported_version=worker_protocol.CONTROL_PLANE_VERSION,
            requested_version=requested,
        )
