"""The gate every request passes before routing (PROTOCOL.md 2.2-2.4).

FastAPI reads and parses a request's body before it resolves the dependencies that check the
token, so an unauthenticated 200 MB upload used to be buffered whole before its 401. This pure
ASGI layer (a `BaseHTTPMiddleware` adds a task and a stream to every request) runs first:

- a request whose token grants no role gets 401 before a byte of its body is read
  (`auth.OPEN_PATHS` stay open, the UI checks its own session; the role a route needs is still
  checked by the route);
- the body is counted as it streams in: 413 `request_too_large` as soon as Content-Length or
  the bytes read pass the cap, so an oversized body is never held whole;
- the arrival time is stamped on the scope: a long poll's deadline runs from it (`longpoll`);
- every response carries its plane's version header (PROTOCOL.md 2.3).
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from burrow.server import auth, worker_protocol
from burrow.server.api_errors import ApiError, response_for
from burrow.server.settings import ServerSettings

ARRIVED_AT = "burrow.arrived_at"
"""Scope key: the event loop's time when the request reached the app."""

# More digits than this is more than any cap, and int() of 5,000 digits raises.
_MAX_LENGTH_DIGITS = 18


class BodyTooLarge(Exception):
    """The request body passed the cap (its 413 is sent by then)."""


def too_large(cap: int) -> ApiError:
    """The 413 of a request body over `cap` bytes."""
    return ApiError(
        413,
        "request_too_large",
        f"the request body is over {cap} bytes (BURROW_SERVER_MAX_REQUEST_BYTES)",
        max_request_bytes=cap,
    )


def declares_more_than(content_length: str | None, cap: int) -> bool:
    """Whether a Content-Length header announces more than `cap` bytes.

    A malformed value announces nothing: the body is still counted as it arrives.
    """
    digits = (content_length or "").strip()
    if not (digits.isascii() and digits.isdigit()):
        return False
    return len(digits) > _MAX_LENGTH_DIGITS or int(digits) > cap


class RequestGate:
    """Pure ASGI middleware: the token before the body, a body cap, version headers."""

    def __init__(self, app: ASGIApp, *, settings: ServerSettings, max_request_bytes: int) -> None:
        self.app = app
        self.settings = settings
        self.cap = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request at the gate, or pass it on with its body metered."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[ARRIVED_AT] = asyncio.get_running_loop().time()
        path: str = scope["path"]
        send = _with_version_header(send, path)
        headers = Headers(scope=scope)
        try:
            if auth.checks_bearer(path):
                auth.authenticate(self.settings, headers.get("authorization"))
            if declares_more_than(headers.get("content-length"), self.cap):
                raise too_large(self.cap)
        except ApiError as refused:
            await response_for(path, refused)(scope, receive, send)
            return
        metered = _MeteredBody(scope, self.cap, receive, send)
        try:
            await self.app(scope, metered.receive, metered.send)
        except BodyTooLarge:
            if not metered.refused:
                raise


class _MeteredBody:
    """One request's receive and send: the body counted, 413 once it passes the cap."""

    def __init__(self, scope: Scope, cap: int, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.cap = cap
        self._receive = receive
        self._send = send
        self.received = 0
        self.started = False
        self.refused = False

    async def receive(self) -> Message:
        """The next message; BodyTooLarge once the body passes the cap (after the 413)."""
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.cap:
                if not self.started and not self.refused:
                    self.refused = True
                    refusal = response_for(self.scope["path"], too_large(self.cap))
                    await refusal(self.scope, self._receive, self._send)
                raise BodyTooLarge
        return message

    async def send(self, message: Message) -> None:
        """Pass a message on, unless the 413 went out: then what the app says is dropped."""
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _with_version_header(send: Send, path: str) -> Send:
    name, value = worker_protocol.version_header(path)

    async def send_with_header(message: Message) -> None:
        if message["type"] == "http.response.start":
            MutableHeaders(scope=message)[name] = value
        await send(message)

    return send_with_header
