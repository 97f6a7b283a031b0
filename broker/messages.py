"""Wake: a hint that a queue may have ready work; it never carries state to act on (C1)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, ValidationError

from burrow.broker.errors import BrokerError


class TaskKind(StrEnum):
    """Which poller a wake is for."""

    WORKFLOW = "workflow"
    ACTIVITY = "activity"
    QUERY = "query"


class WakeDisposition(StrEnum):
    """What the consumer does with a delivery once `on_wake` returns."""

    DONE = "done"
    """A claim ran (or the wake needs none): ack."""
    HAND_BACK = "hand_back"
    """No free slot here: requeue once so a consumer with capacity can claim; ack if redelivered."""


class Wake(BaseModel):
    """Queue identity plus an optional task id hint and sticky target."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    connection: str = "default"
    queue: str
    kind: TaskKind
    task_id: str | None = None
    sticky_worker_id: str | None = None
    """Route to this worker's sticky queue (S5), or to the shared queue when it is gone."""
    unroutable_owner: str | None = None
    """The sticky owner whose queue the broker found gone (it dies with its process): a worker
    hearing this may claim that owner's bound tasks at once (broker invariant 4), rather than
    after the owner's heartbeat goes stale. A hint like the rest: it only changes who claims."""

    def encode(self) -> bytes:
        """The message body (unset hints are left out)."""
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def decode(cls, body: bytes) -> Wake:
        """Parse a message body; a malformed one raises BrokerError."""
        try:
            return cls.model_validate_json(body)
        except ValidationError as exc:
            raise BrokerError(f"malformed wake message: {exc.error_count()} error(s)") from exc
