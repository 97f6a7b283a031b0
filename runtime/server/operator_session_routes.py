"""Worker sessions as operators see them (SPEC W9, PROTOCOL.md 6.4).

The documents `burrow sessions list|show --json` print.

Operator or admin role, control-plane header, `X-Namespace` like every control route.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query

from burrow.server import routing
from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.routing import ResponseBody
from burrow.store.models import SessionState

router = APIRouter(prefix="/api")
MAX_LIMIT = 1000


@router.get("/worker-sessions")
async def list_worker_sessions(
    state: State,
    caller: OperatorCaller,
    session_state: Annotated[SessionState | None, Query(alias="state")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
) -> ResponseBody:
    """`{"namespace", "metrics", "sessions"}`: the newest sessions and counts per state."""
    listed, counts = await state.store.list_worker_sessions(
        namespace=caller.namespace,
        state=session_state,
        limit=limit,
        owner_stale=routing.owner_stale(state),
    )
    return {
        "namespace": caller.namespace,
        "metrics": asdict(counts),
        "sessions": [info.to_json() for info in listed],
    }


@router.get("/worker-sessions/{session_id}")
async def get_worker_session(session_id: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """`{"namespace", "session"}`; 404 `worker_session_not_found`."""
    info = await state.store.get_worker_session(
        namespace=caller.namespace, session_id=session_id, owner_stale=routing.owner_stale(state)
    )
    if info is None:
        raise ApiError(
            404,
            "worker_session_not_found",
            f"no worker session {session_id!r} in namespace {caller.namespace!r}",
        )
    return {"namespace": caller.namespace, "session": info.to_json()}
