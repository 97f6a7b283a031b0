"""Build-id rollout of a task queue (SPEC M7, M8), in the reference server's shapes.

`GET /api/task-queues/{q}/build-ids`: the queue's cohorts (its workers grouped by build id, the
unversioned ones under `build_id` null) with their recorded drain intent and promotion.
`POST .../drain`, `.../resume` and `.../promote` with `{"build_id": ...}` (the key is required,
null names the unversioned cohort): a drained cohort's workers finish what they hold and take no
new tasks, at once and when they register again; a promoted cohort is the one fresh starts on
the queue pin to; promotion is refused with 409 while the cohort drains or has no live worker
(store/rollouts.py).

Operator or admin role, control-plane header, `X-Namespace` like every control route.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from burrow.server.api_errors import ApiError
from burrow.server.deps import OperatorCaller, State
from burrow.server.operator_fleet_routes import live_after
from burrow.server.routing import ResponseBody
from burrow.store import rollouts
from burrow.store.models import WorkerState

router = APIRouter(prefix="/api/task-queues")
_RANK = {"active": 0, "active_with_draining": 1, "draining": 2, "stale_only": 3}


def _promotion(rollout: rollouts.RolloutState | None) -> dict[str, object]:
    """The newest reference's promotion fields (Burrow records no rollback: always null)."""
    promoted = None if rollout is None else rollout.promoted_at
    return {
        "promoted_at": _iso(promoted),
        "rolled_back_at": None,
        "new_start_selected": promoted is not None,
    }


class BuildIdIntent(BaseModel):
    """The body of a drain or resume: `build_id` must be present; null is the unversioned."""

    model_config = ConfigDict(extra="ignore")

    build_id: str | None = Field(max_length=255)


def _rollout_status(active: int, draining: int, stale: int, intent: str) -> str:
    """As the reference derives it from the counts and the recorded intent."""
    intent_draining = intent == rollouts.DRAINING
    if active > 0:
        return "active_with_draining" if intent_draining or draining > 0 else "active"
    if draining > 0 or intent_draining:
        return "draining"
    return "stale_only" if stale > 0 else "no_workers"


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


@router.get("/{task_queue}/build-ids")
async def build_ids(task_queue: str, state: State, caller: OperatorCaller) -> ResponseBody:
    """The queue's build-id cohorts: active ones first, the unversioned last within a status."""
    stale_after = live_after(state)
    workers, recorded = await state.store.build_cohorts(
        namespace=caller.namespace, task_queue=task_queue, stale_after=stale_after
    )
    groups: dict[str, list[rollouts.CohortWorker]] = {}
    for worker in workers:
        groups.setdefault(rollouts.build_key(worker.build_id), []).append(worker)
    cohorts = [
        _cohort(key, groups.get(key, []), recorded.get(key))
        for key in list(groups) + [key for key in recorded if key not in groups]
    ]
    cohorts.sort(key=lambda c: c["last_heartbeat_at"] or "", reverse=True)
    cohorts.sort(key=lambda c: _RANK.get(c["rollout_status"], 4) * 2 + (c["build_id"] is None))
    return {
        "namespace": caller.namespace,
        "task_queue": task_queue,
        "stale_after_seconds": int(stale_after.total_seconds()),
        "build_ids": cohorts,
    }


def _cohort(
    key: str, workers: list[rollouts.CohortWorker], rollout: rollouts.RolloutState | None
) -> dict[str, Any]:
    stale = sum(w.stale for w in workers)
    draining = sum(not w.stale and w.state == WorkerState.DRAINING for w in workers)
    active = len(workers) - stale - draining
    intent = rollouts.ACTIVE if rollout is None else rollout.drain_intent
    return {
        "build_id": key or None,
        "rollout_status": _rollout_status(active, draining, stale, intent),
        "drain_intent": intent,
        "drained_at": None if rollout is None else _iso(rollout.drained_at),
        "active_worker_count": active,
        "draining_worker_count": draining,
        "stale_worker_count": stale,
        "total_worker_count": len(workers),
        "runtimes": sorted({w.runtime for w in workers}),
        "sdk_versions": sorted({w.sdk_version for w in workers if w.sdk_version}),
        "last_heartbeat_at": _iso(max((w.heartbeat_at for w in workers), default=None)),
        "first_seen_at": _iso(min((w.registered_at for w in workers), default=None)),
        **_promotion(rollout),
    }


async def _set_intent(
    state: State, namespace: str, task_queue: str, body: BuildIdIntent, *, draining: bool
) -> ResponseBody:
    recorded = await state.store.set_build_drain(
        namespace=namespace, task_queue=task_queue, build_id=body.build_id, draining=draining
    )
    return _state(namespace, task_queue, recorded)


def _state(namespace: str, task_queue: str, recorded: rollouts.RolloutState) -> ResponseBody:
    return {
        "namespace": namespace,
        "task_queue": task_queue,
        "build_id": recorded.build_id,
        "drain_intent": recorded.drain_intent,
        "drained_at": _iso(recorded.drained_at),
        **_promotion(recorded),
    }


@router.post("/{task_queue}/build-ids/drain")
async def drain_build_id(
    task_queue: str, body: BuildIdIntent, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Drain a cohort; idempotent (a repeated drain keeps its first `drained_at`)."""
    return await _set_intent(state, caller.namespace, task_queue, body, draining=True)


@router.post("/{task_queue}/build-ids/resume")
async def resume_build_id(
    task_queue: str, body: BuildIdIntent, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Resume a cohort: its draining workers take new tasks again; idempotent."""
    return await _set_intent(state, caller.namespace, task_queue, body, draining=False)


@router.post("/{task_queue}/build-ids/promote")
async def promote_build_id(
    task_queue: str, body: BuildIdIntent, state: State, caller: OperatorCaller
) -> ResponseBody:
    """Select a cohort for fresh starts; 409 with the blockage while it cannot take them."""
    recorded = await state.store.promote_build(
        namespace=caller.namespace,
        task_queue=task_queue,
        build_id=body.build_id,
        live_after=live_after(state),
    )
    build_id = rollouts.build_key(body.build_id) or None
    if isinstance(recorded, rollouts.PromotionRefused):
        outcome = f"rejected_{recorded.reason}"
        raise ApiError(
            409,
            recorded.reason,
            recorded.message,
            rejection_reason=recorded.reason,
            expected_resolution=recorded.expected_resolution,
            outcome=outcome,
            control_plane_outcome=outcome,
            command_status="rejected",
            command_source="control_plane",
            namespace=caller.namespace,
            task_queue=task_queue,
            build_id=build_id,
            deployment=None,
            blockages=[recorded.model_dump()],
        )
    return {**_state(caller.namespace, task_queue, recorded), "deployment": None}
