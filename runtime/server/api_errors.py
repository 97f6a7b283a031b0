"""The error contract (PROTOCOL.md 2.4).

JSON with a machine-readable `reason`, and the mapping from store errors to HTTP statuses
and reason codes.

Every refusal is raised as `ApiError` before anything is written; handlers render it.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from burrow import page_tokens
from burrow.errors import (
    PayloadTooLarge,
    WorkflowAlreadyStartedError,
    WorkflowNotFoundError,
    WorkflowNotRunningError,
)
from burrow.server.worker_protocol import worker_envelope
from burrow.store import errors as store_errors
from burrow.store import message_streams, workflow_streams
from burrow.store.models import RunStatus


class ApiError(Exception):
    """A refused request: HTTP status, reason code, message and extra context fields."""

    def __init__(self, status: int, reason: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, object]:
        """The JSON body: `error` and `message` carry the text, `reason` the code."""
        return {"error": self.message, "message": self.message, "reason": self.reason, **self.extra}


def from_store_error(exc: Exception) -> ApiError | None:
    """The API error a store error stands for, or None for an unexpected one."""
    match exc:
        case WorkflowNotFoundError():
            return ApiError(404, "workflow_not_found", str(exc))
        case WorkflowAlreadyStartedError():
            return ApiError(409, "instance_already_started", str(exc))
        case WorkflowNotRunningError():
            return ApiError(409, "run_not_active", str(exc))
        case PayloadTooLarge():
            return ApiError(413, "payload_too_large", str(exc))
        case store_errors.UnstorableText():
            return ApiError(422, "validation_failed", str(exc))
        case message_streams.InvalidStreamCursor():
            field = "message_stream_cursors"
            return ApiError(422, "validation_failed", str(exc), errors={field: [str(exc)]})
        case store_errors.InvalidCommandReference():
            # Issue 25: which command named what; the protocol's reason stays invalid_commands.
            reference = {exc.field: exc.value}
            return ApiError(
                409, "invalid_commands", str(exc), command=exc.command, missing_reference=reference
            )
        case store_errors.InvalidVisibilityUpsert():
            # PROTOCOL.md 5.4: the reference's 422 for a memo it refuses; attributes alike.
            reason = f"workflow_{'memo' if exc.kind == 'memo' else exc.kind}_validation_failed"
            return ApiError(422, reason, str(exc), errors={exc.kind: [str(exc)]})
        case store_errors.InvalidCommands():
            return ApiError(409, "invalid_commands", str(exc))
        case store_errors.WorkerIdTaken():
            return ApiError(409, "worker_id_conflict", str(exc), worker_id=exc.worker_id)
        case store_errors.StaleLease():
            return stale_lease(exc)
        case store_errors.TaskNotFound():
            return ApiError(404, "task_not_found", str(exc))
        case workflow_streams.StreamTerminal():
            errored = exc.stream.status == workflow_streams.StreamStatus.ERRORED
            return ApiError(409, "stream_errored" if errored else "stream_closed", str(exc))
        case workflow_streams.StreamFull():
            return ApiError(429, "stream_full", str(exc), max_pending_items=exc.limit)
        case workflow_streams.ItemKeyConflict():
            return ApiError(
                409,
                "idempotency_key_conflict",
                str(exc),
                idempotency_key=exc.key,
                offset=exc.offset,
            )
        case page_tokens.InvalidPageToken():
            return ApiError(400, "invalid_page_token", str(exc))
        case store_errors.StoreUnavailable():
            return ApiError(503, "backend_unavailable", str(exc), retryable=True)
    return None


_STOP_REASONS = {
    RunStatus.CANCELLED: "run_cancelled",
    RunStatus.TERMINATED: "run_terminated",
    RunStatus.COMPLETED: "run_completed",
    RunStatus.FAILED: "run_failed",
    RunStatus.TIMED_OUT: "run_timed_out",  # PROTOCOL.md 5.6
}


def stale_lease(exc: store_errors.StaleLease) -> ApiError:
    """The refusal of a fenced call, as the protocol documents it (5.6, 6.2, 6.3, 18.2-18.4).

    The store says why (`exc.reason`) and what it found; query tasks have refusals of their own.
    """
    reason, task_id, status = exc.reason, exc.task_id, exc.task_status
    query = exc.kind == "query"
    what = "query task" if query else "task"
    match reason:
        case store_errors.LeaseRefusal.TASK_NOT_FOUND:
            code = "query_task_not_found" if query else "task_not_found"
            return ApiError(404, code, f"{what} {task_id} not found", task_id=task_id)
        case store_errors.LeaseRefusal.ATTEMPT_MISMATCH if exc.named_attempt_id is not None:
            return ApiError(
                409,
                "stale_attempt",
                f"attempt {exc.named_attempt_id} is not the current attempt of task {task_id}",
                task_id=task_id,
                activity_attempt_id=exc.named_attempt_id,
            )
        case store_errors.LeaseRefusal.ATTEMPT_MISMATCH:
            code = "query_task_attempt_mismatch" if query else "workflow_task_attempt_mismatch"
            return ApiError(
                409,
                code,
                f"{what} {task_id} is at attempt {exc.current_attempt}, not {exc.named_attempt}",
                task_id=task_id,
                current_attempt=exc.current_attempt,
            )
        case (
            store_errors.LeaseRefusal.RUN_CLOSED
            | store_errors.LeaseRefusal.NOT_LEASED
            | store_errors.LeaseRefusal.EXPIRED
        ) if query:
            return ApiError(
                409,
                "query_task_not_leased",
                f"query task {task_id} is {status}, not leased",
                task_id=task_id,
                task_status=status,
            )
        case store_errors.LeaseRefusal.RUN_CLOSED:
            run_status = RunStatus(str(exc.run_status))
            return ApiError(
                409,
                "run_closed",
                f"run {exc.run_id} is {run_status}; its task {task_id} is over",
                task_id=task_id,
                stop_reason=_STOP_REASONS.get(run_status, "run_closed"),
                run_status=run_status.value,
                can_continue=False,
            )
        case store_errors.LeaseRefusal.NOT_LEASED:
            return ApiError(
                409,
                "task_not_leased",
                f"task {task_id} is {status}, not leased",
                task_id=task_id,
                task_status=status,
            )
        case store_errors.LeaseRefusal.OWNER_MISMATCH:
            return ApiError(
                409,
                "lease_owner_mismatch",
                f"{what} {task_id} is leased by another worker",
                task_id=task_id,
                lease_owner=exc.lease_owner,
            )
        case store_errors.LeaseRefusal.EXPIRED:
            expires = exc.lease_expires_at
            return ApiError(
                409,
                "lease_expired",
                f"the lease on task {task_id} expired",
                task_id=task_id,
                task_status=status,
                lease_owner=exc.lease_owner,
                lease_expires_at=None if expires is None else expires.isoformat(),
            )
        case store_errors.LeaseRefusal.RUN_MISMATCH:
            return ApiError(
                409,
                "sticky_cache_identity_mismatch",
                f"sticky_cache names run {exc.named_run_id}, the task is of run {exc.run_id}",
                run_id=exc.named_run_id,
            )
    # The token is not current, or the row changed while the call was fenced.
    return ApiError(409, "task_not_leased", str(exc))


def _field_errors(exc: RequestValidationError) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ()) if part != "body"]
        errors.setdefault(".".join(location) or "body", []).append(str(error.get("msg")))
    return errors


def response_for(path: str, error: ApiError) -> JSONResponse:
    """The error response on `path`; on the worker plane with the envelope (PROTOCOL.md 2.3)."""
    body = error.body()
    if path.startswith("/api/worker/"):
        body = {**body, **worker_envelope()}
    return JSONResponse(body, status_code=error.status)


def render(request: Request, error: ApiError) -> JSONResponse:
    """The error response to `request`."""
    return response_for(request.url.path, error)


def install(app: FastAPI) -> None:
    """Render ApiError, validation errors (422 naming each field) and store errors."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, ApiError):  # registered for ApiError alone
            raise TypeError(f"api_error handler given {type(exc).__name__}") from exc
        return render(request, exc)

    async def invalid_body(request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, RequestValidationError):  # registered for it alone
            raise TypeError(f"invalid_body handler given {type(exc).__name__}") from exc
        errors = _field_errors(exc)
        fields = ", ".join(errors)
        refused = ApiError(422, "validation_failed", f"invalid request: {fields}", errors=errors)
        return render(request, refused)

    async def store_error(request: Request, exc: Exception) -> JSONResponse:
        mapped = from_store_error(exc)
        if mapped is None:
            raise exc
        return render(request, mapped)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(store_errors.StoreError, store_error)
    app.add_exception_handler(PayloadTooLarge, store_error)
    app.add_exception_handler(page_tokens.InvalidPageToken, store_error)
