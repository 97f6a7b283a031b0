"""The web UI's cookie session: who logged in, with which roles, and the CSRF secret.

A token is presented once, at login, and never stored: the cookie holds the roles it granted
and a random CSRF secret, signed (itsdangerous) with a key derived from the configured tokens,
so every replica of the server reads it, and rotating a token ends every session it signed.
An open server (no token, loopback only) has a key of its own per process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

from burrow.server.auth import Role
from burrow.server.settings import ServerSettings

COOKIE = "burrow_ui"
MAX_AGE_SECONDS = 12 * 3600
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_SALT = "burrow-ui-session"
_PROCESS_KEY = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class UiSession:
    """A logged-in browser: the roles its token granted and its CSRF secret."""

    roles: frozenset[Role]
    csrf: str

    @property
    def can_act(self) -> bool:
        """Whether it may signal, cancel, terminate, pause... (the operator role)."""
        return bool(self.roles & {Role.OPERATOR, Role.ADMIN})

    def csrf_matches(self, presented: str | None) -> bool:
        """Whether a form's or header's CSRF token is this session's."""
        return presented is not None and hmac.compare_digest(presented.encode(), self.csrf.encode())


def _key(settings: ServerSettings) -> bytes:
    if settings.open:
        return _PROCESS_KEY
    digest = hashlib.sha256(b"burrow-ui\0")
    for token in (
        settings.auth_token,
        settings.worker_token,
        settings.operator_token,
        settings.admin_token,
        settings.viewer_token,
    ):
        digest.update((token or "").encode("utf-8", "surrogatepass") + b"\0")
    return digest.digest()


def _serializer(settings: ServerSettings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(_key(settings), salt=_SALT)


def new_session(roles: frozenset[Role]) -> UiSession:
    """A session for these roles with a fresh CSRF secret."""
    return UiSession(roles=roles, csrf=secrets.token_urlsafe(24))


def encode(settings: ServerSettings, session: UiSession) -> str:
    """The signed cookie value of a session."""
    return _serializer(settings).dumps({"roles": sorted(session.roles), "csrf": session.csrf})


def decode(settings: ServerSettings, value: str | None) -> UiSession | None:
    """The session a cookie holds; None when absent, forged, expired or of old tokens."""
    if not value:
        return None
    try:
        data = _serializer(settings).loads(value, max_age=MAX_AGE_SECONDS)
    except BadSignature:
        return None
    if not isinstance(data, dict):
        return None
    roles, csrf = data.get("roles"), data.get("csrf")
    if not isinstance(roles, list) or not isinstance(csrf, str):
        return None
    known = {r.value for r in Role}
    granted = frozenset(Role(r) for r in roles if r in known)
    return UiSession(roles=granted, csrf=csrf) if granted else None
