"""Activity tasks: run with heartbeats, then complete or fail naming the lease token."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

import structlog
from structlog.contextvars import bound_contextvars

from burrow import activity, payloads
from burrow.codec import Payload
from burrow.errors import ApplicationError, PayloadError
from burrow.failures import failure_of, failure_with_stack, storable
from burrow.protocol.shapes import Failure
from burrow.store import errors as store_errors
from burrow.store.models import ClaimedActivityTask
from burrow.worker import completion
from burrow.worker.outage import FIRST_RETRY_SECONDS, MAX_RETRY_SECONDS, StaleAfterRetry

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")
T = TypeVar("T")
MIN_HEARTBEAT_GAP_SECONDS = 0.2


class AuthorityLost(Exception):
    """The attempt's worker session is held by another worker now (W1): no outcome is reported."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Heartbeats:
    """Coalesces heartbeat requests (from any thread) into throttled store calls.

    A store outage never reaches the activity (issue 25 item 3): its beats are kept, and the
    pump sends the latest once the store is back. The lease keeper renews the lease apart, so
    the attempt rides out an outage within its lease; a lease lost meanwhile is learned (and
    the attempt cancelled) as soon as the store answers again.
    """

    def __init__(
        self, env: TaskEnv, task: ClaimedActivityTask, runner: asyncio.Task[object] | None
    ):
        self.env = env
        self.task = task
        self.runner = runner
        self.details: object = None
        self.pending = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.ctx: activity.ActivityContext | None = None
        self.authority_lost: str | None = None
        self.unavailable = False
        """The last store call met an outage: beats wait for the pump until one lands."""

    def request(self, details: object) -> None:
        self.details = details
        self.loop.call_soon_threadsafe(self.pending.set)

    async def send(self, details: object) -> None:
        """`aheartbeat()`: send now, or in an outage leave the beat to the pump and return."""
        encoded = _encoded(details)  # bad details raise here, into the activity
        self.details = details
        if not self.unavailable:
            try:
                await self._send(encoded)
                return
            except store_errors.StoreUnavailable as exc:
                self.unavailable = True
                log.warning("activity_heartbeat_unavailable", error=str(exc))
        self.pending.set()

    async def _send(self, encoded: Payload | None) -> None:
        result = await self.env.store.heartbeat_activity_task(
            lease=self.task.lease,
            details=None if encoded is None else dict(encoded),
            lease_duration=self.env.lease,
        )
        self.unavailable = False
        if result.cancel_requested and self.ctx is not None and not self.ctx.cancel_requested:
            self.ctx.cancel_requested = True
            if self.runner is not None:
                self.runner.cancel()  # W8: cancellation reaches the activity through its heartbeat
        if not result.can_continue:
            self._lose_authority(result.reason or "session_lost")

    def _lose_authority(self, reason: str) -> None:
        """W1: another worker holds the attempt's session now; stop and report nothing."""
        if self.authority_lost is None:
            self.authority_lost = reason
            if self.runner is not None:
                self.runner.cancel()

    async def pump(self) -> None:
        gap = MIN_HEARTBEAT_GAP_SECONDS
        if self.task.heartbeat_seconds:
            gap = max(min(self.task.heartbeat_seconds / 3, 1.0), 0.05)
        retry = FIRST_RETRY_SECONDS
        while True:
            await self.pending.wait()
            self.pending.clear()
            pause = gap
            try:
                await self._send(_encoded(self.details))
                retry = FIRST_RETRY_SECONDS
            except store_errors.StaleLease:
                if self.runner is not None:
                    self.runner.cancel()
                return
            except store_errors.StoreUnavailable as exc:
                self.unavailable = True
                self.pending.set()  # the latest details are sent once the store is back
                pause = max(gap, retry)
                retry = min(retry * 2, MAX_RETRY_SECONDS)
                log.warning(
                    "activity_heartbeat_unavailable",
                    error=str(exc),
                    retry_in_seconds=round(pause, 3),
                )
            await asyncio.sleep(pause)


def _encoded(details: object) -> Payload | None:
    if details is None:
        return None
    return payloads.encode_value(details, what="heartbeat details")


async def process(env: TaskEnv, task: ClaimedActivityTask) -> None:
    """Run one attempt and record its outcome once (fenced by the lease)."""
    started = asyncio.get_running_loop().time()
    with bound_contextvars(
        namespace=task.namespace,
        queue=task.queue,
        run_id=task.run_id,
        task_id=task.lease.task_id,
        worker_id=env.worker_id,
        activity_type=task.activity_type,
        attempt=task.attempt_number,
    ):
        try:
            result = await _run(env, task)
        except AuthorityLost as lost:
            # The attempt keeps its own lease (W7): it expires and is retried by the repair.
            log.warning(
                "activity_lease_authority_lost",
                reason=lost.reason,
                namespace=task.namespace,
                queue=task.queue,
                run_id=task.run_id,
                task_id=task.lease.task_id,
                worker_id=env.worker_id,
            )
            return
        except asyncio.CancelledError:
            if env.is_stopping():
                shutdown = Failure(
                    exception_type="WorkerShutdown", message="worker stopped during the attempt"
                )
                await _report(env, task, _fail(env, task, shutdown))
                raise
            cancelled = Failure(exception_type="CancelledError", message="activity cancelled")
            await _report(env, task, _fail(env, task, cancelled))
            return
        except ApplicationError as exc:
            # Type, message, non_retryable and details reach the workflow's ActivityError.
            await _report(env, task, _fail(env, task, failure_of(exc)))
            return
        except Exception as exc:
            failure = failure_with_stack(exc, non_retryable=isinstance(exc, PayloadError))
            await _report(env, task, _fail(env, task, failure))
            return
        await _report(
            env,
            task,
            completion.complete_activity(env, task, result, started=started),
            recorded="activity_completion_recorded",
        )


async def _run(env: TaskEnv, task: ClaimedActivityTask) -> Payload:
    definition = env.app.activities[task.activity_type]
    args = payloads.decode_args(task.arguments, definition.arg_types)
    details = (
        None if task.heartbeat_details is None else payloads.decode_value(task.heartbeat_details)
    )
    current = asyncio.current_task()
    beats = _Heartbeats(env, task, current if definition.is_async else None)
    ctx = activity.ActivityContext(
        activity_type=task.activity_type,
        activity_execution_id=task.activity_execution_id,
        activity_attempt_id=task.activity_attempt_id,
        attempt_number=task.attempt_number,
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        namespace=task.namespace,
        task_queue=task.queue,
        heartbeat_details=details,
        _heartbeat=beats.send,
        _request_heartbeat=beats.request,
    )
    beats.ctx = ctx
    pump = asyncio.create_task(beats.pump())
    token = activity._set_context(ctx)
    try:
        if definition.is_async:
            value = await _with_timeout(definition.fn(*args), task.start_to_close_seconds)
        else:
            call = contextvars.copy_context().run
            value = await asyncio.get_running_loop().run_in_executor(
                env.executor, call, definition.fn, *args
            )
    except asyncio.CancelledError:
        if beats.authority_lost is not None:
            raise AuthorityLost(beats.authority_lost) from None
        raise
    finally:
        activity._current.reset(token)
        pump.cancel()
    if beats.authority_lost is not None:
        raise AuthorityLost(beats.authority_lost)
    return payloads.encode_value(
        value, limit=env.max_payload_bytes, what=f"activity {task.activity_type} result"
    )


async def _with_timeout(coro: Awaitable[T], seconds: float | None) -> T:
    if seconds is None:
        return await coro
    return await asyncio.wait_for(coro, seconds)


async def _fail(env: TaskEnv, task: ClaimedActivityTask, failure: Failure) -> None:
    if failure.exception_type == "TimeoutError":
        failure = failure.model_copy(update={"timeout_kind": "start_to_close"})
    failed = await env.while_leased(
        task.lease,
        lambda: env.store.fail_activity_task(lease=task.lease, failure=failure),
        "fail_activity_task",
    )
    log.warning(
        "activity_failed",
        retried=failed.retried,
        exception_type=failure.exception_type,
        message=failure.message,
    )


async def _report(
    env: TaskEnv,
    task: ClaimedActivityTask,
    write: Awaitable[None],
    recorded: str = "activity_failure_recorded",
) -> None:
    """Write the attempt's outcome once; a refusal is logged, an unstorable result fails it.

    `recorded` is logged when the store refuses the write as `already_recorded`: this lease's
    outcome is written, by a try whose commit reply was lost.
    """
    try:
        await write
    except store_errors.StaleLease as exc:
        if exc.reason == store_errors.LeaseRefusal.ALREADY_RECORDED:
            log.info(recorded, reason="recorded by a try whose commit reply was lost")
        elif isinstance(exc, StaleAfterRetry):
            log.info(
                "activity_outcome_unconfirmed",
                reason="a retry after a lost commit reply was refused: the lease expired"
                " meanwhile, or that try committed",
            )
        else:
            log.warning("activity_outcome_discarded", reason="stale lease")
    except PayloadError as exc:
        failure = Failure(
            exception_type=type(exc).__name__, message=storable(str(exc)), non_retryable=True
        )
        await _report(env, task, _fail(env, task, failure))
