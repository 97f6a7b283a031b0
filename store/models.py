"""Frozen row types and statuses shared by the store and its callers."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

# The record type lives with the event models it carries; re-exported for store callers.
from burrow.protocol.events import HistoryEvent as HistoryEvent
from burrow.protocol.shapes import JsonDict as JsonDict
from burrow.store.session_models import (
    SessionAdmission as SessionAdmission,
)
from burrow.store.session_models import (
    SessionCounts as SessionCounts,
)
from burrow.store.session_models import (
    SessionFailureReason as SessionFailureReason,
)
from burrow.store.session_models import (
    SessionHolder as SessionHolder,
)
from burrow.store.session_models import (
    SessionOutcome as SessionOutcome,
)
from burrow.store.session_models import (
    SessionRefusal as SessionRefusal,
)
from burrow.store.session_models import (
    SessionState as SessionState,
)
from burrow.store.session_models import (
    WorkerSessionInfo as WorkerSessionInfo,
)


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
    TIMED_OUT = "timed_out"


class IdReusePolicy(StrEnum):
    """What a start does when its workflow id already has runs in the namespace.

    Every start path applies it in the statement that inserts the run, so of two concurrent
    starts of one id at most one creates a run. The native client and CLI default to
    `ALLOW_DUPLICATE`; `burrow server` to `REJECT_DUPLICATE` (`duplicate_policy: fail`), as the
    Durable Workflow server does.
    """

    ALLOW_DUPLICATE = "allow-duplicate"
    """A new run unless one of the id is running (that start raises WorkflowAlreadyStartedError)."""
    REJECT_DUPLICATE = "reject-duplicate"
    """A new run only for an id that never had one: any run, running or closed, refuses it."""
    USE_EXISTING = "use-existing"
    """As `REJECT_DUPLICATE`, except that a running run of the id is returned instead of refused."""


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
class ClaimFence:
    """A lease named without its token, as the server's callers name it (PROTOCOL.md 5.6, 6.2).

    The task in `namespace`, leased to `lease_owner` at `attempt` (workflow and query tasks) or
    as `activity_attempt_id` (activity attempts), and not expired. With `run_id`, the task must
    be of that run too.
    """

    task_id: str
    namespace: str
    lease_owner: str
    attempt: int | None = None
    activity_attempt_id: str | None = None
    run_id: str | None = None


Fence = Lease | ClaimFence
"""What a fenced store call takes: the worker's lease (its token), or a `ClaimFence`."""


@dataclass(frozen=True, slots=True)
class FencedTask:
    """The task a fenced call changed: what the caller logs about it."""

    task_id: str
    run_id: str
    namespace: str
    queue: str


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
    workflow_definition_fingerprint: str | None = field(default=None, kw_only=True)
    """S8: the fingerprint of the workflow definition the run was started against, if known."""
    parent_workflow_id: str | None = field(default=None, kw_only=True)
    """The workflow that started this run as its child, if one did."""
    parent_run_id: str | None = field(default=None, kw_only=True)
    execution_deadline_at: datetime | None = field(default=None, kw_only=True)
    """When the whole chain of runs times out (execution timeout), if it has one."""
    run_deadline_at: datetime | None = field(default=None, kw_only=True)
    """When this run times out (run timeout), if it has one."""
    retry_attempt: int = field(default=1, kw_only=True)
    """1 for a first run; n for the (n-1)th retry of a failed run (workflow retry policy)."""
    retry_of_run_id: str | None = field(default=None, kw_only=True)
    execution_timeout_seconds: float | None = field(default=None, kw_only=True)
    run_timeout_seconds: float | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class ChildInfo:
    """A child workflow a run started: its step, ids, policies and where it stands."""

    parent_run_id: str
    step: int
    workflow_id: str
    first_run_id: str | None
    workflow_type: str
    parent_close_policy: str
    cancellation_policy: str
    state: str
    """`running` until the child's last run closes, then `closed` (`closed_status` says how)."""
    closed_status: str | None
    policy_state: str
    """`none`; `pending` once the parent closed and its close policy waits; then `applied`."""


@dataclass(frozen=True, slots=True)
class RunRow(RunInfo):
    """A `runs` row as the store reads it: the describable run plus its step bookkeeping."""

    last_step_seq: int
    continued_from_run_id: str | None
    notify_queue: str | None = None
    """The broker queue of the client that started the run (hears its changes unbound)."""
    parent_step_seq: int | None = field(default=None, kw_only=True)
    has_children: bool = field(default=False, kw_only=True)
    retry_policy: JsonDict | None = field(default=None, kw_only=True)
    """The workflow retry policy (the DW retry shape), if failed runs are retried."""

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
    session_id: str | None = None
    """The worker session the attempt runs in (W4), if any."""


@dataclass(frozen=True, slots=True)
class RunPosition:
    """Where a run stood once its workflow task was claimed: what the completion builds on.

    While the lease holds, only that task's completion moves the run's history, so a completion
    that names this position can check and write in one statement instead of reading the run
    first. `claimed_at` is the database's clock at the claim and `claimed_monotonic` the
    claimer's `time.monotonic()` then: together they give the database's time later on.
    """

    run: RunRow
    """The run as claimed; `last_event_seq` counts the events the claim moved in."""
    claimed_at: datetime
    claimed_monotonic: float


@dataclass(frozen=True, slots=True)
class ClaimedWorkflowTask:
    """A leased workflow task plus the run's history at claim time.

    `history` is the whole history, or, when `history_after` > 0, only the events after that
    sequence (the claimer holds the run warm up to it). When `history_through` is set, it is
    only the first page of those: the rest, up to that sequence, is read with
    `Store.history_pages` (a claimer that asked for the first page only replays page by page).
    """

    lease: Lease
    run: RunInfo
    history: list[HistoryEvent]
    attempt: int
    sticky: StickyDiagnostics = field(default_factory=StickyDiagnostics)
    history_after: int = 0
    history_bytes: int = 0
    position: RunPosition | None = None
    """For the completion (`Store.complete_workflow_task(position=...)`)."""
    history_through: int | None = None
    """The sequence the claim's history ends at when `history` holds only its first page."""


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
    worker_session: WorkerSessionInfo | None = None
    """The session the attempt was admitted to (W6), as it stood after admission."""
    schedule_to_close_deadline: datetime | None = None
    """When the whole execution times out (database clock), if it has that timeout."""
    connection: str = "default"
    """The partition the task was queued on (M7)."""


@dataclass(frozen=True, slots=True)
class ClaimedQueryTask:
    """A leased query task with the run's history to replay it against."""

    lease: Lease
    run: RunInfo
    history: list[HistoryEvent]
    query_name: str
    arguments: JsonDict
    task_kind: str = "query"
    admitted_at: datetime | None = None
    """When the query was submitted; `deadline_at`: when its caller stops waiting."""
    deadline_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueryTaskStatus:
    """A live query claim as its holder observes it (nothing renewed); times are the store's."""

    query_task_id: str
    attempt: int
    lease_owner: str
    lease_expires_at: datetime
    admitted_at: datetime
    deadline_at: datetime
    server_time: datetime


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    """The store's answer to an activity heartbeat."""

    cancel_requested: bool
    lease_expires_at: datetime
    can_continue: bool = True
    """False when the attempt's worker session could not be renewed (W1): stop, report nothing."""
    reason: str | None = None
    worker_session: WorkerSessionInfo | None = None
    task: FencedTask | None = None
    """The task whose lease was renewed (what the caller logs)."""
    last_heartbeat_at: datetime | None = None
    """When the store recorded this heartbeat (its clock)."""


@dataclass(frozen=True, slots=True)
class LeaseRenewed:
    """A live activity attempt's renewed lease, with the identity it was claimed under.

    No progress was recorded: `last_heartbeat_at` and `heartbeat_deadline_at` are the last
    heartbeat's, unchanged. Times are the store's clock (`server_time` is the renewal's).
    """

    task: FencedTask
    workflow_id: str
    run_id: str
    activity_execution_id: str
    activity_attempt_id: str
    attempt_number: int
    lease_owner: str
    cancel_requested: bool
    server_time: datetime
    lease_expires_at: datetime
    last_heartbeat_at: datetime | None
    heartbeat_deadline_at: datetime | None


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
    children: list[ChildInfo] = field(default_factory=list)
    """The child workflows the run started, oldest first."""
    memo: JsonDict = field(default_factory=dict)
    search_attributes: JsonDict = field(default_factory=dict)
    """The run's custom search attributes (issue 30); datetimes as RFC 3339 text."""


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one repair pass did."""

    expired_workflow_leases: int = 0
    timers_fired: int = 0
    activity_timeouts: int = 0
    next_timer_at: datetime | None = None
    republished: int = 0
    released_bindings: int = 0
    ended_sessions: int = 0
    """Worker sessions that expired, were orphaned or failed in this pass (W5)."""
    stranded_session_activities: int = 0
    """Waiting attempts failed because their session ended for good (W5)."""
    close_policies_applied: int = 0
    """Children terminated or asked to cancel because their parent closed."""
    runs_timed_out: int = 0
    """Runs closed (or retried) past their run or execution deadline."""
    cleanups_cut_short: int = 0
    """Runs closed as cancelled past their cooperative cancellation's cleanup deadline."""
    schedule_fires: int = 0
    """Schedule fire times handled: started, buffered, skipped or missed (issue 30)."""
    isolated: int = 0
    """Rows whose repair raised: rolled back, logged, marked and skipped (store/isolation.py)."""
    skipped: bool = False
    """Another sweeper held the pass (one at a time per database): this one did nothing."""

    @property
    def changed(self) -> int:
        """How many rows the pass changed."""
        return (
            self.expired_workflow_leases
            + self.timers_fired
            + self.activity_timeouts
            + self.released_bindings
            + self.ended_sessions
            + self.stranded_session_activities
            + self.close_policies_applied
            + self.runs_timed_out
            + self.cleanups_cut_short
            + self.schedule_fires
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
    task_kind: str = "query"
