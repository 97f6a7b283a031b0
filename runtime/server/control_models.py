"""Typed request and response bodies of the control plane (PROTOCOL.md 17)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from burrow.protocol import shapes
from burrow.protocol.shapes import JsonDict
from burrow.server.worker_models import Envelope

WORKFLOW_ID_PATTERN = r"^[a-zA-Z0-9._:-]+$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True)


class StartWorkflow(_Request):
    """`POST /api/workflows`."""

    workflow_id: str = Field(min_length=1, max_length=128, pattern=WORKFLOW_ID_PATTERN)
    workflow_type: str = Field(min_length=1, max_length=255)
    task_queue: str = Field(min_length=1, max_length=255)
    input: Envelope
    duplicate_policy: Literal["fail", "use-existing"] | None = None
    build_id: str | None = None
    compatibility: str | None = None
    # M7: the connection the run is on (absent: "default").
    connection: str | None = Field(default=None, min_length=1, max_length=255)
    # Issue 28: the deadlines of the chain and of each run (the SDK sends 3600 and 600).
    execution_timeout_seconds: float | None = None
    run_timeout_seconds: float | None = None
    # Retries a failed (or run-timed-out) run as a new run of the id, as the native client's
    # `retry_policy` does: the child command's shape (`max_attempts`, `backoff_seconds`,
    # `non_retryable_error_types`) and the activity policy's intervals. An extension: the
    # Durable Workflow server lists it in `start.unsupported_fields`.
    retry_policy: shapes.RetrySpec | None = None
    # Issue 30: any JSON object, and values of the namespace's registered search attributes.
    memo: JsonDict | None = None
    search_attributes: JsonDict | None = None

    @model_validator(mode="after")
    def _timeouts(self) -> StartWorkflow:
        shapes.check_workflow_timeouts(self.execution_timeout_seconds, self.run_timeout_seconds)
        return self


class Started(_Response):
    """The start receipt: 201 `started_new`, 200 `returned_existing_active`."""

    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    status: str
    payload_codec: str
    outcome: Literal["started_new", "returned_existing_active"]


class SignalWorkflow(_Request):
    """`POST /api/workflows/{id}[/runs/{runId}]/signal/{name}`."""

    input: Envelope | None = None
    request_id: str | None = Field(default=None, min_length=1, max_length=255)


class Reason(_Request):
    """`POST .../cancel` and `.../terminate`."""

    reason: str | None = Field(default=None, max_length=10_000)


class WorkflowDescription(_Response):
    """`GET /api/workflows/{id}` and `.../runs/{runId}`."""

    workflow_id: str
    run_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    status: str
    is_terminal: bool
    payload_codec: str
    input_envelope: JsonDict
    output_envelope: JsonDict | None
    failure: JsonDict | None
    cancel_requested: bool
    continued_to_run_id: str | None
    started_at: datetime
    closed_at: datetime | None
    compatibility: str | None = None
    """M7: the build the run is pinned to (its compatibility family), if any."""
    closed_reason: str | None = None
    """How the run closed, when `status` alone does not say it: `timed_out`."""
    execution_timeout_seconds: int | float | None = None
    """Whole seconds as integers, as the reference serves them."""
    run_timeout_seconds: int | float | None = None
    execution_deadline_at: datetime | None = None
    run_deadline_at: datetime | None = None
    retry_attempt: int = 1
    retry_of_run_id: str | None = None
    # The Durable Workflow server's `formatRun` fields (PROTOCOL.md 17): the decoded input and
    # output beside their envelopes, the run's place among its workflow id's runs (describe
    # only; null in a list) and what may be done with it.
    business_key: str | None = None
    status_bucket: Literal["running", "completed", "failed"]
    input: object = None
    output: object = None
    run_number: int | None = None
    run_count: int | None = None
    is_current_run: bool | None = None
    last_progress_at: datetime | None = None
    wait_kind: str | None = None
    wait_reason: str | None = None
    memo: JsonDict = Field(default_factory=dict)
    search_attributes: JsonDict = Field(default_factory=dict)
    actions: dict[str, bool] | None = None
    archived: bool = False
    archived_at: datetime | None = None
    archive_reason: str | None = None
    continued_from_run_id: str | None = None


class WorkflowList(_Response):
    """`GET /api/workflows`."""

    workflows: list[WorkflowDescription]
    workflow_count: int
    next_page_token: str | None = None


class WorkflowRunSummary(_Response):
    """One run in `GET /api/workflows/{id}/runs` (the Durable Workflow server's `runs` item)."""

    workflow_id: str
    run_id: str
    run_number: int
    namespace: str
    workflow_type: str
    business_key: str | None = None
    status: str
    status_bucket: Literal["running", "completed", "failed"]
    is_terminal: bool
    is_current_run: bool
    closed_reason: str | None = None
    task_queue: str
    compatibility: str | None = None
    started_at: datetime
    closed_at: datetime | None
    archived: bool = False


class WorkflowRunList(_Response):
    """`GET /api/workflows/{id}/runs`: every run of the workflow id, oldest first."""

    workflow_id: str
    run_count: int
    runs: list[WorkflowRunSummary]


class ArchiveWorkflow(_Request):
    """`POST /api/workflows/{id}/archive`."""

    reason: str | None = Field(default=None, max_length=1000)
    request_id: str | None = Field(default=None, min_length=1, max_length=255)


class CommandRequest(_Request):
    """`POST /api/workflows/{id}/repair` and `.../runs/{runId}/redrive`."""

    request_id: str | None = Field(default=None, min_length=1, max_length=255)


class WorkflowCommandResult(_Response):
    """A repair, archive or redrive outcome, as the SDK's `WorkflowCommandResult` reads it."""

    workflow_id: str
    run_id: str
    outcome: str
    command_id: str
    command_status: Literal["accepted"] = "accepted"
    command_source: Literal["control_plane"] = "control_plane"
    target_scope: Literal["instance", "run"] = "instance"
    reason: str | None = None
    request_id: str | None = None
    continued_from_run_id: str | None = None
    """Redrive: the failed run the new run (`run_id`) continues."""
    resume_step_sequence: int | None = None
    """Redrive: the step the new run runs again (its earlier steps' results are reused)."""
    archived_at: datetime | None = None
    repair: JsonDict | None = None
    """Repair: what the pass did for the run."""
    control_plane: JsonDict


class HistoryResponse(_Response):
    """`GET /api/workflows/{id}/runs/{runId}/history`."""

    workflow_id: str
    run_id: str
    events: list[JsonDict]
    next_page_token: str | None


class CommandReceipt(_Response):
    """A signal, cancel or terminate receipt."""

    workflow_id: str
    run_id: str
    outcome: str
    request_id: str | None = None
    signal_name: str | None = None


class QueryWorkflow(_Request):
    """`POST /api/workflows/{id}[/runs/{runId}]/query/{name}`."""

    input: Envelope | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=60)


class QueryAnswer(_Response):
    """A query's answer: the SDK decodes `result` from `result_envelope`."""

    workflow_id: str
    run_id: str
    query_name: str
    query_task_id: str
    result: None = None
    result_envelope: JsonDict
    payload_codec: str


class UpdateWorkflow(_Request):
    """`POST /api/workflows/{id}[/runs/{runId}]/update/{name}`."""

    input: Envelope | None = None
    wait_for: Literal["accepted", "completed"] = "accepted"
    wait_timeout_seconds: float | None = Field(default=None, gt=0, le=300)
    request_id: str | None = Field(default=None, min_length=1, max_length=255)


class UpdateReceipt(_Response):
    """An update's state when the call returns; its result once completed."""

    workflow_id: str
    run_id: str
    update_id: str
    update_name: str
    request_id: str
    wait_for: str
    update_status: Literal["accepted", "completed"]
    outcome: Literal["accepted", "completed", "deduplicated"]
    wait_timed_out: bool = False
    result: None = None
    result_envelope: JsonDict | None = None
    payload_codec: str = "avro"
