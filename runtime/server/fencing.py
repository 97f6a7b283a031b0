"""Lease fencing of worker calls (PROTOCOL.md 5.6, 6.2, 18.2-18.4).

A call names its lease by (task id, lease owner, attempt); these checks turn the stored lease
into the documented refusal, or into the full `Lease` the store fences on once more.
"""

from __future__ import annotations

import uuid

from burrow.server.api_errors import ApiError
from burrow.store import Store
from burrow.store.models import Lease, RunStatus, TaskState
from burrow.store.server_queries import TaskLeaseState

_STOP_REASONS = {
    RunStatus.CANCELLED: "run_cancelled",
    RunStatus.TERMINATED: "run_terminated",
    RunStatus.COMPLETED: "run_completed",
    RunStatus.FAILED: "run_failed",
}


def _task_not_found(task_id: str) -> ApiError:
    return ApiError(404, "task_not_found", f"task {task_id} not found", task_id=task_id)


def _is_uuid(task_id: str) -> bool:
    try:
        uuid.UUID(task_id)
    except ValueError:
        return False
    return True


def _lease(state: TaskLeaseState) -> Lease:
    assert state.lease_token is not None and state.lease_owner is not None
    assert state.lease_expires_at is not None
    return Lease(
        task_id=state.task_id,
        run_id=state.run_id,
        lease_token=state.lease_token,
        lease_owner=state.lease_owner,
        attempt=state.attempt,
        lease_expires_at=state.lease_expires_at,
    )


def _check_held(state: TaskLeaseState, lease_owner: str) -> None:
    if state.run_status != RunStatus.RUNNING and state.state != TaskState.LEASED:
        raise ApiError(
            409,
            "run_closed",
            f"run {state.run_id} is {state.run_status}; its task {state.task_id} is over",
            task_id=state.task_id,
            stop_reason=_STOP_REASONS.get(state.run_status, "run_closed"),
            run_status=state.run_status.value,
            can_continue=False,
        )
    if state.state != TaskState.LEASED or state.lease_token is None:
        raise ApiError(
            409,
            "task_not_leased",
            f"task {state.task_id} is {state.state}, not leased",
            task_id=state.task_id,
            task_status=state.state.value,
        )
    if state.lease_owner != lease_owner:
        raise ApiError(
            409,
            "lease_owner_mismatch",
            f"task {state.task_id} is leased by another worker",
            task_id=state.task_id,
            lease_owner=state.lease_owner,
        )
    if state.lease_expires_at is not None and state.lease_expires_at <= state.now:
        raise ApiError(
            409,
            "lease_expired",
            f"the lease on task {state.task_id} expired",
            task_id=state.task_id,
            task_status=state.state.value,
            lease_owner=state.lease_owner,
            lease_expires_at=state.lease_expires_at.isoformat(),
        )


async def workflow_task_lease(
    store: Store, *, namespace: str, task_id: str, lease_owner: str, attempt: int
) -> tuple[Lease, TaskLeaseState]:
    """The current lease of a workflow task the caller holds (and its row), or the refusal.

    PROTOCOL.md 5.6: unknown task 404; then attempt, closed run, lease, owner, expiry, each 409.
    """
    state = await store.workflow_task_lease(task_id=task_id) if _is_uuid(task_id) else None
    if state is None or state.namespace != namespace:
        raise _task_not_found(task_id)
    if state.attempt != attempt:
        raise ApiError(
            409,
            "workflow_task_attempt_mismatch",
            f"task {task_id} is at attempt {state.attempt}, not {attempt}",
            task_id=task_id,
            current_attempt=state.attempt,
        )
    _check_held(state, lease_owner)
    return _lease(state), state


async def activity_task_lease(
    store: Store, *, namespace: str, task_id: str, lease_owner: str, activity_attempt_id: str
) -> tuple[Lease, TaskLeaseState]:
    """The current lease of an activity attempt the caller holds, or the refusal (6.2)."""
    state = await store.activity_task_lease(task_id=task_id) if _is_uuid(task_id) else None
    if state is None or state.namespace != namespace:
        raise _task_not_found(task_id)
    if state.activity_attempt_id != activity_attempt_id:
        raise ApiError(
            409,
            "stale_attempt",
            f"attempt {activity_attempt_id} is not the current attempt of task {task_id}",
            task_id=task_id,
            activity_attempt_id=activity_attempt_id,
        )
    _check_held(state, lease_owner)
    return _lease(state), state


async def query_task_lease(
    store: Store, *, namespace: str, task_id: str, lease_owner: str, attempt: int
) -> tuple[Lease, TaskLeaseState]:
    """The current lease of a query task the caller holds, or the refusal (PROTOCOL.md 6.3).

    Unknown task 404 `query_task_not_found`; an answered or expired one 409
    `query_task_not_leased`; then owner and attempt, each 409.
    """
    state = await store.query_task_lease(task_id=task_id) if _is_uuid(task_id) else None
    if state is None or state.namespace != namespace:
        raise ApiError(
            404, "query_task_not_found", f"query task {task_id} not found", task_id=task_id
        )
    if state.attempt != attempt:
        raise ApiError(
            409,
            "query_task_attempt_mismatch",
            f"query task {task_id} is at attempt {state.attempt}, not {attempt}",
            task_id=task_id,
            current_attempt=state.attempt,
        )
    expired = state.lease_expires_at is not None and state.lease_expires_at <= state.now
    if state.state != TaskState.LEASED or state.lease_token is None or expired:
        raise ApiError(
            409,
            "query_task_not_leased",
            f"query task {task_id} is {state.state.value}, not leased",
            task_id=task_id,
            task_status=state.state.value,
        )
    if state.lease_owner != lease_owner:
        raise ApiError(
            409,
            "lease_owner_mismatch",
            f"query task {task_id} is leased by another worker",
            task_id=task_id,
            lease_owner=state.lease_owner,
        )
    return _lease(state), state
