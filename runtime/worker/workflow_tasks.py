"""Workflow tasks: claim → replay the run from its whole history → one store completion call."""

from __future__ import annotations

import contextlib
import traceback
from typing import TYPE_CHECKING, Any

import structlog
from structlog.contextvars import bound_contextvars

from burrow import payloads
from burrow.replay import commands as cmd
from burrow.replay.instance import RunContext, WorkflowInstance, failure_of
from burrow.store import errors as store_errors
from burrow.store.models import ClaimedQueryTask, ClaimedWorkflowTask, Lease, RunInfo
from burrow.store.tasks import CompletionOutcome

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")


def build_instance(env: TaskEnv, run: RunInfo) -> WorkflowInstance:
    """A fresh instance for a cold replay of the run."""
    return WorkflowInstance(
        definition=env.app.workflows[run.workflow_type],
        run=RunContext(
            run_id=run.run_id,
            workflow_id=run.workflow_id,
            workflow_type=run.workflow_type,
            namespace=run.namespace,
            task_queue=run.task_queue,
            input=run.input,
        ),
        known_activities=env.app.activities.keys(),
        max_payload_bytes=env.max_payload_bytes,
    )


async def process(env: TaskEnv, claimed: ClaimedWorkflowTask) -> CompletionOutcome | None:
    """Replay the run, persist the new commands, or fail the task (retried, visible)."""
    lease = claimed.lease
    with bound_contextvars(
        namespace=claimed.run.namespace,
        queue=claimed.run.task_queue,
        run_id=claimed.run.run_id,
        task_id=lease.task_id,
        worker_id=env.worker_id,
    ):
        instance = build_instance(env, claimed.run)
        activation = instance.activate(claimed.history)
        try:
            if activation.failure is not None:
                failure = _task_failure(activation.failure)
                await env.store.fail_workflow_task(lease=lease, failure=failure)
                log.error(
                    "workflow_task_failed",
                    attempt=claimed.attempt,
                    exception_type=failure["exception_type"],
                    message=failure["message"],
                )
                return None
            outcome = await _complete(env, lease, activation.commands)
        except store_errors.StaleLease:
            log.warning("workflow_task_lease_lost", attempt=claimed.attempt)
            return None
        except store_errors.InvalidCommands as exc:
            await _fail_quietly(env, claimed, exc)
            return None
        log.debug(
            "workflow_task_completed",
            commands=[c.type for c in activation.commands],
            replay_mode="cold_replay",
            history_events=len(claimed.history),
        )
        return outcome


MAX_EAGER_ACTIVITIES = 8


async def _complete(env: TaskEnv, lease: Lease, commands: list[cmd.Command]) -> CompletionOutcome:
    """Complete, taking activities scheduled on our own queue eagerly when slots are free."""
    own = [
        c
        for c in commands
        if isinstance(c, cmd.ScheduleActivity)
        and c.queue == env.task_queue
        and c.activity_type in env.app.activities
    ]
    reserved = env.activity_slots.reserve(min(len(own), MAX_EAGER_ACTIVITIES))
    eager = env.eager_claim(env.app.activities, reserved) if reserved else None
    try:
        outcome = await env.store.complete_workflow_task(
            lease=lease, commands=commands, eager=eager
        )
    except BaseException:
        env.activity_slots.release(reserved)
        raise
    for task in outcome.eager_activities:
        env.start_activity_task(task)
    env.activity_slots.release(reserved - len(outcome.eager_activities))
    return outcome


def _task_failure(exc: BaseException) -> dict[str, Any]:
    failure = failure_of(exc)
    failure["stack"] = "".join(traceback.format_exception(exc))[-8000:]
    return failure


async def _fail_quietly(env: TaskEnv, claimed: ClaimedWorkflowTask, exc: Exception) -> None:
    with contextlib.suppress(store_errors.StaleLease):
        await env.store.fail_workflow_task(lease=claimed.lease, failure=_task_failure(exc))
    log.error("workflow_task_refused", message=str(exc))


async def answer_query(env: TaskEnv, claimed: ClaimedQueryTask) -> None:
    """Replay the run (read-only) and store the query handler's answer."""
    instance = build_instance(env, claimed.run)
    activation = instance.activate(claimed.history)
    result, failure = None, None
    try:
        if activation.failure is not None:
            raise activation.failure
        value = instance.query(claimed.query_name, claimed.arguments)
        result = dict(payloads.encode_value(value, what="query result"))
    except Exception as exc:
        failure = failure_of(exc)
    with contextlib.suppress(store_errors.StaleLease):
        await env.store.answer_query_task(lease=claimed.lease, result=result, failure=failure)
