"""Worker plane, worker sessions (PROTOCOL.md 6.4, 12; SPEC W2, W5, W9).

Create, heartbeat and close run on the same store operations as Burrow's own workers, so a
session taken over HTTP and one taken by a claim obey one set of admission rules (W3, W6).
An admitted operation answers `{admitted: true, outcome, session}`; a refusal is the typed
reason with the HTTP status the protocol gives it, and changes nothing.
"""

from __future__ import annotations

from typing import Annotated

import structlog
from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from burrow.protocol.shapes import JsonObject, SessionSpec
from burrow.server.api_errors import ApiError
from burrow.server.deps import ServerState, State, WorkerCaller
from burrow.server.routing import owner_stale, wrap
from burrow.server.worker_models import (
    CloseWorkerSession,
    WorkerSessionHeartbeat,
    WorkerSessionResult,
)
from burrow.store.models import SessionAdmission, SessionOutcome, SessionRefusal, WorkerState

router = APIRouter(prefix="/api/worker/sessions")
log = structlog.get_logger("burrow.server")

# PROTOCOL.md 6.4: the HTTP status of each refusal; every other one is 409.
_REFUSAL_STATUS = {
    SessionRefusal.WORKER_NOT_REGISTERED: 412,
    SessionRefusal.SESSION_NOT_FOUND: 404,
}
_CREATE_FIELDS = frozenset(SessionSpec.model_fields)


def refusal(status: int, reason: str, message: str, **context: object) -> ApiError:
    """A refused session operation: `admitted: false` and `status` in the body too (6.4)."""
    error = ApiError(status, reason, message, admitted=False, **context)
    error.extra["status"] = status
    return error


def answer(decision: SessionAdmission, *, verb: str) -> JSONResponse:
    """The operation result, or the typed refusal raised as an ApiError."""
    if not decision.admitted:
        reason = decision.reason or SessionRefusal.SESSION_NOT_ACTIVE
        status = _REFUSAL_STATUS.get(reason, 409)
        context: dict[str, object] = {"operation": verb}
        if decision.session is not None:
            context["session"] = decision.session.to_json()
        if decision.missing_requirements:
            context["missing_requirements"] = decision.missing_requirements
        if decision.max_concurrent_worker_sessions is not None:
            context["max_concurrent_worker_sessions"] = decision.max_concurrent_worker_sessions
        raise refusal(status, reason.value, f"worker session {verb} refused", **context)
    if decision.outcome is None or decision.session is None:
        raise RuntimeError(f"an admitted session {verb} came back without its outcome or session")
    status = 201 if decision.outcome == SessionOutcome.CREATED else 200
    result = WorkerSessionResult(
        outcome=decision.outcome.value, session=decision.session.to_json(), status=status
    )
    return JSONResponse(wrap(result.model_dump(mode="json")), status_code=status)


async def _require_registered(state: ServerState, namespace: str, worker_id: str) -> None:
    """412 `worker_not_registered` unless the worker is registered (and not stopped) here."""
    reg = await state.store.worker_registration(worker_id=worker_id)
    if reg is None or reg.namespace != namespace or reg.state == WorkerState.STOPPED:
        raise refusal(
            412,
            "worker_not_registered",
            f"worker {worker_id} is not registered; call POST /worker/register first",
            worker_id=worker_id,
        )


def _options(body: JsonObject) -> tuple[str, SessionSpec]:
    """The caller and the session options of a create request; 422 `invalid_worker_session`."""
    worker_id = body.get("worker_id")
    if not isinstance(worker_id, str) or not worker_id.strip():
        raise refusal(
            422,
            "invalid_worker_session",
            "worker_id must be a non-empty string",
            errors={"worker_id": ["required"]},
        )
    try:
        options = SessionSpec.model_validate(
            {k: v for k, v in body.items() if k in _CREATE_FIELDS and v is not None}
        )
    except ValidationError as exc:
        errors: dict[str, list[str]] = {}
        for error in exc.errors():
            field = ".".join(str(part) for part in error.get("loc", ())) or "body"
            errors.setdefault(field, []).append(str(error.get("msg")))
        raise refusal(
            422,
            "invalid_worker_session",
            f"invalid worker session: {', '.join(errors)}",
            errors=errors,
        ) from None
    return worker_id, options


@router.post("", status_code=201)
async def create(
    body: Annotated[JsonObject, Body()], state: State, caller: WorkerCaller
) -> JSONResponse:
    """Create a session for the worker, or reuse or reacquire it (W2, W5)."""
    worker_id, options = _options(body)
    await _require_registered(state, caller.namespace, worker_id)
    decision = await state.store.create_worker_session(
        worker_id=worker_id,
        namespace=caller.namespace,
        options=options,
        owner_stale=owner_stale(state),
    )
    log.info(
        "worker session create",
        namespace=caller.namespace,
        session_id=options.session_id,
        worker_id=worker_id,
        outcome=None if decision.outcome is None else decision.outcome.value,
        reason=None if decision.reason is None else decision.reason.value,
    )
    return answer(decision, verb="create")


@router.post("/{session_id}/heartbeat")
async def heartbeat(
    session_id: str, body: WorkerSessionHeartbeat, state: State, caller: WorkerCaller
) -> JSONResponse:
    """Renew the session's lease for its owner (W1), for `lease_seconds` if given."""
    await _require_registered(state, caller.namespace, body.worker_id)
    decision = await state.store.heartbeat_worker_session(
        worker_id=body.worker_id,
        namespace=caller.namespace,
        session_id=session_id,
        lease_seconds=body.lease_seconds,
        owner_stale=owner_stale(state),
    )
    return answer(decision, verb="heartbeat")


@router.delete("/{session_id}")
async def close(
    session_id: str, body: CloseWorkerSession, state: State, caller: WorkerCaller
) -> JSONResponse:
    """Close the session for good (W5, W8); only its owner may."""
    await _require_registered(state, caller.namespace, body.worker_id)
    decision = await state.store.close_worker_session(
        worker_id=body.worker_id,
        namespace=caller.namespace,
        session_id=session_id,
        reason=body.reason,
    )
    log.info(
        "worker session close",
        namespace=caller.namespace,
        session_id=session_id,
        worker_id=body.worker_id,
        outcome=None if decision.outcome is None else decision.outcome.value,
        reason=None if decision.reason is None else decision.reason.value,
    )
    return answer(decision, verb="close")
