"""Settings: frozen, read from an environment mapping on purpose (never at import)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/burrow"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_NAMESPACE = "default"


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


_WAKE_ENV = {
    "BURROW_WAKES": "enabled",
    "BURROW_AMQP_PREFIX": "prefix",
    "DW_WAKE_SIGNAL_TTL_SECONDS": "ttl_seconds",
    "BURROW_REPOLL_INTERVAL_SECONDS": "repoll_interval_seconds",
    "DW_V2_MATCHING_ROLE_QUEUE_WAKE": "worker_repoll",
    "BURROW_WAKE_COPIES": "copies",
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

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read BURROW_* variables from `environ` (pass os.environ from entry points)."""
        worker: dict[str, str] = {}
        for key in WorkerSettings.model_fields:
            value = environ.get(f"BURROW_{key.upper()}")
            if value:  # an empty variable means "unset", as for the top-level keys
                worker[key] = value
        wakes = {field: environ[name] for name, field in _WAKE_ENV.items() if environ.get(name)}
        top: dict[str, object] = {
            "worker": WorkerSettings.model_validate(worker),
            "wakes": WakeSettings.model_validate(wakes),
        }
        for key in ("database_url", "amqp_url", "namespace", "max_payload_bytes"):
            value = environ.get(f"BURROW_{key.upper()}")
            if value:
                top[key] = value
        return cls.model_validate(top)
