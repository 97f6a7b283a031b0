"""Frozen row types and statuses shared by the store and its callers."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# The record type lives with the event models it carries; re-exported for store callers.
from burrow.replay.events import HistoryEvent as HistoryEvent

JsonDict = dict[str, Any]


class TaskState(StrEnum):
    """States of workflow, activity and query tasks, as stored."""

    READY = "ready"
    LEASED = "leased"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class RunStatus(StrEnum):
    """Run statuses, as stored."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TERMINATED = "terminated"
    CONTINUED_AS_NEW = "continued_as_new"


class TimerState(StrEnum):
    """States of a durable timer, as stored."""

    PENDING = "pending"
    FIRED = "fired"
    CANCELLED = "cancelled"


class WorkerState(StrEnum):
    """States of a worker registration, as stored."""

    ACTIVE = "active"
    DRAINING = "draining"
    """Finishing its current tasks, taking no new ones; its sticky bindings are released (S8)."""
    STOPPED = "stopped"


class StickyCacheReport(BaseModel):
    """A worker's sticky cache figures, as its heartbeat reports them (S10) and stored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool
    capacity: int = Field(ge=0)
    size: int = Field(default=0, ge=0)
    hit_count: int = Field(default=0, ge=0)
    miss_count: int = Field(default=0, ge=0)
    forced_cold_replay_count: int = Field(default=0, ge=0)
    eviction_count: int = Field(default=0, ge=0)
    approximate_bytes: int = Field(default=0, ge=0)
    max_bytes: int = Field(default=0, ge=0)


class ReplayMode(StrEnum):
    """How a workflow task was expected to replay when it was claimed (S7)."""

    STICKY_HIT_EXPECTED = "sticky_hit_expected"
    """Its sticky owner claimed it before the binding expired."""
    COLD_REPLAY = "cold_replay"
    """No binding applied."""
    FORCED_COLD_REPLAY = "forced_cold_replay"
    """A binding existed, but another worker (or the owner, too late) claimed it."""


@dataclass(frozen=True, slots=True)
class StickyDiagnostics:
    """A claimed workflow task's sticky binding and replay mode (S4, S7, S10 poll fields)."""

    worker_id: str | None = None
    until: datetime | None = None
    replay_mode: ReplayMode = ReplayMode.COLD_REPLAY


@dataclass(frozen=True, slots=True)
class Lease:
    """What a claim hands out and every completion must name (fencing, store invariant 2)."""

    task_id: str
    run_id: str
    lease_token: str
    lease_owner: str
    attempt: int
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The describable state of one run."""

    run_id: str
    namespace: str
    workflow_id: str
    workflow_type: str
    task_queue: str
    connection: str
    build_id: str | None
    status: RunStatus
    input: JsonDict
    result: JsonDict | None
    failure: JsonDict | None
    last_event_seq: int
    cancel_requested: bool
    continued_to_run_id: str | None
    created_at: datetime
    closed_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunRow(RunInfo):
    """A `runs` row as the store reads it: the describable run plus its step bookkeeping."""

    last_step_seq: int
    continued_from_run_id: str | None

    def info(self) -> RunInfo:
        """The run as callers see it (without the store's bookkeeping)."""
        return RunInfo(**{f.name: getattr(self, f.name) for f in fields(RunInfo)})


@dataclass(frozen=True, slots=True)
class ActivityAttemptRow:
    """An open activity attempt as read for its retry and timeout rules, with the database's now.

    `attempt` is the attempt number; `retry_policy` is the DW retry policy shape.
    """

    task_id: str
    run_id: str
    namespace: str
    connection: str
    queue: str
    state: TaskState
    step_seq: int
    activity_type: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt: int
    retry_policy: JsonDict
    cancel_requested: bool
    available_at: datetime
    started_at: datetime | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    schedule_to_start_seconds: float | None
    start_to_close_seconds: float | None
    heartbeat_seconds: float | None
    schedule_to_close_deadline: datetime | None
    now: datetime


@dataclass(frozen=True, slots=True)
class ClaimedWorkflowTask:
    """A leased workflow task plus the run's history at claim time.

    `history` is the whole history, or, when `history_after` > 0, only the events after that
    sequence (the claimer holds the run warm up to it).
    """

    lease: Lease
    run: RunInfo
    history: list[HistoryEvent]
    attempt: int
    sticky: StickyDiagnostics = field(default_factory=StickyDiagnostics)
    history_after: int = 0
    history_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ClaimedActivityTask:
    """A leased activity attempt."""

    lease: Lease
    run_id: str
    workflow_id: str
    namespace: str
    queue: str
    step_seq: int
    activity_type: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt_number: int
    arguments: JsonDict
    heartbeat_details: JsonDict | None
    heartbeat_seconds: float | None
    start_to_close_seconds: float | None
    scheduled_at: datetime


@dataclass(frozen=True, slots=True)
class ClaimedQueryTask:
    """A leased query task with the run's history to replay it against."""

    lease: Lease
    run: RunInfo
    history: list[HistoryEvent]
    query_name: str
    arguments: JsonDict


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The store's answer to an activity heartbeat."""

    cancel_requested: bool
    lease_expires_at: datetime


@dataclass(frozen=True, slots=True)
class PendingWorkflowTask:
    """Diagnostics of a run's open workflow task."""

    task_id: str
    state: TaskState
    attempt: int
    lease_owner: str | None
    available_at: datetime
    last_failure: JsonDict | None


@dataclass(frozen=True, slots=True)
class PendingActivity:
    """Diagnostics of an open activity execution."""

    step_seq: int
    activity_type: str
    activity_execution_id: str
    state: TaskState
    attempt_number: int
    lease_owner: str | None
    last_failure: JsonDict | None


@dataclass(frozen=True, slots=True)
class RunDescription:
    """describe(): a run plus its open tasks, sticky binding and any compatibility gap.

    `sticky_worker_id` and `sticky_until` are the run's binding as stored, expired or not (S4);
    `sticky_replay_mode` and `sticky_claimed_at` come from its latest workflow task, None until
    that task is claimed (S7). `skipped_signals` counts signals the run recorded but never
    applied: no handler, or arguments that do not fit it (issue 13). `local_activities` counts
    the local activity executions it recorded (A3): they never have an activity task, so
    `activities` never lists them.
    """

    run: RunInfo
    workflow_task: PendingWorkflowTask | None
    activities: list[PendingActivity] = field(default_factory=list)
    compatibility_gap: str | None = None
    sticky_worker_id: str | None = None
    sticky_until: datetime | None = None
    sticky_replay_mode: ReplayMode | None = None
    sticky_claimed_at: datetime | None = None
    skipped_signals: int = 0
    local_activities: int = 0


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one repair pass did."""

    expired_workflow_leases: int = 0
    timers_fired: int = 0
    activity_timeouts: int = 0
    next_timer_at: datetime | None = None
    republished: int = 0
    released_bindings: int = 0

    @property
    def changed(self) -> int:
        """How many rows the pass changed."""
        return (
            self.expired_workflow_leases
            + self.timers_fired
            + self.activity_timeouts
            + self.released_bindings
        )


class UpdateState(StrEnum):
    """States of a workflow update, as stored."""

    ACCEPTED = "accepted"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class UpdateInfo:
    """An update's outcome so far: its result or failure record once it closed."""

    run_id: str
    update_id: str
    update_name: str
    state: UpdateState
    result: JsonDict | None
    failure: JsonDict | None


@dataclass(frozen=True, slots=True)
class QueryTaskInfo:
    """A query task's answer so far: its result or failure record once a worker answered."""

    task_id: str
    run_id: str
    query_name: str
    state: TaskState
    result: JsonDict | None
    failure: JsonDict | None
