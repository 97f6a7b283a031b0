"""Worker session rows and outcomes (W1-W9): the typed shapes the session store returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from burrow.protocol.shapes import JsonDict


class SessionState(StrEnum):
    """States of a worker session, as stored (W5)."""

    ACTIVE = "active"
    CLOSED = "closed"
    """Closed by its owner: terminal for that session id."""
    EXPIRED = "expired"
    """Its lease lapsed (reacquirable), or its absolute TTL passed (terminal)."""
    FAILED = "failed"
    """Lost its lease or owner while reacquiring was not allowed: terminal."""
    ORPHANED = "orphaned"
    """Its owner's registration heartbeat went stale or missing (reacquirable)."""


class SessionFailureReason(StrEnum):
    """Why a session stopped being active without being closed (PROTOCOL.md 12)."""

    TTL_EXPIRED = "ttl_expired"
    LEASE_EXPIRED = "lease_expired"
    WORKER_HEARTBEAT_STALE = "worker_heartbeat_stale"
    WORKER_SHUTDOWN = "worker_shutdown"
    """The holder drained or deregistered and handed the session over (W5)."""


class SessionOutcome(StrEnum):
    """What an admitted session operation did (PROTOCOL.md 6.4)."""

    CREATED = "created"
    REUSED = "reused"
    REACQUIRED = "reacquired"
    HEARTBEAT_RECORDED = "heartbeat_recorded"
    CLOSED = "closed"
    ALREADY_CLOSED = "already_closed"


class SessionRefusal(StrEnum):
    """Why a worker may not take a session, or a session activity (W3, W6, PROTOCOL.md 6.4)."""

    WORKER_NOT_REGISTERED = "worker_not_registered"
    SESSION_NOT_FOUND = "session_not_found"
    SESSION_QUEUE_MISMATCH = "session_queue_mismatch"
    SESSION_REQUIREMENTS_NOT_MET = "session_requirements_not_met"
    SESSION_MISSING = "session_missing"
    WORKER_SESSION_LIMIT_EXCEEDED = "worker_session_limit_exceeded"
    SESSION_OWNED_BY_ANOTHER_WORKER = "session_owned_by_another_worker"
    SESSION_ACTIVITY_LIMIT_EXCEEDED = "session_activity_limit_exceeded"
    SESSION_CLOSED = "session_closed"
    SESSION_REACQUIRE_DISALLOWED = "session_reacquire_disallowed"
    SESSION_NOT_ACTIVE = "session_not_active"
    SESSION_OWNER_MISMATCH = "session_owner_mismatch"
    NOT_A_SESSION_TASK = "not_a_session_task"
    TASK_NOT_READY = "task_not_ready"


@dataclass(frozen=True, slots=True)
class SessionHolder:
    """The registration that holds a session's lease, as operators see it (PROTOCOL.md 12)."""

    worker_id: str
    task_queue: str | None
    status: str | None
    last_heartbeat_at: datetime | None
    is_stale: bool


@dataclass(frozen=True, slots=True)
class WorkerSessionInfo:
    """One worker session: its options, lease, owner and counts (the snapshot, W9)."""

    namespace: str
    session_id: str
    state: SessionState
    lease_owner: str | None
    connection: str
    queue: str | None
    requirements: list[str]
    lease_seconds: int
    ttl_seconds: int
    max_concurrent_activities: int
    create_if_missing: bool
    allow_reacquire_after_failure: bool
    lease_expires_at: datetime
    ttl_expires_at: datetime
    last_heartbeat_at: datetime | None
    failure_reason: SessionFailureReason | None
    close_reason: str | None
    closed_at: datetime | None
    reacquire_count: int
    created_at: datetime
    updated_at: datetime
    active_activity_count: int = 0
    holder: SessionHolder | None = None

    def to_json(self) -> JsonDict:
        """The snapshot in the worker protocol's JSON field names (PROTOCOL.md 12)."""
        holder = self.holder
        return {
            "session_id": self.session_id,
            "namespace": self.namespace,
            "connection": self.connection,
            "queue": self.queue,
            "requirements": list(self.requirements),
            "status": self.state.value,
            "lease_owner": self.lease_owner,
            "holder": None
            if holder is None
            else {
                "worker_id": holder.worker_id,
                "task_queue": holder.task_queue,
                "status": holder.status,
                "last_heartbeat_at": _iso(holder.last_heartbeat_at),
                "is_stale": holder.is_stale,
            },
            "lease_expires_at": _iso(self.lease_expires_at),
            "ttl_expires_at": _iso(self.ttl_expires_at),
            "closed_at": _iso(self.closed_at),
            "failure_reason": None if self.failure_reason is None else self.failure_reason.value,
            "close_reason": self.close_reason,
            "lease_seconds": self.lease_seconds,
            "ttl_seconds": self.ttl_seconds,
            "max_concurrent_activities": self.max_concurrent_activities,
            "create_if_missing": self.create_if_missing,
            "allow_reacquire_after_failure": self.allow_reacquire_after_failure,
            "active_activity_count": self.active_activity_count,
            "reacquire_count": self.reacquire_count,
            "last_heartbeat_at": _iso(self.last_heartbeat_at),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True, slots=True)
class SessionAdmission:
    """The answer to a session operation or a session activity's admission (PROTOCOL.md 6.4).

    Admitted: `outcome` says what happened. Refused: `reason` says why, with
    `missing_requirements` or `max_concurrent_worker_sessions` when they explain it.
    """

    admitted: bool
    outcome: SessionOutcome | None = None
    reason: SessionRefusal | None = None
    session: WorkerSessionInfo | None = None
    missing_requirements: list[str] = field(default_factory=list)
    max_concurrent_worker_sessions: int | None = None

    @classmethod
    def refused(
        cls,
        reason: SessionRefusal,
        session: WorkerSessionInfo | None = None,
        *,
        missing_requirements: list[str] | None = None,
        max_concurrent_worker_sessions: int | None = None,
    ) -> SessionAdmission:
        """A refusal with its typed reason."""
        return cls(
            admitted=False,
            reason=reason,
            session=session,
            missing_requirements=missing_requirements or [],
            max_concurrent_worker_sessions=max_concurrent_worker_sessions,
        )


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """Sessions of a namespace per state (W9, PROTOCOL.md 6.4 `metrics`)."""

    total: int = 0
    active: int = 0
    closed: int = 0
    expired: int = 0
    failed: int = 0
    orphaned: int = 0
