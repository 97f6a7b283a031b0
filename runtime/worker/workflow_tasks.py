"""Workflow tasks: claim → resume the warm instance or replay the whole history → complete."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from structlog.contextvars import bound_contextvars

from burrow import codec, payloads
from burrow.failures import failure_of, stack_of
from burrow.protocol.shapes import Failure, JsonObject
from burrow.replay.instance import Activation, RunContext, WorkflowInstance
from burrow.store import errors as store_errors
from burrow.store.models import (
    ClaimedQueryTask,
    ClaimedWorkflowTask,
    HistoryEvent,
    ReplayMode,
    RunInfo,
    RunPosition,
)
from burrow.store.queries import UPDATE_VALIDATION
from burrow.update_validation import REJECTED, WORKER_FAILED
from burrow.worker import cold_replay, completion, local_activities
from burrow.worker.completion import CompletionOutcome
from burrow.worker.outage import StaleAfterRetry
from burrow.worker.sticky_cache import Eviction
from burrow.workflow import fingerprints

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")


def run_context(run: RunInfo) -> RunContext:
    """The replay context of a stored run."""
    return RunContext(
        run_id=run.run_id,
        workflow_id=run.workflow_id,
        workflow_type=run.workflow_type,
        namespace=run.namespace,
        task_queue=run.task_queue,
        input=run.input,
    )


def build_instance(env: TaskEnv, run: RunInfo) -> WorkflowInstance:
    """A fresh instance for a cold replay of the run."""
    return WorkflowInstance(
        definition=env.app.workflows[run.workflow_type],
        run=run_context(run),
        known_activities=env.app.activities.keys(),
        max_payload_bytes=env.max_payload_bytes,
    )


async def process(env: TaskEnv, claimed: ClaimedWorkflowTask) -> CompletionOutcome | None:
    """Replay the run (warm if cached), persist the new commands, or fail the task (retried)."""
    lease = claimed.lease
    with bound_contextvars(
        namespace=claimed.run.namespace,
        queue=claimed.run.task_queue,
        run_id=claimed.run.run_id,
        task_id=lease.task_id,
        worker_id=env.worker_id,
    ):
        replay = await _replay_source(env, claimed)
        activation = replay.activation
        try:
            # A3: local activities the code awaits run here, inside this task, before it commits.
            activation = await local_activities.run_pending(
                env, claimed, replay.instance, activation
            )
            if activation.failure is not None:
                failure = _task_failure(activation.failure)
                await env.while_leased(
                    lease,
                    lambda: env.store.fail_workflow_task(lease=lease, failure=failure),
                    "fail_workflow_task",
                )
                log.error(
                    "workflow_task_failed",
                    attempt=claimed.attempt,
                    exception_type=failure.exception_type,
                    message=failure.message,
                )
                return None
            outcome = await completion.complete_workflow_task(env, claimed, activation.commands)
            replay.keep_if_open(env, outcome, claimed.position)
        except store_errors.StaleLease as exc:
            _log_refusal(exc, claimed.attempt, failed=activation.failure is not None)
            return None
        except store_errors.InvalidCommands as exc:
            await _fail_quietly(env, claimed, exc)
            return None
        finally:
            if replay.warm and not replay.kept:
                reason = Eviction.NOT_COMMITTED
                if activation.failure is not None:
                    reason = Eviction.REPLAY_FAILED  # nondeterminism or an error in the code
                env.sticky_cache.discard(claimed.run.run_id, reason)
        log.debug(
            "workflow_task_completed",
            commands=[c.type for c in activation.commands],
            replay_mode=claimed.sticky.replay_mode,
            warm=replay.warm,
            history_events=replay.events,
        )
        return outcome


@dataclass(slots=True)
class _Replay:
    """The instance a task runs on, its activation, and whether it came from the cache."""

    instance: WorkflowInstance
    activation: Activation
    events: int
    """How many history events the instance was fed."""
    warm: bool
    approximate_bytes: int
    server_epoch: int
    kept: bool = False

    def keep_if_open(
        self, env: TaskEnv, outcome: CompletionOutcome, claimed: RunPosition | None
    ) -> None:
        """Keep the instance warm after a committed completion, unless the run ended (S2).

        `claimed` is where the task's claim found the run, if the claim said.
        """
        evicted = completion.keep_warm(
            env,
            self.instance,
            outcome,
            position=claimed,
            approximate_bytes=self.approximate_bytes,
            server_epoch=self.server_epoch,
        )
        if evicted is not None and self.warm:
            env.sticky_cache.discard(self.instance.run.run_id, evicted)
        self.kept = True


async def _replay_source(env: TaskEnv, claimed: ClaimedWorkflowTask) -> _Replay:
    """The warm instance if it continues exactly from its last sequence, else a cold replay (S6).

    The instance comes back activated: a warm one with the claimed tail (the rest of it read if
    the claim brought only a first page); a cold one with the whole history, read and fed page
    by page (cold_replay.py), from the first event if the claim returned only its tail.
    """
    cache, run = env.sticky_cache, claimed.run
    epoch = env.store.server_epochs.epoch  # as of the claim: what a kept entry will stand on
    entry = None
    changed = definition_changed(env, run)
    if changed:  # S8: never resume code the run was not started on
        cache.evict(run.run_id, Eviction.DEFINITION_CHANGED)
    elif env.sticky_ttl is not None:
        entry = cache.take(
            run.run_id,
            build_id=env.build_id,
            definition=env.app.workflows[run.workflow_type],
            server_epoch=epoch,
        )
    if entry is not None:
        if claimed.history_after <= entry.last_seq and _continues(claimed.history, entry.last_seq):
            cache.hits += 1
            size = entry.approximate_bytes + claimed.history_bytes
            tail = await cold_replay.claimed_history(env, claimed)
            activation = entry.instance.activate(tail)
            return _Replay(entry.instance, activation, len(tail), True, size, epoch)
        cache.discard(run.run_id, Eviction.GAP)
    if changed or claimed.sticky.replay_mode is ReplayMode.FORCED_COLD_REPLAY:
        cache.forced_cold_replays += 1
    elif claimed.sticky.replay_mode is ReplayMode.STICKY_HIT_EXPECTED:
        cache.misses += 1
    cold = await cold_replay.replay_cold(env, claimed, lambda: build_instance(env, run))
    return _Replay(cold.instance, cold.activation, cold.events, False, cold.history_bytes, epoch)


def definition_changed(env: TaskEnv, run: RunInfo) -> bool:
    """Whether this worker's definition of the run's type differs from the one it started on.

    Logged as `workflow_definition_changed` (S8); the caller replays the run cold.
    """
    current = fingerprints.fingerprint(env.app.workflows[run.workflow_type])
    recorded = run.workflow_definition_fingerprint
    if not fingerprints.changed(recorded, current):
        return False
    log.warning(
        "workflow_definition_changed",
        workflow_type=run.workflow_type,
        recorded_fingerprint=recorded,
        worker_fingerprint=current,
        replay_mode=ReplayMode.FORCED_COLD_REPLAY.value,
    )
    return True


def _continues(history: Sequence[HistoryEvent], last_seq: int) -> bool:
    """Whether the events after `last_seq` start right after it (no gap)."""
    for event in history:
        if event.sequence > last_seq:
            return event.sequence == last_seq + 1
    return True


def _log_refusal(exc: store_errors.StaleLease, attempt: int, *, failed: bool) -> None:
    """Why the task's outcome was refused: recorded already (a lost reply), or a lost lease."""
    if exc.reason == store_errors.LeaseRefusal.ALREADY_RECORDED:
        what = "failure" if failed else "completion"
        log.info(
            f"workflow_task_{what}_recorded",
            attempt=attempt,
            reason="recorded by a try whose commit reply was lost",
        )
    elif isinstance(exc, StaleAfterRetry):
        log.info(
            "workflow_task_outcome_unconfirmed",
            attempt=attempt,
            reason="a retry after a lost commit reply was refused: the lease expired meanwhile,"
            " or that try committed",
        )
    else:
        log.warning("workflow_task_lease_lost", attempt=attempt)


def _task_failure(exc: BaseException) -> Failure:
    return failure_of(exc).model_copy(update={"stack": stack_of(exc)})


async def _fail_quietly(env: TaskEnv, claimed: ClaimedWorkflowTask, exc: Exception) -> None:
    with contextlib.suppress(store_errors.StaleLease):
        await env.store.fail_workflow_task(lease=claimed.lease, failure=_task_failure(exc))
    log.error("workflow_task_refused", message=str(exc))


async def answer_query(env: TaskEnv, claimed: ClaimedQueryTask) -> None:
    """Replay the run (read-only) and store the query handler's answer.

    An update validation task is answered the same way: approved when the update's validator
    returns, rejected with what it raised (PROTOCOL.md 6.5).
    """
    instance = build_instance(env, claimed.run)
    activation = instance.activate(claimed.history)
    result: JsonObject | None = None
    failure: Failure | None = None
    validation = claimed.task_kind == UPDATE_VALIDATION
    try:
        if activation.failure is not None:
            raise activation.failure
    except Exception as exc:
        reason = WORKER_FAILED if validation else None
        failure = failure_of(exc).model_copy(update={"reason": reason} if reason else {})
    else:
        try:
            if validation:
                instance.validate_update(claimed.query_name, claimed.arguments)
                result = {"approved": True}
            else:
                value = instance.query(claimed.query_name, claimed.arguments)
                result = codec.as_object(payloads.encode_value(value, what="query result"))
        except Exception as exc:
            failure = failure_of(exc)
            if validation:
                failure = failure.model_copy(update={"reason": REJECTED})
    with contextlib.suppress(store_errors.StaleLease):
        await env.store.answer_query_task(
            lease=claimed.lease,
            result=result,
            failure=failure,
        )
