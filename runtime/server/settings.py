"""Server settings: bind address, bearer tokens, namespaces and lease lengths (PROTOCOL.md 2.2)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from burrow.errors import ConfigurationError, redact_passwords
from burrow.store.engine import async_url

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
REQUEST_PAYLOADS = 8
"""Full-size payloads a request may carry unless BURROW_SERVER_MAX_REQUEST_BYTES says otherwise."""

_ENV = {
    "BURROW_SERVER_HOST": "host",
    "BURROW_SERVER_PORT": "port",
    "BURROW_AUTH_TOKEN": "auth_token",
    "BURROW_WORKER_TOKEN": "worker_token",
    "BURROW_OPERATOR_TOKEN": "operator_token",
    "BURROW_ADMIN_TOKEN": "admin_token",
    "BURROW_VIEWER_TOKEN": "viewer_token",
    "BURROW_SERVER_WORKFLOW_TASK_LEASE_SECONDS": "workflow_task_lease_seconds",
    "BURROW_SERVER_ACTIVITY_TASK_LEASE_SECONDS": "activity_task_lease_seconds",
    "BURROW_SERVER_POLL_PROBE_SECONDS": "poll_probe_seconds",
    "BURROW_SERVER_SWEEP_INTERVAL_SECONDS": "sweep_interval_seconds",
    "BURROW_SERVER_MAX_HELD_POLLS": "max_held_polls",
    "BURROW_SERVER_MAX_REQUEST_BYTES": "max_request_bytes",
    "BURROW_SERVER_UI_METRICS_INTERVAL_SECONDS": "ui_metrics_interval_seconds",
    "BURROW_DATABASE_READ_URL": "database_read_url",
}


class ServerSettings(BaseModel):
    """How `burrow server` binds and whom it lets in.

    With no token set the server runs open, and then binds only to a loopback address.
    `namespaces` are the namespaces it serves (comma-separated BURROW_SERVER_NAMESPACES); any
    other `X-Namespace` gets 404 `namespace_not_found`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    auth_token: str | None = None
    worker_token: str | None = None
    operator_token: str | None = None
    admin_token: str | None = None
    viewer_token: str | None = None
    namespaces: tuple[str, ...] = ("default",)
    default_namespace: str = "default"
    workflow_task_lease_seconds: float = Field(default=60.0, gt=0)
    activity_task_lease_seconds: float = Field(default=300.0, gt=0)
    # A held long poll re-checks Postgres this often: a lost wake costs at most this (M5).
    poll_probe_seconds: float = Field(default=0.2, gt=0, le=5)
    # Timers fire and expired leases come back through the store's repair pass, run this often.
    sweep_interval_seconds: float = Field(default=0.5, gt=0)
    # Long polls held at once; one more is refused with 429 `long_poll_capacity_exhausted`.
    max_held_polls: int = Field(default=1000, ge=1)
    # A larger request body is refused with 413 while it streams in (None: see request_cap).
    max_request_bytes: int | None = Field(default=None, ge=1)
    # The UI's charts sample backlog, oldest-ready age and sticky hit rate this often.
    ui_metrics_interval_seconds: float = Field(default=30.0, gt=0)
    database_read_url: str | None = None
    """A read replica for reads that tolerate lag (runs listed, histories of closed runs);
    never for claims, fencing or any write (server/read_replica.py)."""

    @field_validator("database_read_url")
    @classmethod
    def _check_read_url(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                async_url(value)
            except ConfigurationError as exc:
                raise ValueError(f"BURROW_DATABASE_READ_URL: {exc}") from None
        return value

    @property
    def open(self) -> bool:
        """No token is configured: every request is let in."""
        return not any(
            (
                self.auth_token,
                self.worker_token,
                self.operator_token,
                self.admin_token,
                self.viewer_token,
            )
        )

    def request_cap(self, max_payload_bytes: int) -> int:
        """The most bytes a request body may carry: `max_request_bytes`, else a default.

        The default is REQUEST_PAYLOADS payloads of `max_payload_bytes` (16 MiB with the default
        2 MiB): a workflow task's completion legitimately carries several full-size payloads
        (activity arguments, a result), each checked alone by the store, so the cap must admit
        a few of them while still bounding what one request makes the server hold.
        """
        if self.max_request_bytes is not None:
            return self.max_request_bytes
        return REQUEST_PAYLOADS * max_payload_bytes

    def check_bind(self) -> None:
        """Refuse to serve an open server beyond loopback.

        Raises:
            ConfigurationError: no token is set and the host is not a loopback address.
        """
        if self.open and not is_loopback(self.host):
            raise ConfigurationError(
                f"refusing to bind {self.host} without authentication: set BURROW_AUTH_TOKEN"
                " (or BURROW_WORKER_TOKEN / BURROW_OPERATOR_TOKEN / BURROW_ADMIN_TOKEN /"
                " BURROW_VIEWER_TOKEN), or bind"
                " 127.0.0.1"
            )

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        default_namespace: str | None = None,
    ) -> ServerSettings:
        """Settings from BURROW_SERVER_* and the token variables, then the given overrides.

        Raises:
            ConfigurationError: a variable is invalid; the message names it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, object] = {
            field: env[name] for name, field in _ENV.items() if env.get(name)
        }
        namespace = default_namespace or env.get("BURROW_NAMESPACE") or "default"
        listed = [n.strip().lower() for n in env.get("BURROW_SERVER_NAMESPACES", "").split(",")]
        values["namespaces"] = tuple(dict.fromkeys([namespace.lower(), *filter(None, listed)]))
        values["default_namespace"] = namespace.lower()
        if host is not None:
            values["host"] = host
        if port is not None:
            values["port"] = port
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigurationError(
                f"invalid server settings: {redact_passwords(str(exc))}"
            ) from exc


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
