"""Typed request and response bodies of the worker plane (PROTOCOL.md 4-6).

Requests accept the extra fields the SDK sends (capability manifests, process metrics, ...)
and validate the ones the server acts on; a bad one is a 422 naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, field_validator

from burrow.protocol.shapes import MAX_SESSION_SECONDS, Failure, JsonDict, JsonValue
from burrow.server import worker_protocol
from burrow.server.lease_models import WireTime
from burrow.store.sticky_reports import StickyFigures

WORKER_ID = Field(min_length=1, max_length=255)
# The store keeps counts and attempts as 32-bit integers, and a worker's slots summed: larger
# numbers would fail in Postgres (a 500) rather than here (a 422 naming the field).
MAX_SLOTS = 1_000_000
MAX_ATTEMPT = 2**31 - 1
MAX_POSITION = 2**31 - 1
"""The last message-stream position the store can number."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)


class Envelope(BaseModel):
    """A payload envelope `{codec, blob}` (PROTOCOL.md 10)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    codec: str = Field(min_length=1)
    blob: str


# -- lifecycle (4) ---------------------------------------------------------------------------


def _figure(*names: str) -> int | None:
    # Counts are read as 32-bit integers by the operator metrics.
    return Field(default=None, ge=0, le=MAX_ATTEMPT, validation_alias=AliasChoices(*names))


class ReportedStickyCache(_Request):
    """A worker's sticky cache figures as it reports them (S10, PROTOCOL.md 11).

    The documented heartbeat names (`hit_count`, ...) and the names SDK 2.12.0 puts in a
    completion's `sticky_cache.metrics` (`hit`, `miss`, `eviction`, `forced_cold_replay`,
    `entries`, `history_bytes`) are both taken; what is absent was not reported.
    """

    enabled: bool | None = None
    capacity: int | None = _figure("capacity")
    size: int | None = _figure("size", "entries")
    hit_count: int | None = _figure("hit_count", "hit")
    miss_count: int | None = _figure("miss_count", "miss")
    forced_cold_replay_count: int | None = _figure("forced_cold_replay_count", "forced_cold_replay")
    eviction_count: int | None = _figure("eviction_count", "eviction")
    approximate_bytes: int | None = _figure("approximate_bytes", "history_bytes")
    max_bytes: int | None = _figure("max_bytes")

    def figures(self) -> StickyFigures:
        """The reported figures, as the store keeps them."""
        return StickyFigures(**{name: getattr(self, name) for name in StickyFigures.model_fields})


class ProcessMetrics(_Request):
    """`process_metrics` of a registration or heartbeat.

    The server reads only `sticky_cache`, where the reference server keeps a worker's figures.
    """

    sticky_cache: ReportedStickyCache | None = None


class _ReportsStickyCache(_Request):
    sticky_cache: ReportedStickyCache | None = None
    process_metrics: ProcessMetrics | None = None

    def sticky_figures(self) -> StickyFigures | None:
        """The cache figures the body reports (S10), from `sticky_cache` or `process_metrics`."""
        reported = self.sticky_cache
        if reported is None and self.process_metrics is not None:
            reported = self.process_metrics.sticky_cache
        return None if reported is None else reported.figures()


class RegisterWorker(_ReportsStickyCache):
    """`POST /api/worker/register`."""

    worker_id: str = WORKER_ID
    task_queue: str = Field(min_length=1, max_length=255)
    runtime: str = Field(default="python", min_length=1, max_length=64)
    sdk_version: str | None = None
    supported_workflow_types: list[str] = Field(default_factory=list)
    supported_activity_types: list[str] = Field(default_factory=list)
    capabilities: list[str] = Field(default_factory=list)
    build_id: str | None = None
    # M7 (PROTOCOL.md 16): the partition every poll of this worker serves; none is "default".
    connection: str | None = Field(default=None, min_length=1, max_length=255)
    max_concurrent_workflow_tasks: int = Field(default=100, ge=0, le=MAX_SLOTS)
    max_concurrent_activity_tasks: int = Field(default=100, ge=0, le=MAX_SLOTS)
    # W6: 0 refuses every session to this worker (PROTOCOL.md 12).
    max_concurrent_worker_sessions: int = Field(default=10, ge=0, le=MAX_SLOTS)
    # S10: the documented registration shape; SDK 2.12.0 sends the `sticky_execution` capability.
    sticky_cache_enabled: bool | None = None
    sticky_cache_capacity: int | None = Field(default=None, ge=0, le=MAX_SLOTS)
    workflow_definition_fingerprints: dict[str, str] = Field(default_factory=dict)
    # Workflow type -> its contract; `update_validators` names the updates validated first.
    workflow_command_contracts: dict[str, JsonDict] = Field(default_factory=dict)

    @property
    def update_validators(self) -> dict[str, list[str]]:
        """Workflow type -> the updates it validates before they are accepted (6.5)."""
        declared: dict[str, list[str]] = {}
        for workflow_type, contract in self.workflow_command_contracts.items():
            names = contract.get("update_validators") if isinstance(contract, dict) else None
            if workflow_type in self.supported_workflow_types and isinstance(names, list):
                valid = [n for n in names if isinstance(n, str) and n]
                if valid:
                    declared[workflow_type] = valid
        return declared

    @property
    def keeps_sticky_cache(self) -> bool:
        """Whether the worker keeps a sticky cache (S3: it opts in to sticky routing)."""
        if self.sticky_cache_enabled is not None:
            return self.sticky_cache_enabled
        return "sticky_execution" in self.capabilities


class Registered(_Response):
    """The registration receipt (201)."""

    worker_id: str
    registered: Literal[True] = True
    namespace: str
    task_queue: str
    runtime: str
    build_id: str | None
    connection: str
    capabilities: list[str]
    status: Literal["active", "draining"] = "active"
    heartbeat_interval_seconds: int


class WorkerHeartbeat(_ReportsStickyCache):
    """`POST /api/worker/heartbeat`, with the worker's cache figures if it reports them (S10)."""

    worker_id: str = WORKER_ID


class HeartbeatAck(_Response):
    """The heartbeat acknowledgement."""

    worker_id: str
    acknowledged: Literal[True] = True
    heartbeat_interval_seconds: int


class Deregistered(_Response):
    """`DELETE /api/worker/registrations/{workerId}`: the receipt the SDK validates."""

    worker_id: str
    outcome: Literal["deregistered"] = "deregistered"
    recovered_workflow_task_count: int = Field(ge=0)


# -- workflow tasks (5) ----------------------------------------------------------------------


class PollTasks(_Request):
    """`POST /api/worker/{workflow,activity}-tasks/poll`."""

    worker_id: str = WORKER_ID
    task_queue: str = Field(min_length=1, max_length=255)
    poll_request_id: str | None = Field(default=None, max_length=255)
    timeout_seconds: int = Field(default=30, ge=0, le=worker_protocol.LONG_POLL_TIMEOUT_MAX)
    history_page_size: int = Field(
        default=worker_protocol.HISTORY_PAGE_SIZE_DEFAULT,
        ge=1,
        le=worker_protocol.HISTORY_PAGE_SIZE_MAX,
    )
    build_id: str | None = None
    # 6.5: the multiplexed workflow poll; the kinds of work it may answer with.
    task_kinds: list[Literal["workflow", "update_validation"]] | None = Field(
        default=None, min_length=1, max_length=2
    )


class WorkflowTaskFence(_Request):
    """What every call about a leased workflow task names (PROTOCOL.md 5.6)."""

    lease_owner: str = WORKER_ID
    workflow_task_attempt: int = Field(ge=1, le=MAX_ATTEMPT)


class HistoryPageRequest(WorkflowTaskFence):
    """`POST /api/worker/workflow-tasks/{taskId}/history`."""

    next_history_page_token: str | None = None
    history_page_size: int = Field(
        default=worker_protocol.HISTORY_PAGE_SIZE_DEFAULT,
        ge=1,
        le=worker_protocol.HISTORY_PAGE_SIZE_MAX,
    )


class StickyCacheClaim(_Request):
    """The `sticky_cache` of a completion: the worker keeps this run warm (PROTOCOL.md 11)."""

    worker_id: str = WORKER_ID
    workflow_id: str
    run_id: str
    build_id: str | None = None
    ttl_seconds: int = Field(default=300, ge=1, le=3600)
    # S10: the worker's cumulative cache counters, stored as a heartbeat's are.
    metrics: ReportedStickyCache = Field(default_factory=ReportedStickyCache)


STREAM_NAME_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
"""A message stream's name: 1-128 characters of A-Z a-z 0-9 . _ : - (PROTOCOL.md 17)."""


class MessageStreamCursor(_Request):
    """How far the workflow has read a message stream: through `through_position` (5.3)."""

    stream_name: str = Field(pattern=STREAM_NAME_PATTERN)
    through_position: StrictInt = Field(ge=0, le=MAX_POSITION)


class MessageStreamWait(_Request):
    """A message stream the workflow waits on, past `after_position` (5.3); informational."""

    stream_name: str = Field(pattern=STREAM_NAME_PATTERN)
    after_position: StrictInt = Field(ge=0, le=MAX_POSITION)


class CompleteWorkflowTask(WorkflowTaskFence):
    """`POST /api/worker/workflow-tasks/{taskId}/complete`: commands in wire form (7)."""

    commands: list[JsonDict] = Field(min_length=1)
    sticky_cache: StickyCacheClaim | None = None
    # SDK 2.12.0 reports its stream cursors on every completion; a continue-as-new carries them.
    message_stream_cursors: list[MessageStreamCursor] = Field(default_factory=list)
    message_stream_waits: list[MessageStreamWait] = Field(default_factory=list)

    @field_validator("message_stream_cursors")
    @classmethod
    def _one_cursor_a_stream(cls, cursors: list[MessageStreamCursor]) -> list[MessageStreamCursor]:
        names = [cursor.stream_name for cursor in cursors]
        if len(set(names)) != len(names):
            raise ValueError("each stream may have one cursor")
        return cursors


class TaskFailure(BaseModel):
    """A failure report of a workflow task or activity attempt."""

    model_config = ConfigDict(extra="allow", frozen=True)

    message: str = ""
    type: str | None = None
    reason: str | None = None
    stack_trace: str | None = None
    non_retryable: bool = False
    details: Envelope | None = None


def failure_record(**fields: object) -> Failure:
    """The failure record of a report: the fields given, those that are None left out."""
    return Failure.model_validate({k: v for k, v in fields.items() if v is not None})


class FailWorkflowTask(WorkflowTaskFence):
    """`POST /api/worker/workflow-tasks/{taskId}/fail`."""

    failure: TaskFailure


class WorkflowTaskPayload(_Response):
    """A leased workflow task (PROTOCOL.md 5.1), history from sequence 1 (9)."""

    task_id: str
    workflow_id: str
    run_id: str
    namespace: str
    workflow_task_attempt: int
    workflow_type: str
    workflow_class: str
    payload_codec: str
    arguments: str | None
    run_status: str
    last_history_sequence: int
    total_history_events: int
    history_events: list[JsonDict]
    next_history_page_token: str | None
    task_queue: str
    connection: str | None
    compatibility: str | None
    lease_owner: str
    lease_expires_at: datetime
    sticky_worker_id: str | None
    sticky_until: datetime | None
    sticky_replay_mode: str
    sticky_execution: JsonDict
    cancel_requested: bool
    workflow_update_id: str | None = None
    # S8: the worker's definition of the type is not the one the run was started on.
    workflow_definition_changed: bool = False
    """Set when the task is to run that accepted update's handler only (PROTOCOL.md 5.1)."""
    task_kind: Literal["workflow"] = "workflow"
    # Protocol 1.20: the run's cooperative cancellation request, once one is recorded.
    cancellation_request: JsonDict | None = Field(default=None, exclude_if=lambda v: v is None)


class HistoryPage(_Response):
    """One page of a leased task's history."""

    task_id: str
    workflow_task_attempt: int
    history_events: list[JsonDict]
    total_history_events: int
    next_history_page_token: str | None


class WorkflowTaskCompleted(_Response):
    """The completion receipt."""

    task_id: str
    workflow_task_attempt: int
    outcome: Literal["completed"] = "completed"
    recorded: Literal[True] = True
    run_id: str
    run_status: str
    reason: None = None


class WorkflowTaskFailed(_Response):
    """The failure receipt: a retry, or the waiting-for-history acknowledgement (5.5)."""

    task_id: str
    outcome: Literal["failed", "waiting_for_history"]
    recorded: Literal[True] = True
    reason: None = None


class WorkflowTaskHeartbeatAck(_Response):
    """`POST /api/worker/workflow-tasks/{taskId}/heartbeat` (5.4)."""

    task_id: str
    workflow_task_attempt: int
    lease_owner: str
    renewed: Literal[True] = True
    lease_expires_at: datetime
    cancel_requested: bool
    reason: None = None


# -- activity tasks (6) ----------------------------------------------------------------------


class ActivityTaskFence(_Request):
    """What every call about a leased activity attempt names (PROTOCOL.md 6.2, 18.3)."""

    activity_attempt_id: str = Field(min_length=1)
    lease_owner: str = WORKER_ID


class CompleteActivityTask(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/complete`."""

    result: Envelope | None = None


class FailActivityTask(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/fail`."""

    failure: TaskFailure


class HeartbeatActivityTask(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/heartbeat`."""

    details: JsonDict | None = None


class ActivityTaskPayload(_Response):
    """A leased activity attempt (PROTOCOL.md 6.1)."""

    task_id: str
    workflow_id: str
    run_id: str
    namespace: str
    activity_execution_id: str
    activity_attempt_id: str
    idempotency_key: str
    attempt_number: int
    activity_type: str
    payload_codec: str
    arguments: JsonDict
    task_queue: str
    lease_owner: str
    lease_expires_at: WireTime
    worker_session: JsonDict | None = None
    # M7 (PROTOCOL.md 16): the connection the task was queued on, echoed.
    connection: str | None = None


class ActivityTaskOutcome(_Response):
    """The completion or failure receipt of an attempt."""

    task_id: str
    activity_attempt_id: str
    outcome: Literal["completed", "failed", "retry_scheduled"]
    recorded: Literal[True] = True
    reason: None = None


class ActivityHeartbeatAck(_Response):
    """The heartbeat answer: whether to go on (6.2)."""

    task_id: str
    activity_attempt_id: str
    lease_owner: str
    cancel_requested: bool
    can_continue: bool
    heartbeat_recorded: Literal[True] = True
    lease_expires_at: WireTime
    last_heartbeat_at: WireTime | None = None
    reason: str | None = None
    worker_session: JsonDict | None = None
    worker_session_renewal: JsonDict | None = None


class RenewActivityTaskLease(ActivityTaskFence):
    """`POST /api/worker/activity-tasks/{taskId}/renew-lease`: liveness, not progress."""


# -- worker sessions (6.4, 12) ---------------------------------------------------------------


class WorkerSessionHeartbeat(_Request):
    """`POST /api/worker/sessions/{sessionId}/heartbeat`."""

    worker_id: str = WORKER_ID
    lease_seconds: int | None = Field(default=None, ge=1, le=MAX_SESSION_SECONDS)


class CloseWorkerSession(_Request):
    """`DELETE /api/worker/sessions/{sessionId}` (a JSON body on DELETE)."""

    worker_id: str = WORKER_ID
    reason: str = Field(default="worker_shutdown", min_length=1, max_length=255)


class WorkerSessionResult(_Response):
    """An admitted session operation (PROTOCOL.md 6.4)."""

    admitted: Literal[True] = True
    outcome: str
    session: JsonDict
    activity_task_id: None = None
    status: int
    reason: None = None


# -- query tasks (6.3) -----------------------------------------------------------------------


class QueryTaskFence(_Request):
    """What every call about a leased query task names (PROTOCOL.md 6.3)."""

    lease_owner: str = WORKER_ID
    query_task_attempt: int = Field(ge=1, le=MAX_ATTEMPT)


class CompleteQueryTask(QueryTaskFence):
    """`POST /api/worker/query-tasks/{id}/complete`: the answer as an envelope (10)."""

    result: JsonValue = None
    result_envelope: Envelope


class FailQueryTask(QueryTaskFence):
    """`POST /api/worker/query-tasks/{id}/fail`."""

    failure: TaskFailure


class QueryTaskPayload(_Response):
    """A leased query task: what the SDK needs to replay the run and run the handler."""

    query_task_id: str
    query_task_attempt: int
    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    query_name: str
    payload_codec: str
    workflow_arguments: JsonDict
    query_arguments: JsonDict
    history_events: list[JsonDict]
    task_queue: str
    lease_owner: str
    lease_expires_at: WireTime
    task_kind: Literal["query"] = "query"
    # Protocol 1.20 query authority: the original, non-renewing budget the SDK keeps to
    # (the lease never outlives the deadline), measured from `server_time`.
    query_admitted_at: WireTime | None = None
    query_deadline_at: WireTime | None = None
    server_time: WireTime | None = None


class QueryTaskStatusQuery(_Request):
    """`GET /api/worker/query-tasks/{id}/status?lease_owner=..&query_task_attempt=..`."""

    lease_owner: str = WORKER_ID
    query_task_attempt: int = Field(ge=1, le=MAX_ATTEMPT)


class QueryTaskAnswered(_Response):
    """The receipt of a query answer."""

    query_task_id: str
    query_task_attempt: int
    outcome: Literal["completed", "failed"]
    recorded: Literal[True] = True
    reason: None = None


# -- update validation tasks (6.5) -----------------------------------------------------------


class UpdateValidationTaskFence(_Request):
    """What every call about a leased update validation task names (PROTOCOL.md 6.5)."""

    lease_owner: str = WORKER_ID
    update_validation_attempt: int = Field(ge=1, le=MAX_ATTEMPT)


class ValidationFailure(TaskFailure):
    """Why a validator rejected an update, or why it could not run."""

    validation_errors: JsonDict | None = None


class RejectUpdateValidationTask(UpdateValidationTaskFence):
    """`POST /api/worker/update-validation-tasks/{id}/reject`."""

    failure: ValidationFailure


class UpdateValidationTaskPayload(_Response):
    """A leased update validation task: the run to replay and the update to validate."""

    task_kind: Literal["update_validation"] = "update_validation"
    update_validation_task_id: str
    update_validation_attempt: int
    namespace: str
    workflow_id: str
    run_id: str
    workflow_type: str
    update_name: str
    payload_codec: str
    workflow_arguments: JsonDict
    update_arguments: JsonDict
    history_events: list[JsonDict]
    task_queue: str
    lease_owner: str
    lease_expires_at: datetime


class UpdateValidationAnswered(_Response):
    """The receipt of a validator's verdict."""

    update_validation_task_id: str
    update_validation_attempt: int
    outcome: Literal["approved", "rejected", "failed"]
    recorded: Literal[True] = True
