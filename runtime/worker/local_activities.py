"""Local activities: run inside the workflow task that awaits them, retried in-process (A3).

The workflow task's lease is the only lease: each heartbeat of a local attempt renews it and
learns whether the run was asked to cancel. Nothing is written until the workflow task
completes; the whole execution then goes into history with it as one `record_local_activity`
command (at least once: a crash before that runs it again on the next claim).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog
from structlog.contextvars import bound_contextvars

from burrow import activity, codec, payloads
from burrow.codec import Payload
from burrow.errors import ApplicationError, PayloadError
from burrow.failures import failure_of, failure_with_stack
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import Failure, JsonObject
from burrow.replay.instance import Activation, LocalActivityRequest, WorkflowInstance
from burrow.store import errors as store_errors
from burrow.store.activities import backoff_seconds, max_attempts
from burrow.store.models import Lease, RunInfo

if TYPE_CHECKING:
    from burrow.worker.env import TaskEnv

log = structlog.get_logger("burrow.worker")
MIN_HEARTBEAT_GAP_SECONDS = 0.2


class TaskOwner(Protocol):
    """What local activities read of the task they run in: its lease and its run."""

    @property
    def lease(self) -> Lease:
        """The lease the task runs under."""
        ...

    @property
    def run(self) -> RunInfo:
        """The run the task belongs to."""
        ...


async def run_pending(
    env: TaskEnv,
    claimed: TaskOwner,
    instance: WorkflowInstance,
    activation: Activation,
    *,
    renews: bool = True,
) -> Activation:
    """Run the local activities the code waits for, hand their records back, until it settles.

    `renews=False` when the lease they run under is kept by other means (an activity attempt's
    job: worker/completion.py): their heartbeats are then recorded, not sent.

    Raises:
        StaleLease: the workflow task's lease was lost meanwhile; nothing may be committed.
    """
    while activation.local_activities and activation.failure is None:
        lease = _TaskLease(env, claimed, instance, renews=renews)
        requests = activation.local_activities
        if len(requests) == 1:
            # One awaited step at a time is the common shape: no task set to run and watch.
            records = [await _execute(lease, requests[0])]
        else:
            records = await _execute_together(lease, requests)
        activation = instance.resolve_local_activities(records)
    return activation


async def _execute_together(
    lease: _TaskLease, requests: list[LocalActivityRequest]
) -> list[cmd.RecordLocalActivity]:
    """Run the executions the code awaits at once (e.g. gathered) concurrently; their records."""
    jobs = [asyncio.create_task(_execute(lease, request)) for request in requests]
    try:
        await asyncio.wait(jobs, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for job in jobs:
            job.cancel()  # one failed (a lost lease) or the task itself is being cancelled
        settled = await asyncio.gather(*jobs, return_exceptions=True)
    records = [r for r in settled if isinstance(r, cmd.RecordLocalActivity)]
    failures = [r for r in settled if not isinstance(r, cmd.RecordLocalActivity)]
    if failures:
        raise failures[0]
    return records


@dataclass(slots=True)
class _TaskLease:
    """The workflow task's lease, shared by the local activities it runs."""

    env: TaskEnv
    claimed: TaskOwner
    instance: WorkflowInstance
    renews: bool = True
    lost: bool = False

    async def renew(self) -> bool:
        """Renew the lease; True when the run was asked to cancel and the code has not seen it.

        Raises:
            StaleLease: the lease is no longer ours.
        """
        if not self.renews:
            return False
        try:
            result = await self.env.store.heartbeat_workflow_task(
                lease=self.claimed.lease, lease_duration=self.env.lease
            )
        except store_errors.StaleLease:
            self.lost = True
            raise
        return result.cancel_requested and not self.instance.cancel_requested


class _Timeout(Exception):
    """An attempt ran past one of its timeouts (`kind` names which)."""

    def __init__(self, kind: cmd.TimeoutKind) -> None:
        super().__init__(f"local activity {kind} timeout")
        self.kind = kind


class _Cancelled(Exception):
    """The attempt was cancelled because its run was asked to cancel."""


@dataclass(slots=True)
class _Beats:
    """Heartbeats of one attempt: recorded, throttled into lease renewals, watched for silence."""

    lease: _TaskLease
    started: float
    max_payload_bytes: int
    gap: float
    recorded: list[cmd.LocalHeartbeat] = field(default_factory=list)
    last_beat: float = 0.0
    details: object = None
    work: asyncio.Future[object] | None = None
    ctx: activity.ActivityContext | None = None
    cancelled: bool = False
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    # The throttled renewal of thread heartbeats: started by the first one, as most attempts
    # never heartbeat.
    pending: asyncio.Event | None = None
    pump: asyncio.Task[None] | None = None
    stopped: bool = False

    def request(self, details: object) -> None:
        """From any thread: note the heartbeat now, record and renew soon."""
        self.details = details
        self.last_beat = time.monotonic()
        self.loop.call_soon_threadsafe(self._wake_pump)

    async def send(self, details: object) -> None:
        """From async activity code: record and renew now."""
        self.details = details
        self.last_beat = time.monotonic()
        await self._flush()

    def stop(self) -> None:
        """The attempt is over: later heartbeats from its thread renew nothing."""
        self.stopped = True
        if self.pump is not None:
            self.pump.cancel()

    def _wake_pump(self) -> None:
        if self.stopped:
            return
        if self.pending is None:
            self.pending = asyncio.Event()
            self.pump = self.loop.create_task(self._run_pump(self.pending))
        self.pending.set()

    async def _run_pump(self, pending: asyncio.Event) -> None:
        while True:
            await pending.wait()
            pending.clear()
            await self._flush()
            await asyncio.sleep(self.gap)

    async def _flush(self) -> None:
        self._record()
        try:
            cancel = await self.lease.renew()
        except store_errors.StaleLease:
            self._cancel_work()
            return
        except store_errors.StoreError as exc:  # unavailable for now: the next one may pass
            log.warning("local_activity_heartbeat_unavailable", error=str(exc))
            return
        if cancel and not self.cancelled:
            # A3, W8: the run's cancellation reaches the attempt through its heartbeat.
            self.cancelled = True
            if self.ctx is not None:
                self.ctx.cancel_requested = True
            self._cancel_work()

    def _record(self) -> None:
        details = None
        if self.details is not None:
            try:
                details = payloads.encode_value(
                    self.details, limit=self.max_payload_bytes, what="heartbeat details"
                )
            except PayloadError as exc:  # the heartbeat still counts; its details cannot be kept
                log.warning("local_activity_heartbeat_details_dropped", message=str(exc))
        beat = cmd.LocalHeartbeat(
            elapsed_ms=int((self.last_beat - self.started) * 1000), details=details
        )
        if len(self.recorded) >= cmd.MAX_LOCAL_HEARTBEATS:
            self.recorded[-1] = beat  # keep the first ones and the latest
        else:
            self.recorded.append(beat)

    def _cancel_work(self) -> None:
        if self.work is not None:
            self.work.cancel()  # an async attempt stops; a thread only sees the context flag


@dataclass(slots=True)
class _Execution:
    """The attempts of one local execution so far."""

    request: LocalActivityRequest
    attempts: list[cmd.LocalAttempt] = field(default_factory=list)
    last_details: object = None
    deadline: float | None = None


async def _execute(lease: _TaskLease, request: LocalActivityRequest) -> cmd.RecordLocalActivity:
    """Run attempts until one succeeds or the policy ends it; the execution's record."""
    options = request.options
    execution = _Execution(request)
    if options.schedule_to_close_timeout is not None:
        execution.deadline = time.monotonic() + options.schedule_to_close_timeout
    while True:
        number = len(execution.attempts) + 1
        with bound_contextvars(
            activity_type=request.activity_type, attempt=number, execution_mode="local"
        ):
            attempt, result, failure = await _attempt(lease, execution, number)
            backoff = None if result is not None else _retry_backoff(execution, attempt)
            if backoff is None:
                execution.attempts.append(attempt)
                return _record(execution, attempt, result, failure)
            reason = "timeout" if attempt.timeout_kind else "failure"
            attempt = attempt.model_copy(
                update={"retry_reason": reason, "backoff_seconds": backoff}
            )
            execution.attempts.append(attempt)
            log.warning(
                "local_activity_attempt_failed",
                exception_type=attempt.exception_type,
                message=attempt.message,
                backoff_seconds=backoff,
            )
        await asyncio.sleep(backoff)  # the workflow task's lease keeps being renewed meanwhile


def _retry_backoff(execution: _Execution, attempt: cmd.LocalAttempt) -> float | None:
    """The backoff before another attempt, or None when this one ends the execution."""
    if attempt.outcome == "cancelled" or attempt.non_retryable:
        return None
    if attempt.timeout_kind == "schedule_to_close":
        return None
    policy = execution.request.options.retry_policy.to_json()
    if attempt.exception_type in (policy.get("non_retryable_error_types") or []):
        return None
    limit = max_attempts(policy) or cmd.MAX_LOCAL_ATTEMPTS
    if attempt.attempt_number >= min(limit, cmd.MAX_LOCAL_ATTEMPTS):
        return None
    backoff = backoff_seconds(policy, attempt.attempt_number)
    if execution.deadline is not None and time.monotonic() + backoff >= execution.deadline:
        return None
    return backoff


def _record(
    execution: _Execution,
    last: cmd.LocalAttempt,
    result: Payload | None,
    failure: Failure | None,
) -> cmd.RecordLocalActivity:
    """The execution's record: its result, or the last attempt's failure with details and stack."""
    attempts = execution.attempts
    log.debug("local_activity_closed", outcome=last.outcome, attempts=len(attempts))
    if result is not None:
        return execution.request.record(outcome="completed", result=result, attempts=attempts)
    exception: JsonObject = {}
    if failure is not None and failure.details is not None:
        exception["details"] = codec.as_object(failure.details)
    if failure is not None and failure.stack is not None:
        exception["stack"] = failure.stack
    return execution.request.record(
        outcome=last.outcome,
        attempts=attempts,
        message=last.message,
        exception_type=last.exception_type,
        non_retryable=last.non_retryable,
        timeout_kind=last.timeout_kind,
        exception=exception or None,
    )


async def _attempt(
    lease: _TaskLease, execution: _Execution, number: int
) -> tuple[cmd.LocalAttempt, Payload | None, Failure | None]:
    """One attempt: (its summary, the encoded result or None, the failure or None).

    Raises:
        StaleLease: the workflow task's lease was lost during the attempt.
    """
    env, options = lease.env, execution.request.options
    attempt_id = str(uuid.uuid4())
    started = time.monotonic()
    gap = MIN_HEARTBEAT_GAP_SECONDS
    if options.heartbeat_timeout:
        gap = max(min(options.heartbeat_timeout / 3, 1.0), 0.05)
    beats = _Beats(lease=lease, started=started, max_payload_bytes=env.max_payload_bytes, gap=gap)
    beats.last_beat = started
    result: Payload | None = None
    failure: Failure | None = None
    outcome: cmd.LocalOutcome = "completed"
    timeout_kind: cmd.TimeoutKind | None = None
    try:
        result = await _call(lease, execution, beats, attempt_id, number)
    except store_errors.StaleLease:
        raise
    except _Timeout as exc:
        outcome, timeout_kind = "timed_out", exc.kind
        failure = Failure(exception_type="ActivityTimedOut", message=str(exc))
    except _Cancelled:
        outcome = "cancelled"
        failure = Failure(exception_type="CancelledError", message="the run was cancelled")
    except ApplicationError as exc:
        outcome, failure = "failed", failure_of(exc)
    except Exception as exc:
        outcome = "failed"
        failure = failure_with_stack(exc, non_retryable=isinstance(exc, PayloadError))
    attempt = cmd.LocalAttempt(
        attempt_id=attempt_id,
        attempt_number=number,
        outcome=outcome,
        duration_ms=int((time.monotonic() - started) * 1000),
        message=None if failure is None else failure.message,
        exception_type=None if failure is None else failure.exception_type,
        non_retryable=None if failure is None else failure.non_retryable,
        timeout_kind=timeout_kind,
        heartbeats=beats.recorded,
    )
    return attempt, result, failure


async def _call(
    lease: _TaskLease, execution: _Execution, beats: _Beats, attempt_id: str, number: int
) -> Payload:
    """Call the activity function under its timeouts; the encoded result."""
    env, claimed, request = lease.env, lease.claimed, execution.request
    definition = env.app.activities[request.activity_type]
    args = payloads.decode_args(request.options.arguments, definition.arg_types)
    ctx = activity.ActivityContext(
        activity_type=request.activity_type,
        activity_execution_id=request.activity_execution_id,
        activity_attempt_id=attempt_id,
        attempt_number=number,
        workflow_id=claimed.run.workflow_id,
        run_id=claimed.run.run_id,
        namespace=claimed.run.namespace,
        task_queue=claimed.run.task_queue,
        heartbeat_details=execution.last_details,
        _heartbeat=beats.send,
        _request_heartbeat=beats.request,
        execution_mode="local",
    )
    beats.ctx = ctx
    token = activity._set_context(ctx)
    try:
        work: asyncio.Future[object]
        if definition.is_async:
            work = asyncio.ensure_future(definition.fn(*args))  # copies the context set above
        else:
            call = contextvars.copy_context().run
            work = asyncio.get_running_loop().run_in_executor(
                env.executor, call, definition.fn, *args
            )
    finally:
        activity._current.reset(token)
    beats.work = work
    try:
        value = await _supervise(work, beats, execution)
    finally:
        beats.stop()
        if beats.details is not None:
            execution.last_details = beats.details  # the next attempt resumes from them
    return payloads.encode_value(
        value, limit=env.max_payload_bytes, what=f"local activity {request.activity_type} result"
    )


async def _supervise(work: asyncio.Future[object], beats: _Beats, execution: _Execution) -> object:
    """The attempt's value; ends it at its start-to-close, schedule-to-close or heartbeat timeout.

    A cancellation from outside (worker shutdown) stops it and propagates: nothing is recorded,
    so the next claim runs it again.
    """
    options = execution.request.options
    limits: list[tuple[float, cmd.TimeoutKind]] = []
    if options.start_to_close_timeout is not None:
        limits.append((beats.started + options.start_to_close_timeout, "start_to_close"))
    if execution.deadline is not None:
        limits.append((execution.deadline, "schedule_to_close"))
    try:
        while not work.done():
            due = list(limits)
            if options.heartbeat_timeout is not None:
                due.append((beats.last_beat + options.heartbeat_timeout, "heartbeat"))
            first = min(due, default=None)
            now = time.monotonic()
            if first is not None and first[0] <= now:
                _stop(work, beats)
                raise _Timeout(first[1])
            await asyncio.wait({work}, timeout=None if first is None else first[0] - now)
    except asyncio.CancelledError:
        _stop(work, beats)
        raise
    if beats.lease.lost:
        lease = beats.lease.claimed.lease
        raise store_errors.StaleLease(
            task_id=lease.task_id, lease_token=lease.lease_token, kind="workflow task"
        )
    if work.cancelled():
        if beats.cancelled:
            raise _Cancelled()
        raise ApplicationError("the local activity was cancelled", type="CancelledError")
    return work.result()


def _stop(work: asyncio.Future[object], beats: _Beats) -> None:
    if beats.ctx is not None:
        beats.ctx.cancel_requested = True  # a thread cannot be stopped: it can see this
    work.cancel()
