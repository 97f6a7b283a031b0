"""Settings: frozen, read from an environment mapping on purpose (never at import).

`Settings.load()` is the one loader behind `Worker`, `Client.connect()` and the `burrow` command
line: defaults, then BURROW_* (and the mapped DW_*) variables, then explicit overrides.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from burrow.errors import ConfigurationError, redact_passwords

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/burrow"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_NAMESPACE = "default"

AMQP_URL_EXAMPLE = (
    "amqp://guest:guest@host:5672/ (BURROW_AMQP_URL or --amqp-url; a cluster's nodes"
    " comma-separated)"
)

_Section = TypeVar("_Section", bound=BaseModel)

QueueType = Literal["classic", "quorum"]
"""How shared wake queues are declared; quorum queues survive the loss of a cluster node."""


def split_amqp_urls(value: str) -> tuple[str, ...]:
    """The node URLs of a comma-separated BURROW_AMQP_URL, in order, blanks dropped."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _usable_amqp_url(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme in ("amqp", "amqps") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port above 65535 or not a number, a broken IPv6 address
        return False


MIN_POOL_SIZE = 8
MAX_POOL_SIZE = 32
SLOTS_PER_CONNECTION = 4


def database_pool_size_for(slots: int) -> int:
    """One store connection per four task slots, 8 to 32.

    A task holds a connection only for its statements, never while its code runs, so far fewer
    connections than slots are busy at once. Each new connection costs Postgres its own catalog
    caches and a plan of every statement it runs (1-4 ms each for the big ones, more under load):
    a pool of one per slot spent a fifth of Postgres's time in a short batch planning on
    connections that were idle most of the time.
    """
    return min(max(MIN_POOL_SIZE, slots // SLOTS_PER_CONNECTION), MAX_POOL_SIZE)


class WorkerSettings(BaseModel):
    """Tuning of one worker process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(default=16, ge=1)
    workflow_concurrency: int = Field(default=8, ge=1)
    lease_seconds: float = Field(default=30.0, gt=0)
    poll_interval_seconds: float = Field(default=0.05, gt=0)
    max_poll_interval_seconds: float = Field(default=0.5, gt=0)
    repair_interval_seconds: float = Field(default=1.0, gt=0)
    heartbeat_interval_seconds: float = Field(default=10.0, gt=0)
    repair: bool = True
    # S2: suspended runs this worker keeps warm; 0 turns its cache and sticky routing off.
    sticky_cache_capacity: int = Field(default=100, ge=0)
    # S2: what the warm runs may hold in memory, estimated per run (worker/sticky_cache.py).
    sticky_cache_max_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # W3: what worker session requirements are matched against (`gpu:nvidia-l4`, `zone:...`);
    # BURROW_CAPABILITIES lists them comma-separated.
    capabilities: tuple[str, ...] = ()
    # W6: active worker sessions this worker may hold at once (0: none).
    max_concurrent_worker_sessions: int = Field(default=10, ge=0)
    # M7: the partition every poller of this worker serves (BURROW_CONNECTION); a task on
    # another connection is never claimed here.
    connection: str = Field(default="default", min_length=1, max_length=255)
    # Store connections; None sizes the pool from the slots (`database_pool_size_for`).
    database_pool_size: int | None = Field(default=None, ge=1)

    def pool_size(self) -> int:
        """The store connections this worker opens at most."""
        if self.database_pool_size is not None:
            return self.database_pool_size
        return database_pool_size_for(self.concurrency + self.workflow_concurrency)

    @field_validator("capabilities", mode="before")
    @classmethod
    def _split_capabilities(cls, value: object) -> object:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            return value
        names = [item.strip() if isinstance(item, str) else item for item in items]
        if any(name == "" for name in names):
            raise ValueError("a capability must be a non-empty string, e.g. gpu:nvidia-l4")
        return tuple(dict.fromkeys(names))  # in order, once each


class StickySettings(BaseModel):
    """Sticky execution (S4, S9): whether completions bind runs to their worker, and how long.

    Turning it off changes no workflow semantics: bindings are neither recorded nor honoured,
    and every workflow task is a cold replay.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    ttl_seconds: float = Field(default=300.0, gt=0, le=3600)
    # S5c: an owner whose heartbeat is older than this is gone; its bound tasks go to anyone.
    owner_stale_seconds: float = Field(default=30.0, gt=0)


class WakeSettings(BaseModel):
    """The RabbitMQ wake path (C1, M5): hints only; Postgres polling is the backstop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    prefix: str = "burrow"
    ttl_seconds: float = Field(default=60.0, gt=0)
    repoll_interval_seconds: float = Field(default=1.0, gt=0)
    # DW_V2_MATCHING_ROLE_QUEUE_WAKE=0: the matching role owns re-poll wakes (M4c).
    worker_repoll: bool = True
    # Fault injection: publish every wake this many times (duplicates must cost only a claim).
    copies: int = Field(default=1, ge=1)
    # A client waiting on results re-checks Postgres this often while result wakes flow: what a
    # lost result wake costs at most (one query per client, however many waiters).
    result_fallback_seconds: float = Field(default=0.5, gt=0, le=60)
    # BURROW_AMQP_QUEUE_TYPE: quorum for a RabbitMQ cluster (shared wake queues outlive a node).
    queue_type: QueueType = "classic"


_WAKE_ENV = {
    "BURROW_WAKES": "enabled",
    "BURROW_AMQP_PREFIX": "prefix",
    "DW_WAKE_SIGNAL_TTL_SECONDS": "ttl_seconds",
    "BURROW_REPOLL_INTERVAL_SECONDS": "repoll_interval_seconds",
    "DW_V2_MATCHING_ROLE_QUEUE_WAKE": "worker_repoll",
    "BURROW_WAKE_COPIES": "copies",
    "BURROW_RESULT_FALLBACK_SECONDS": "result_fallback_seconds",
    "BURROW_AMQP_QUEUE_TYPE": "queue_type",
}

_STICKY_ENV = {
    "DW_V2_STICKY_EXECUTION_ENABLED": "enabled",
    "BURROW_STICKY_EXECUTION_ENABLED": "enabled",
    "DW_V2_STICKY_EXECUTION_TTL_SECONDS": "ttl_seconds",
    "BURROW_STICKY_TTL_SECONDS": "ttl_seconds",
    "BURROW_STICKY_OWNER_STALE_SECONDS": "owner_stale_seconds",
}


class Settings(BaseModel):
    """Everything a Burrow process needs to connect and run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = DEFAULT_DATABASE_URL
    amqp_url: str = DEFAULT_AMQP_URL
    namespace: str = DEFAULT_NAMESPACE
    max_payload_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    worker: WorkerSettings = WorkerSettings()
    wakes: WakeSettings = WakeSettings()
    sticky: StickySettings = StickySettings()

    @field_validator("amqp_url")
    @classmethod
    def _check_amqp_url(cls, value: str) -> str:
        # Refused at start: a broker URL the client cannot use would otherwise be retried forever,
        # or crash the worker once it has started (a port out of range: issue 25 item 10).
        urls = split_amqp_urls(value)
        if not urls:
            raise ValueError(f"must name at least one node, e.g. {AMQP_URL_EXAMPLE}")
        for position, url in enumerate(urls, start=1):
            if not _usable_amqp_url(url):
                which = f"node {position} ({redact_passwords(url)!s}) " if len(urls) > 1 else ""
                raise ValueError(
                    f"{which}must be an amqp:// or amqps:// URL with a host and, if given, a port"
                    f" from 1 to 65535, e.g. {AMQP_URL_EXAMPLE}"
                )
        return value

    @property
    def amqp_urls(self) -> tuple[str, ...]:
        """The broker nodes to connect to, in order (BURROW_AMQP_URL lists them by commas)."""
        return split_amqp_urls(self.amqp_url)

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        scheme = urllib.parse.urlsplit(value).scheme.split("+")[0]
        if scheme not in ("postgresql", "postgres"):
            raise ValueError(
                "invalid database URL: must be a postgresql:// URL, e.g."
                " postgresql://user:password@host:5432/burrow"
                " (BURROW_DATABASE_URL or --database-url)"
            )
        return value

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read BURROW_* variables from `environ` (pass os.environ from entry points)."""
        worker: dict[str, str] = {}
        for key in WorkerSettings.model_fields:
            value = environ.get(f"BURROW_{key.upper()}")
            if value:  # an empty variable means "unset", as for the top-level keys
                worker[key] = value
        wakes = {field: environ[name] for name, field in _WAKE_ENV.items() if environ.get(name)}
        # The BURROW_ name is read last, so it wins over the DW_V2_ one.
        sticky = {field: environ[name] for name, field in _STICKY_ENV.items() if environ.get(name)}
        top: dict[str, object] = {
            "worker": WorkerSettings.model_validate(worker),
            "wakes": WakeSettings.model_validate(wakes),
            "sticky": StickySettings.model_validate(sticky),
        }
        for key in ("database_url", "amqp_url", "namespace", "max_payload_bytes"):
            value = environ.get(f"BURROW_{key.upper()}")
            if value:
                top[key] = value
        return cls.model_validate(top)

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        database_url: str | None = None,
        amqp_url: str | None = None,
        namespace: str | None = None,
        max_payload_bytes: int | None = None,
        worker: Mapping[str, object] | None = None,
        wakes: Mapping[str, object] | None = None,
        sticky: Mapping[str, object] | None = None,
    ) -> Settings:
        """Settings from the environment, then from the overrides that were given.

        None means "not given" for every override (and for each field of `worker` and `wakes`),
        so command-line flags that were left out can be passed through as they are.

        Args:
            environ: The variables to read (default: `os.environ`, read now, not at import).
            database_url: Overrides BURROW_DATABASE_URL.
            amqp_url: Overrides BURROW_AMQP_URL.
            namespace: Overrides BURROW_NAMESPACE.
            max_payload_bytes: Overrides BURROW_MAX_PAYLOAD_BYTES.
            worker: WorkerSettings fields; each overrides its BURROW_<FIELD> variable.
            wakes: WakeSettings fields; each overrides its variable (BURROW_WAKES, ...).
            sticky: StickySettings fields; each overrides its variable
                (BURROW_STICKY_EXECUTION_ENABLED, BURROW_STICKY_TTL_SECONDS, ...).

        Returns:
            The validated settings.

        Raises:
            ConfigurationError: A variable or override is invalid; the message names each field.
        """
        top = {
            "database_url": database_url,
            "amqp_url": amqp_url,
            "namespace": namespace,
            "max_payload_bytes": max_payload_bytes,
        }
        try:
            base = cls.from_env(os.environ if environ is None else environ)
            return cls.model_validate(
                {
                    **base.model_dump(exclude={"worker", "wakes", "sticky"}),
                    **_given(top),
                    "worker": _override(base.worker, worker),
                    "wakes": _override(base.wakes, wakes),
                    "sticky": _override(base.sticky, sticky),
                }
            )
        except ValidationError as exc:
            raise ConfigurationError(f"invalid settings: {_problems(exc)}") from exc


def _given(values: Mapping[str, object] | None) -> dict[str, object]:
    return {key: value for key, value in (values or {}).items() if value is not None}


def _override(section: _Section, values: Mapping[str, object] | None) -> _Section:
    # Validated on its own, so an error names the field as its variable does ("concurrency").
    return type(section).model_validate({**section.model_dump(), **_given(values)})


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {redact_passwords(e['input'])!r})"
        for e in exc.errors()
    )
