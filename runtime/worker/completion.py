"""How a completed task is written: run on and written together, leased here, or plain.

A completion records its task's outcome and makes the run's next task ready. It is written in
one of three ways, tried in this order; each falls back to the next. History records the same
events whichever is taken: they differ in who runs the next task and how many commits it costs.

An activity attempt that returned a result (`complete_activity`):

| way   | one commit writes                            | when (all of)                         |
| ----- | -------------------------------------------- | ------------------------------------- |
| fused | the result, and the workflow task the warm   | sticky routing on (`sticky_ttl`); not |
|       | instance ran on it at once, with the         | draining; no worker session; attempt  |
|       | activities it schedules on this queue leased | 1; at least half the attempt's lease  |
|       | here (`complete_activity_with_workflow_task`)| left; the run warm here with a known  |
|       | - no claim, no wake, no workflow slot        | position, same build and workflow     |
|       |                                              | definition; and none of (a) below     |
| eager | the result, and the follow-up workflow task  | a workflow slot free (none while      |
|       | leased to this worker, which starts it       | draining) and the store leased the    |
|       | (`complete_activity_task(eager=...)`)        | follow-up task to us                  |
| plain | the result (`complete_activity_task`); the   | otherwise                             |
|       | follow-up task goes to whoever hears its wake|                                       |

(a) Fused falls back to eager once the instance ran with the result, and the instance is dropped
(the follow-up task replays the run cold), when: the code failed (`replay_failed`); it awaits
local activities that may not run in the attempt's job (unregistered or run in a thread, or the
attempt has a heartbeat timeout) or that do not end within their budget (half the lease left,
and 1 s before the attempt's start-to-close and schedule-to-close timeouts); a command cannot be
written in one statement (`plan.foldable`); or the store wrote nothing (the run moved or is
busy, the lease is stale, a command payload is too large). An oversized result is not a fallback:
the store raises it as a PayloadError.

A workflow task whose code settled (`complete_workflow_task`):

| way   | one commit writes                                   | when                             |
| ----- | --------------------------------------------------- | -------------------------------- |
| eager | the commands, with the activities they schedule on  | activity slots free (up to 8;    |
|       | this queue (registered types) leased here           | none while draining)             |
| plain | the commands; the store writes them in one statement| otherwise                        |
|       | while the run is where the claim left it and they   |                                  |
|       | fold, else in a transaction                         |                                  |

A workflow task completion and a fused write bind the run to this worker for `sticky_ttl` (S4);
a draining worker binds nothing (S8). An eager or plain activity completion leaves the run's
binding as it was.

Local activities write nothing of their own: their records are commands of the workflow task
(or fused write) that ran them (A3). Failed attempts and tasks are not completions: their task
modules write them plainly.

Logs: `activity_completed` with `follow_up="run here, written together"`, `"leased here"` or no
`follow_up`; a fused write also logs `workflow_task_completed` with `with_activity_result=True`.

Slots: an eager write reserves its slots before it writes, hands one to each task it starts, and
gives back every other one however the write ends (`_Reserved`). After any committed workflow
task the instance stays warm (`keep_warm`) unless the run closed or the worker drains (S2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

import structlog

from burrow.codec import Payload
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.replay.instance import Activation, WorkflowInstance
from burrow.store.claims import EagerClaim
from burrow.store.completion.at_position import WorkflowTaskRun
from burrow.store.completion.effects import CompletionOutcome as CompletionOutcome  # re-exported
from burrow.store.completion.plan import foldable
from burrow.store.models import (
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    Lease,
    RunInfo,
    RunPosition,
)
from burrow.worker import local_activities
from burrow.worker.slots import Slots
from burrow.worker.sticky_cache import CachedRun, Eviction
from burrow.workflow import fingerprints

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")
LOCAL_MARGIN_SECONDS = 1.0
"""Local activities run in an attempt's job end this long before its timeouts could end it."""
MAX_EAGER_ACTIVITIES = 8
"""Activities one workflow task completion leases to this worker at most."""

Written = TypeVar("Written", CompletionOutcome, CompletionOutcome | None)


async def complete_activity(
    env: TaskEnv, task: ClaimedActivityTask, result: Payload, *, started: float
) -> None:
    """Write an attempt's result: fused if the run is warm here, else eager, else plain.

    `started` is when the attempt's job began (event-loop time). Store errors reach the caller.
    """
    finished_at = datetime.now(UTC)  # ActivityCompleted's `finished_at`: this worker's clock
    if await _complete_with_workflow_task(env, task, result, started=started, finished=finished_at):
        log.debug("activity_completed", follow_up="run here, written together")
    elif await _complete_leasing_follow_up(env, task, result, finished_at):
        log.debug("activity_completed", follow_up="leased here")
    else:
        log.debug("activity_completed")


async def complete_workflow_task(
    env: TaskEnv, claimed: ClaimedWorkflowTask, commands: list[cmd.Command]
) -> CompletionOutcome:
    """Write a workflow task's commands, leasing the activities they schedule here when free."""
    lease = claimed.lease
    # A draining worker binds nothing more to itself (S8).
    ttl = None if env.is_stopping() else env.sticky_ttl
    return await _with_eager_activities(
        env,
        commands,
        lambda eager: env.while_leased(
            lease,
            lambda: env.store.complete_workflow_task(
                lease=lease,
                commands=commands,
                eager=eager,
                sticky_ttl=ttl,
                position=claimed.position,
            ),
            "complete_workflow_task",
        ),
    )


def keep_warm(
    env: TaskEnv,
    instance: WorkflowInstance,
    outcome: CompletionOutcome,
    *,
    position: RunPosition | None,
    approximate_bytes: int,
    server_epoch: int,
) -> Eviction | None:
    """Keep the instance warm after its completion committed, unless the run ended (S2).

    `position` is where the task found the run, if known; `server_epoch` the store's server
    epoch at its claim (store/server_epochs.py). Returns why a cached entry of the run must go
    instead (the run closed, or the worker drains), else None.
    """
    if outcome.closed_status is not None or instance.closed:
        return Eviction.CLOSED
    if env.is_stopping():
        return Eviction.DRAIN
    if env.sticky_ttl is not None:
        # The completion recorded exactly this instance's commands: the next claim need not
        # return them.
        instance.committed(outcome.last_event_seq)
        entry = CachedRun(
            instance=instance,
            build_id=env.build_id,
            definition=instance.definition,
            approximate_bytes=approximate_bytes,
            position=None if position is None else moved_to(position, outcome),
            server_epoch=server_epoch,
        )
        env.sticky_cache.put(instance.run.run_id, entry)
    return None


def moved_to(position: RunPosition, outcome: CompletionOutcome) -> RunPosition:
    """Where a completion left a run claimed at `position` (the same database clock)."""
    run = dataclasses.replace(
        position.run, last_event_seq=outcome.last_event_seq, last_step_seq=outcome.last_step_seq
    )
    return dataclasses.replace(position, run=run)


# -- eager: slots reserved for what the write leases here -------------------------------------


@dataclass(slots=True)
class _Reserved:
    """Slots taken for tasks a write may lease here: each started task keeps one."""

    count: int

    def hand_over(self) -> None:
        """A task was started on one of the slots: its job gives it back."""
        self.count -= 1


@contextmanager
def _reserved(slots: Slots, wanted: int) -> Iterator[_Reserved]:
    """Reserve up to `wanted` slots; those not handed over go back however the block ends."""
    reserved = _Reserved(slots.reserve(wanted))
    try:
        yield reserved
    finally:
        slots.release(reserved.count)


async def _complete_leasing_follow_up(
    env: TaskEnv, task: ClaimedActivityTask, result: Payload, finished_at: datetime
) -> bool:
    """Complete the attempt, leasing its follow-up workflow task here when a slot is free.

    Returns:
        Whether this worker took the follow-up workflow task (eager) and started it.
    """
    with _reserved(env.workflow_slots, 1) as reserved:
        eager = env.eager_claim(env.app.workflows, 1) if reserved.count else None
        done = await env.while_leased(
            task.lease,
            lambda: env.store.complete_activity_task(
                lease=task.lease, result=dict(result), eager=eager, finished_at=finished_at
            ),
            "complete_activity_task",
        )
        claimed = done.follow_up
        if claimed is None:
            return False
        env.start_workflow_task(claimed)
        reserved.hand_over()
        return True


async def _with_eager_activities(
    env: TaskEnv,
    commands: Sequence[cmd.Command],
    write: Callable[[EagerClaim | None], Awaitable[Written]],
) -> Written:
    """Run `write` with an eager claim of the activities it schedules on our own queue.

    Slots are reserved for them first; the attempts the write leased here are started, and the
    other slots released (all of them when it wrote nothing: None).
    """
    own = [
        c
        for c in commands
        if isinstance(c, cmd.ScheduleActivity)
        and c.queue == env.task_queue
        and c.activity_type in env.app.activities
    ]
    with _reserved(env.activity_slots, min(len(own), MAX_EAGER_ACTIVITIES)) as reserved:
        eager = env.eager_claim(env.app.activities, reserved.count) if reserved.count else None
        outcome = await write(eager)
        for attempt in [] if outcome is None else outcome.eager_activities:
            env.start_activity_task(attempt)
            reserved.hand_over()
    return outcome


# -- fused: run on the warm instance and write together ---------------------------------------
#
# When this worker holds the activity's run warm, it feeds the result to the cached instance
# before writing anything, and writes the attempt's completion with what the code did next in
# one statement (store/completion/at_position.py). The result's event records the time the code
# saw as its current time (`workflow_time`; the database stamps `recorded_at`, D3), so a cold
# replay of the history hands the code the same time and the same result, and gets the same
# commands (S12). Local activities the code awaits next run here
# too, in the attempt's job, and are written with the rest (A3).


async def _complete_with_workflow_task(
    env: TaskEnv, task: ClaimedActivityTask, result: Payload, *, started: float, finished: datetime
) -> bool:
    """Complete the attempt with the workflow task its result wakes, if the run is warm here.

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
    recorded = held.position.run.workflow_definition_fingerprint
    if definition is None or fingerprints.changed(recorded, fingerprints.fingerprint(definition)):
        return False  # S8: a run started on other code is only run after a claim, cold
    # The code runs in the attempt's own job and slot: no workflow slot is taken, so a worker
    # whose workflow slots are all busy (under load, the usual case) still writes both at once.
    entry = env.sticky_cache.take(
        task.run_id,
        build_id=env.build_id,
        definition=definition,
        server_epoch=env.store.server_epochs.epoch,
    )
    if entry is None or entry.position is None:
        return False
    env.sticky_cache.hits += 1  # S10: the warm instance ran this task
    return await _run_and_write(env, task, result, entry, entry.position, started, finished)


async def _run_and_write(
    env: TaskEnv,
    task: ClaimedActivityTask,
    result: Payload,
    entry: CachedRun,
    position: RunPosition,
    started: float,
    finished: datetime,
) -> bool:
    """Feed the result to the taken instance and write; put the instance back if written."""
    instance = entry.instance
    workflow_task_id = str(uuid.uuid4())
    # Never before the last input the code saw, so its time never runs backwards.
    workflow_time = max(_database_now(position), instance.now)
    event = _result_event(task, result, entry, workflow_time, finished, workflow_task_id)
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
            or not foldable(activation.commands)
        ):
            return False  # the follow-up task runs the code again, and reports what it finds
        run = WorkflowTaskRun(
            workflow_task_id=workflow_task_id,
            run=position.run,
            workflow_time=workflow_time,
            commands=activation.commands,
        )
        ttl = env.sticky_ttl
        outcome = await _with_eager_activities(
            env,
            activation.commands,
            lambda eager: env.while_leased(
                task.lease,
                lambda: env.store.complete_activity_with_workflow_task(
                    lease=task.lease,
                    result=dict(result),
                    task=run,
                    eager=eager,
                    sticky_ttl=ttl,
                    finished_at=finished,
                ),
                "complete_activity_with_workflow_task",
            ),
        )
        if outcome is None:
            return False
        evicted = keep_warm(
            env,
            instance,
            outcome,
            position=position,
            approximate_bytes=entry.approximate_bytes + len(result["blob"]),
            server_epoch=entry.server_epoch,
        )
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
    result: Payload,
    entry: CachedRun,
    workflow_time: datetime,
    finished_at: datetime,
    workflow_task_id: str,
) -> HistoryEvent:
    """The ActivityCompleted the statement records, as a claim would hand it to the code.

    Its `recorded_at` is stamped by the database as it writes it; until then the code is
    handed `workflow_time`, which the event records (HistoryEvent.workflow_time, S12).
    """
    completed = ev.ActivityCompleted(
        activity_execution_id=task.activity_execution_id,
        activity_attempt_id=task.activity_attempt_id,
        activity_type=task.activity_type,
        sequence=task.step_seq,
        attempt_number=task.attempt_number,
        result=result["blob"],
        payload_codec=result["codec"],
        finished_at=finished_at,
        workflow_time=workflow_time,
    )
    return HistoryEvent(
        run_id=task.run_id,
        sequence=entry.last_seq + 1,
        event=completed,
        recorded_at=workflow_time,
        workflow_task_id=workflow_task_id,
    )
