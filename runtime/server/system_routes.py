"""System maintenance routes (SPEC M8), in the reference server's shapes.

`GET /api/system/repair` and `POST .../repair/pass`: the repair pass's policy and what it would
act on now, and one pass run at once (the same pass the server's loop runs: expired leases, due
timers, activity timeouts, run deadlines, lost wakes). Burrow's pass always covers the whole
database: `run_ids` and `instance_id` are validated but do not narrow it (`scope` says so).

`GET /api/system/activity-timeouts` and `POST .../pass`: open activity executions past a
timeout, and enforcing them (all of the namespace's, up to `limit`, or the named ones).

`GET /api/system/retention` and `POST .../pass`: the namespace's retention window, cutoff and
expired closed runs, and deleting them (store/retention.py; the repair pass does it too).

Admin role, control-plane header, `X-Namespace` like every control route.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from burrow.server.deps import AdminCaller, State
from burrow.server.routing import ResponseBody
from burrow.store import isolation, repair, retention

router = APIRouter(prefix="/api/system")
SCAN_LIMIT = 100
ItemId = Annotated[str, Field(min_length=1, max_length=128)]
Limit = Annotated[int | None, Query(ge=1)]


class RepairPass(BaseModel):
    """`POST /api/system/repair/pass`: optional filters (see the module docstring)."""

    model_config = ConfigDict(extra="ignore")

    run_ids: list[ItemId] | None = Field(default=None, max_length=100)
    instance_id: str | None = Field(default=None, min_length=1, max_length=128)


class ActivityTimeoutPass(BaseModel):
    """`POST /api/system/activity-timeouts/pass`: the executions to enforce, or a bound."""

    model_config = ConfigDict(extra="ignore")

    execution_ids: list[ItemId] | None = Field(default=None, max_length=100)
    limit: int | None = Field(default=None, ge=1)


class RetentionPass(BaseModel):
    """`POST /api/system/retention/pass`: the runs to prune, or a bound."""

    model_config = ConfigDict(extra="ignore")

    run_ids: list[ItemId] | None = Field(default=None, max_length=100)
    limit: int | None = Field(default=None, ge=1)


def _limit(limit: int | None) -> int:
    return min(SCAN_LIMIT, limit or SCAN_LIMIT)


def _owner_stale(state: State) -> timedelta:
    return timedelta(seconds=state.runtime.sticky.owner_stale_seconds)


@router.get("/repair")
async def repair_status(state: State, caller: AdminCaller) -> ResponseBody:
    """The pass's policy and what it would act on now (every namespace, like the pass)."""
    found = await state.store.repair_candidates()
    existing = found.expired_workflow_leases + found.due_activity_timeouts
    scanned = repair.BATCH
    return {
        "policy": {
            "redispatch_after_seconds": int(repair.DEFAULT_REPUBLISH_AFTER.total_seconds()),
            "loop_throttle_seconds": state.settings.sweep_interval_seconds,
            "scan_limit": scanned,
            "scan_strategy": "oldest_first_per_step",
            "failure_backoff_max_seconds": int(isolation.MAX_RETRY_SECONDS),
            "failure_backoff_strategy": "exponential_by_failure_count",
        },
        "candidates": {
            "existing_task_candidates": existing,
            "missing_task_candidates": found.due_timers,
            "total_candidates": existing + found.due_timers,
            "scan_limit": scanned,
            "scan_strategy": "oldest_first_per_step",
            "scan_pressure": max(
                found.expired_workflow_leases, found.due_activity_timeouts, found.due_timers
            )
            > scanned,
            # Burrow's own breakdown: leases and activity timeouts are existing tasks; a due
            # timer's workflow task does not exist until the pass fires it.
            "expired_workflow_leases": found.expired_workflow_leases,
            "due_activity_timeouts": found.due_activity_timeouts,
            "due_timers": found.due_timers,
            "isolated_rows": found.isolated_rows,
        },
    }


@router.post("/repair/pass")
async def repair_pass(body: RepairPass, state: State, caller: AdminCaller) -> ResponseBody:
    """Run one repair pass now and report what it did; `throttled` when another held it."""
    result = await state.store.sweep(owner_stale=_owner_stale(state))
    existing = result.expired_workflow_leases + result.activity_timeouts
    return {
        "throttled": result.skipped,
        "selected_existing_task_candidates": existing,
        "selected_missing_task_candidates": result.timers_fired,
        "selected_total_candidates": existing + result.timers_fired + result.isolated,
        "repaired_existing_tasks": existing,
        "repaired_missing_tasks": result.timers_fired,
        "dispatched_tasks": result.republished,
        "selected_command_contract_candidates": 0,
        "backfilled_command_contracts": 0,
        "command_contract_backfill_unavailable": 0,
        "existing_task_failures": [],
        "missing_run_failures": [],
        "command_contract_failures": [],
        "scope": "full",
        "sweep": {
            key: value.isoformat() if hasattr(value, "isoformat") else value
            for key, value in asdict(result).items()
        },
    }


@router.get("/activity-timeouts")
async def activity_timeout_status(
    state: State, caller: AdminCaller, limit: Limit = None
) -> ResponseBody:
    """Open activity executions of the namespace past a timeout or lost lease."""
    scan = _limit(limit)
    expired = await state.store.expired_activity_executions(namespace=caller.namespace, limit=scan)
    return {
        "expired_count": len(expired),
        "expired_execution_ids": expired,
        "scan_limit": scan,
        "scan_pressure": len(expired) >= scan,
    }


@router.post("/activity-timeouts/pass")
async def activity_timeout_pass(
    body: ActivityTimeoutPass, state: State, caller: AdminCaller
) -> JSONResponse:
    """Enforce the timeouts of the named executions, or of every expired one up to `limit`.

    207 when one of them failed (rolled back and isolated), as the reference answers it.
    """
    ids = [i.strip() for i in body.execution_ids or []]
    if not ids:
        ids = await state.store.expired_activity_executions(
            namespace=caller.namespace, limit=_limit(body.limit)
        )
    outcomes = (
        await state.store.time_out_activity_executions(
            namespace=caller.namespace, execution_ids=ids
        )
        if ids
        else []
    )
    enforced = sum(o.outcome == "enforced" for o in outcomes)
    failed = sum(o.outcome == "error" for o in outcomes)
    report = {
        "processed": len(ids),
        "enforced": enforced,
        "skipped": len(outcomes) - enforced - failed,
        "failed": failed,
        "results": [o.model_dump(exclude_none=True) for o in outcomes],
    }
    return JSONResponse(report, status_code=207 if failed else 200)


@router.get("/retention")
async def retention_status(state: State, caller: AdminCaller, limit: Limit = None) -> ResponseBody:
    """The namespace's window, cutoff and oldest expired runs (up to `limit`, at most 100)."""
    scan = _limit(limit)
    found = await state.store.retention_status(namespace=caller.namespace, limit=scan)
    return {
        "namespace": found.namespace,
        "retention_days": found.retention_days,
        "cutoff": None if found.cutoff is None else found.cutoff.isoformat(),
        "expired_run_count": len(found.expired_run_ids),
        "expired_run_ids": found.expired_run_ids,
        "scan_limit": scan,
        "scan_pressure": len(found.expired_run_ids) >= scan,
        "retention_configured": found.retention_days is not None,
    }


@router.post("/retention/pass")
async def retention_pass(body: RetentionPass, state: State, caller: AdminCaller) -> ResponseBody:
    """Delete the namespace's expired runs (up to `limit`), or those of `run_ids` that are.

    A named run that is not deleted is skipped with its reason (retention.run_pass).
    """
    ids = [i.strip() for i in body.run_ids or []]
    outcomes = await state.store.retention_pass(
        namespace=caller.namespace, limit=_limit(body.limit), run_ids=ids
    )
    results: list[dict[str, object]] = []
    for o in outcomes:
        if o.outcome == "pruned":
            results.append(
                {
                    "run_id": o.run_id,
                    "outcome": "pruned",
                    "history_events_deleted": o.deleted.get("history_events", 0),
                    "tasks_deleted": sum(o.deleted.get(t, 0) for t in retention.TASK_TABLES),
                    "external_payloads_deleted": 0,
                    "deleted": o.deleted,
                }
            )
        else:
            results.append({"run_id": o.run_id, "outcome": "skipped", "reason": o.reason})
    pruned = sum(o.outcome == "pruned" for o in outcomes)
    return {
        "processed": len(outcomes),
        "pruned": pruned,
        "skipped": len(outcomes) - pruned,
        "failed": 0,
        "results": results,
    }
