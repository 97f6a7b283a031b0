"""An activity's result and the workflow task it wakes, run here and written together.

When this worker holds the activity's run warm, it feeds the result to the cached instance
before writing anything, and writes the attempt's completion with what the code did next in one
statement (store/fused.py): one commit instead of two, and no claim of a follow-up task. The
result is recorded at the time the code saw as its current time, so a cold replay of the
history hands the code the same time and the same result, and gets the same commands (S12).
Local activities the code awaits next run here too, in the attempt's job, and are written with
the rest (A3); when they may not, or take too long, the follow-up task runs them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import Activation, WorkflowInstance
from burrow.store import tasks
from burrow.store.fused import WorkflowTaskRun
from burrow.store.models import ClaimedActivityTask, Lease, RunInfo, RunPosition
from burrow.worker import local_activities
from burrow.worker.sticky_cache import CachedRun, Eviction
from burrow.worker.workflow_tasks import moved_to, with_eager_activities

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")
LOCAL_MARGIN_SECONDS = 1.0
"""Local activities run here end this long before the attempt's timeouts could end it."""


async def complete(
    env: TaskEnv, task: ClaimedActivityTask, result: dict[str, Any], *, started: float
) -> bool:
    """Complete the attempt with the workflow task its result wakes, if the run is warm here.

    `started` is when the attempt's job began (event-loop time): local activities the code runs
    next must be done well within the attempt's start-to-close timeout.

    Returns:
        True when both were written; False when nothing was, and the caller completes the
        attempt on its own (if the instance ran and was not written, it is dropped, and the
        next task of the run replays it cold).
    """
    if env.sticky_ttl is None or env.is_stopping() or task.worker_session is not None:
        return False
    # The code runs under the attempt's lease: only with at least half a lease left. A retried
    # attempt (its lease may have run out here last time) is written on its own.
    expires = env.lease_expires_at(task.lease.task_id)
    left = None if expires is None else expires - asyncio.get_running_loop().time()
    if task.attempt_number > 1 or left is None or left < env.lease.total_seconds() / 2:
        return False
    held = env.sticky_cache.get(task.run_id)
    if held is None or held.position is None:
        return False
    definition = env.app.workflows.get(held.position.run.workflow_type)
    if definition is None:
        return False
    # The code runs in the attempt's own job and slot: no workflow slot is taken, so a worker
    # whose workflow slots are all busy (under load, the usual case) still writes both at once.
    entry = env.sticky_cache.take(task.run_id, build_id=env.build_id, definition=definition)
    if entry is None or entry.position is None:
        return False
    env.sticky_cache.hits += 1  # S10: the warm instance ran this task
    return await _run_and_write(env, task, result, entry, entry.position, started)


async def _run_and_write(
    env: TaskEnv,
    task: ClaimedActivityTask,
    result: dict[str, Any],
    entry: CachedRun,
    position: RunPosition,
    started: float,
) -> bool:
    """Feed the result to the taken instance and write; put the instance back if written."""
    instance = entry.instance
    workflow_task_id = str(uuid.uuid4())
    # Never before the last input the code saw, so its time never runs backwards.
    recorded_at = max(_database_now(position), instance.now)
    event = _result_event(task, result, entry, recorded_at, workflow_task_id)
    activation = instance.activate([event])
    evicted: Eviction | None = Eviction.NOT_COMMITTED
    try:
        if activation.failure is None and activation.local_activities:
            ran = await _run_local(env, task, position, instance, activation, started)
            if ran is None:
                return False  # the follow-up task runs the code, and them, again
            activation = ran
        if activation.failure is not None:
            evicted = Eviction.REPLAY_FAILED  # nondeterminism or an error in the code
        if (
            activation.failure is not None
            or activation.local_activities
            or not tasks.foldable(activation.commands)
        ):
            return False  # the follow-up task runs the code again, and reports what it finds
        run = WorkflowTaskRun(
            workflow_task_id=workflow_task_id,
            run=position.run,
            recorded_at=recorded_at,
            commands=activation.commands,
        )
        ttl = env.sticky_ttl
        outcome = await with_eager_activities(
            env,
            activation.commands,
            lambda eager: env.while_leased(
                task.lease,
                lambda: env.store.complete_activity_with_workflow_task(
                    lease=task.lease, result=result, task=run, eager=eager, sticky_ttl=ttl
                ),
                "complete_activity_with_workflow_task",
            ),
        )
        if outcome is None:
            return False
        if outcome.closed_status is not None or instance.closed:
            evicted = Eviction.CLOSED
        elif env.is_stopping():
            evicted = Eviction.DRAIN
        else:
            instance.committed(outcome.last_event_seq)
            entry.position = moved_to(position, outcome)
            entry.approximate_bytes += len(result.get("blob", ""))
            env.sticky_cache.put(task.run_id, entry)
            evicted = None
        log.debug(
            "workflow_task_completed",
            with_activity_result=True,
            workflow_task_id=workflow_task_id,
            commands=[c.type for c in activation.commands],
        )
        return True
    finally:
        if evicted is not None:
            env.sticky_cache.discard(task.run_id, evicted)


@dataclass(frozen=True, slots=True)
class _AttemptOwner:
    """The attempt's lease and the run: what local activities run here read of their task."""

    lease: Lease
    run: RunInfo


async def _run_local(
    env: TaskEnv,
    task: ClaimedActivityTask,
    position: RunPosition,
    instance: WorkflowInstance,
    activation: Activation,
    started: float,
) -> Activation | None:
    """Run the local activities the code asks for next, here in the attempt's job (A3).

    The attempt's lease (renewed while its job runs) stands in for the workflow task's. They
    must end within half the lease left and well before the attempt's start-to-close and
    schedule-to-close timeouts, or they are stopped and the follow-up task runs them again (at
    least once). None when they may not run here: a thread cannot be stopped at that point, and
    an attempt with a heartbeat timeout would time out meanwhile.
    """
    for request in activation.local_activities:
        definition = env.app.activities.get(request.activity_type)
        if definition is None or not definition.is_async:
            return None
    if task.heartbeat_seconds is not None:
        return None
    loop = asyncio.get_running_loop()
    expires = env.lease_expires_at(task.lease.task_id)
    if expires is None:
        return None
    budget = (expires - loop.time()) / 2
    if task.start_to_close_seconds is not None:
        deadline = started + task.start_to_close_seconds - LOCAL_MARGIN_SECONDS
        budget = min(budget, deadline - loop.time())
    if task.schedule_to_close_deadline is not None:
        left = task.schedule_to_close_deadline - _database_now(position)
        budget = min(budget, left.total_seconds() - LOCAL_MARGIN_SECONDS)
    if budget <= 0:
        return None
    owner = _AttemptOwner(lease=task.lease, run=position.run)
    try:
        async with asyncio.timeout(budget):
            return await local_activities.run_pending(
                env, owner, instance, activation, renews=False
            )
    except TimeoutError:
        return None


def _database_now(position: RunPosition) -> datetime:
    """The database's clock, estimated from the claim that last positioned the run."""
    elapsed = timedelta(seconds=max(time.monotonic() - position.claimed_monotonic, 0.0))
    return position.claimed_at + elapsed


def _result_event(
    task: ClaimedActivityTask,
    result: dict[str, Any],
    entry: CachedRun,
    recorded_at: datetime,
    workflow_task_id: str,
) -> HistoryEvent:
    """The ActivityCompleted the statement records, as a claim would hand it to the code."""
    completed = ev.ActivityCompleted(
        activity_execution_id=task.activity_execution_id,
        activity_attempt_id=task.activity_attempt_id,
        activity_type=task.activity_type,
        sequence=task.step_seq,
        attempt_number=task.attempt_number,
        result=result["blob"],
        payload_codec=result["codec"],
    )
    return HistoryEvent(
        run_id=task.run_id,
        sequence=entry.last_seq + 1,
        event=completed,
        recorded_at=recorded_at,
        workflow_task_id=workflow_task_id,
    )
