"""One workflow run in memory: history events in, commands out; it never does I/O.

An instance can stay suspended between workflow tasks and resume from only the new events
(sticky execution), or be rebuilt from the full history (cold replay); both give the same
commands (S12). Each workflow task's events form one activation: its inputs (results, fired
timers, signals) are applied in recorded order, then the loop runs until the code waits again.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from burrow import codec, payloads
from burrow.codec import Payload
from burrow.errors import (
    ApplicationError,
    InvalidArgumentsError,
    NondeterminismError,
    UnknownActivityType,
)
from burrow.failures import error_from_failure
from burrow.failures import failure_of as failure_of  # re-exported for the worker
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import (
    Failure,
    LocalActivitySpec,
    RetrySpec,
    SessionSpec,
    activity_execution_id,
    check_duration_seconds,
)
from burrow.replay.sandbox import sandboxed, unguarded
from burrow.replay.scheduler import DeterministicLoop
from burrow.workflow import context
from burrow.workflow.context import ContinueAsNewRequest as ContinueAsNewRequest
from burrow.workflow.definition import WorkflowDefinition, param_types, return_type

log = structlog.get_logger("burrow.replay")

INVALID_WORKFLOW_INPUT = "InvalidWorkflowInput"
"""The ApplicationError type that fails a run whose start input does not fit its run method."""

INVALID_UPDATE_ARGUMENTS = "InvalidUpdateArguments"
"""The failure type an update caller gets when its arguments do not fit the handler."""

INPUT_EVENTS = (
    ev.WorkflowStarted,
    ev.ActivityCompleted,
    ev.ActivityFailed,
    ev.ActivityTimedOut,
    ev.ActivityCancelled,
    ev.TimerFired,
    ev.SignalReceived,
    ev.UpdateAccepted,
    ev.CancelRequested,
)
"""Events that feed workflow code; every other event records what the code itself did."""


def is_input(event: HistoryEvent) -> bool:
    """Whether the event is an input to workflow code (a result, timer, signal, update...).

    A local activity's outcome is not: its own workflow task recorded it, and replay hands it
    to the code where the code awaited it, not at the start of the activation (A3).
    """
    return isinstance(event.event, INPUT_EVENTS) and not ev.is_local(event.event)


def describe_event(event: ev.Event) -> str:
    """The short form `describe_step` gives a command, for a recorded step event."""
    match event:
        case ev.ActivityScheduled() if event.execution_mode == "local":
            return f"local activity {event.activity_type!r}"
        case ev.ActivityScheduled():
            return f"activity {event.activity_type!r}"
        case ev.TimerScheduled():
            return f"timer {event.delay_seconds:g}s"
        case ev.SideEffectRecorded():
            return "side effect"
        case ev.VersionMarkerRecorded():
            return f"version marker {event.change_id!r}"
    return event.event_type


class ReplayAborted(BaseException):
    """Unwinds workflow code after a replay failure.

    A BaseException, so a user's `except Exception` cannot swallow it.
    """


@dataclass(frozen=True, slots=True)
class RunContext:
    """The run an instance belongs to."""

    run_id: str
    workflow_id: str
    workflow_type: str
    namespace: str
    task_queue: str
    input: Payload | dict[str, Any]


@dataclass(frozen=True, slots=True)
class LocalActivityRequest:
    """A local activity the code awaits that history does not hold yet: the worker runs it (A3).

    `options` is the snapshot ActivityScheduled will record (retry policy and timeouts).
    """

    seq: int
    activity_type: str
    activity_execution_id: str
    options: LocalActivitySpec

    def cancelled(self, message: str) -> cmd.RecordLocalActivity:
        """The record of this execution ended before any attempt ran."""
        return self.record(outcome="cancelled", attempts=[], message=message)

    def record(self, **outcome: Any) -> cmd.RecordLocalActivity:
        """The `record_local_activity` command for this execution with its outcome fields."""
        options = self.options
        return cmd.RecordLocalActivity(
            seq=self.seq,
            activity_type=self.activity_type,
            arguments=options.arguments,
            retry_policy=options.retry_policy,
            start_to_close_timeout=options.start_to_close_timeout,
            schedule_to_close_timeout=options.schedule_to_close_timeout,
            heartbeat_timeout=options.heartbeat_timeout,
            **outcome,
        )


@dataclass(slots=True)
class Activation:
    """The outcome of one activation: commands to persist, or why the task failed.

    While `local_activities` is not empty the activation is unfinished: the worker runs them and
    hands their records to `WorkflowInstance.resolve_local_activities`, which goes on (A3).
    """

    commands: list[cmd.Command] = field(default_factory=list)
    failure: BaseException | None = None
    local_activities: list[LocalActivityRequest] = field(default_factory=list)


class WorkflowInstance:
    """A suspended workflow run: feed it events with `activate`, get commands back."""

    def __init__(
        self,
        *,
        definition: WorkflowDefinition,
        run: RunContext,
        known_activities: Iterable[str] | None = None,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.definition = definition
        self.run = run
        self.max_payload_bytes = max_payload_bytes
        self.known_activities = None if known_activities is None else frozenset(known_activities)
        # The loop leaves asyncio's unused abstract I/O methods unimplemented on purpose.
        self.loop = DeterministicLoop(self)  # type: ignore[abstract]
        context.install(self.loop, self)
        self.last_seq = 0
        self.now = datetime.fromtimestamp(0).astimezone()
        self.rng = random.Random(uuid.UUID(run.run_id).int)
        self.is_replaying = False
        self.cancel_requested = False
        self.closed = False
        self._next_step = 1
        self._recorded: dict[int, ev.StepEvent] = {}
        self._max_recorded = 0
        self._recorded_timer_cancels: set[int] = set()
        self._recorded_updates: set[str] = set()
        self._recorded_skips: set[str] = set()
        self._skipped_now: list[cmd.SkipSignal] = []
        self._recorded_terminal = False
        self._results: dict[int, asyncio.Future[Any]] = {}
        self._result_types: dict[int, tuple[str, Any]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._timer_steps: dict[int, int] = {}
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[bool]]] = []
        # A new local activity holds its step's place in the commands until its record is in.
        self._commands: list[cmd.Command | LocalActivityRequest] = []
        self._local_new: dict[int, LocalActivityRequest] = {}
        self._local_waiting: set[int] = set()
        self._local_outcomes: dict[int, ev.ActivityClosed] = {}
        self._failure: BaseException | None = None
        self._workflow: Any = None
        self._main: asyncio.Task[Any] | None = None

    # -- driving --------------------------------------------------------------------------------

    def activate(self, events: Sequence[HistoryEvent]) -> Activation:
        """Apply new history events; returns the commands not yet in history. Never raises."""
        return self._guarded(lambda: self._activate(events))

    def resolve_local_activities(self, records: Sequence[cmd.RecordLocalActivity]) -> Activation:
        """Hand the code the outcomes of the local activities it awaited, and go on (A3).

        `records` answer the last activation's `local_activities` (each `seq` once); they are
        delivered in step order at the point where the code blocked, as replay delivers them.
        """

        def resolve() -> None:
            for record in sorted(records, key=lambda r: r.seq or 0):
                self._record_local(self._local_new[record.seq or 0], record)
            self._run_until_blocked()

        return self._guarded(resolve)

    def _guarded(self, step: Callable[[], None]) -> Activation:
        try:
            with sandboxed():
                step()
        except ReplayAborted:
            pass
        except Exception as exc:  # an engine bug or undecodable history: fail the task, visibly
            self._failure = self._failure or exc
        skipped, self._skipped_now = self._skipped_now, []
        if self._failure is not None:
            self.closed = True
            return Activation(failure=self._failure)
        for skip in skipped:  # logged here, outside the sandbox, once per decision
            log.warning(
                "signal_skipped",
                run_id=self.run.run_id,
                workflow_id=self.run.workflow_id,
                signal_name=skip.signal_name,
                signal_id=skip.signal_id,
                reason=skip.reason,
            )
        if self._local_new:
            return Activation(
                local_activities=[self._local_new[n] for n in sorted(self._local_new)]
            )
        commands = [c for c in self._commands if not isinstance(c, LocalActivityRequest)]
        self._commands = []
        return Activation(commands=commands)

    def committed(self, last_seq: int) -> None:
        """History now holds this instance's last commands, recorded up to `last_seq`.

        Only after a completion committed exactly the commands `activate` returned: the records
        would only be checked against a replay, and a resumed instance never replays them, so
        the next activation can start after them (sticky execution fetches less).
        """
        self.last_seq = max(self.last_seq, last_seq)

    def _activate(self, events: Sequence[HistoryEvent]) -> None:
        fresh = [e for e in events if e.sequence > self.last_seq]
        for event in fresh:
            self._register_recorded(event)
        for group in activations(fresh):
            inputs = [e for e in group if is_input(e)]
            self.is_replaying = len(inputs) != len(group)
            if inputs:
                self.now = max(e.recorded_at for e in inputs)
                self.loop.set_time(self.now.timestamp())
            for event in inputs:
                self.loop.call_soon(self._apply, event.event)
            self._run_until_blocked()
            self.last_seq = group[-1].sequence
        self.is_replaying = False
        if self._next_step <= self._max_recorded:
            recorded = self._recorded.get(self._next_step)
            self._nondeterminism(
                self._next_step,
                "no further step (the code is waiting)",
                "nothing" if recorded is None else describe_event(recorded),
            )

    def _run_until_blocked(self) -> None:
        while True:
            self.loop.run_ready()
            for error in self.loop.take_errors():
                if isinstance(error, ReplayAborted):
                    raise error
                raise error
            if self._failure is not None:
                raise ReplayAborted()
            if self._check_conditions():
                continue
            self._finish_if_done()
            if not self._settle_local_activities():
                break

    def _check_conditions(self) -> bool:
        fired = False
        for predicate, future in list(self._conditions):
            if future.done():
                self._conditions.remove((predicate, future))
                continue
            try:
                ok = predicate()
            except Exception as exc:
                future.set_exception(exc)
                fired = True
                continue
            if ok:
                future.set_result(True)
                self._conditions.remove((predicate, future))
                fired = True
        return fired

    def _register_recorded(self, record: HistoryEvent) -> None:
        event = record.event
        match event:
            case (
                ev.ActivityScheduled()
                | ev.TimerScheduled()
                | ev.SideEffectRecorded()
                | ev.VersionMarkerRecorded()
            ):
                self._recorded[event.sequence] = event
                self._max_recorded = max(self._max_recorded, event.sequence)
            case (
                ev.ActivityCompleted()
                | ev.ActivityFailed()
                | ev.ActivityTimedOut()
                | (ev.ActivityCancelled())
            ) if ev.is_local(event):
                self._local_outcomes[event.sequence] = event
            case ev.TimerCancelled():
                self._recorded_timer_cancels.add(event.sequence)
            case ev.UpdateCompleted():
                self._recorded_updates.add(event.update_id)
            case ev.SignalSkipped():
                self._recorded_skips.add(event.signal_id)
            case _ if isinstance(event, ev.TERMINAL_EVENTS):
                self._recorded_terminal = True

    # -- events ---------------------------------------------------------------------------------

    def _apply(self, event: ev.Event) -> None:
        match event:
            case ev.WorkflowStarted():
                self._on_started()
            case ev.ActivityCompleted():
                self._on_activity_completed(event)
            case ev.ActivityFailed() | ev.ActivityTimedOut() | ev.ActivityCancelled():
                self._on_activity_failed(event)
            case ev.TimerFired():
                self._on_timer_fired(event)
            case ev.SignalReceived():
                self._on_signal(event)
            case ev.UpdateAccepted():
                self._on_update(event)
            case ev.CancelRequested():
                self._on_cancel_requested()

    def _on_started(self) -> None:
        definition = self.definition
        entry_fn = getattr(definition.cls, definition.run_method)
        try:
            args = payloads.bind_args(
                self.run.input,
                entry_fn,
                handler=f"{definition.name}.{definition.run_method}",
                skip_self=True,
            )
        except InvalidArgumentsError as exc:
            # Issue 13 item 2: retrying cannot help, so the run fails once, naming the parameter.
            self.closed = True
            error = ApplicationError(str(exc), type=INVALID_WORKFLOW_INPUT, non_retryable=True)
            self._emit(cmd.FailWorkflow.of(Failure.of(failure_of(error))))
            return
        self._workflow = definition.cls()
        entry = getattr(self._workflow, definition.run_method)
        self._main = self.loop.create_task(entry(*args), name=f"workflow:{self.run.run_id}")

    def _future_for(self, event: ev.ActivityClosed) -> asyncio.Future[Any] | None:
        seq = event.sequence
        if seq >= self._next_step:
            self._nondeterminism(seq, "no such step yet", f"{event.event_type} for step {seq}")
        future = self._results.get(seq)
        return None if future is None or future.done() else future

    def _on_activity_completed(self, event: ev.ActivityCompleted) -> None:
        future = self._future_for(event)
        if future is None:
            return
        hint = self._result_types.get(event.sequence, ("", Any))[1]
        encoded: Payload = {"codec": event.payload_codec, "blob": event.result}
        future.set_result(payloads.decode_value(encoded, hint))

    def _on_activity_failed(
        self, event: ev.ActivityFailed | ev.ActivityTimedOut | ev.ActivityCancelled
    ) -> None:
        future = self._future_for(event)
        if future is None:
            return
        future.set_exception(error_from_failure(event.to_json(), event_type=event.event_type))

    def _on_timer_fired(self, event: ev.TimerFired) -> None:
        seq = event.sequence
        if seq >= self._next_step:
            self._nondeterminism(seq, "no such timer yet", f"TimerFired for step {seq}")
        handle = self._timers.pop(seq, None)
        if handle is not None:
            self.loop.fire_timer(handle)

    def _on_signal(self, event: ev.SignalReceived) -> None:
        name = event.signal_name
        if self._workflow is None:
            return  # the run failed at start: there is no code to deliver it to
        method = self.definition.signals.get(name)
        if method is None:
            known = ", ".join(repr(n) for n in sorted(self.definition.signals)) or "none"
            self._skip_signal(event, f"no signal handler named {name!r} (handlers: {known})")
            return
        bound = getattr(self._workflow, method)
        try:
            args = payloads.bind_args(
                event.arguments, bound, handler=f"signal {name!r}", skip_self=False
            )
        except InvalidArgumentsError as exc:
            self._skip_signal(event, exc.reason)
            return
        result = bound(*args)
        if asyncio.iscoroutine(result):
            self.loop.create_task(result, name=f"signal:{name}")

    def _skip_signal(self, event: ev.SignalReceived, reason: str) -> None:
        """Skip a signal no code can take, rather than fail every workflow task (issue 13).

        The decision is recorded (SignalSkipped): a replay that finds it skips the signal
        without deciding again, so cold and warm instances agree and it is logged once.
        """
        if event.signal_id in self._recorded_skips:
            return
        skip = cmd.SkipSignal(
            signal_id=event.signal_id, signal_name=event.signal_name, reason=reason
        )
        self._emit(skip)
        self._skipped_now.append(skip)

    def _on_update(self, event: ev.UpdateAccepted) -> None:
        update_id = event.update_id
        name = event.update_name
        method = self.definition.updates.get(name)
        if method is None or self._workflow is None:
            self._emit(
                cmd.FailUpdate(
                    update_id=update_id,
                    message=f"unknown update {name!r}",
                    exception_type="UnknownUpdate",
                )
            )
            return
        bound = getattr(self._workflow, method)
        hint = return_type(bound)
        try:
            args = payloads.bind_args(
                event.arguments, bound, handler=f"update {name!r}", skip_self=False
            )
        except InvalidArgumentsError as exc:
            self._emit(
                cmd.FailUpdate(
                    update_id=update_id, message=str(exc), exception_type=INVALID_UPDATE_ARGUMENTS
                )
            )
            return

        async def run_update() -> None:
            try:
                result = bound(*args)
                if asyncio.iscoroutine(result):
                    result = await result
                self._emit(
                    cmd.CompleteUpdate(
                        update_id=update_id, result=self._encode(result, hint, "update result")
                    )
                )
            except ReplayAborted:
                raise
            except Exception as exc:
                self._emit(cmd.FailUpdate.of(update_id, Failure.of(failure_of(exc))))

        self.loop.create_task(run_update(), name=f"update:{name}")

    def _on_cancel_requested(self) -> None:
        if self.cancel_requested:
            return  # already delivered, through a local activity it cancelled
        self.cancel_requested = True
        if self._main is not None and not self._main.done():
            self._main.cancel()

    # -- completion -----------------------------------------------------------------------------

    def _encode(self, value: Any, hint: Any, what: str) -> Payload:
        del hint
        return payloads.encode_value(value, limit=self.max_payload_bytes, what=what)

    def _finish_if_done(self) -> None:
        main = self._main
        if main is None or not main.done() or self.closed:
            return
        lost = self.loop.take_unretrieved(besides=main)
        if lost:
            # Issue 25 item 5: a task the code started and never awaited failed; closing the run
            # would lose its error for good, so it fails the workflow task instead.
            self._failure = lost[0]
            return
        self.closed = True
        if main.cancelled():
            self._emit(cmd.CancelWorkflow(message="workflow cancelled"))
            return
        exc = main.exception()
        if exc is None:
            try:
                result = self._encode(main.result(), Any, "workflow result")
            except Exception as unencodable:  # too large or not serialisable: fail the run clearly
                self._emit(cmd.FailWorkflow.of(Failure.of(failure_of(unencodable))))
            else:
                self._emit(cmd.CompleteWorkflow(result=result))
        elif isinstance(exc, ContinueAsNewRequest):
            arguments = payloads.encode_args(
                exc.arguments, limit=self.max_payload_bytes, what="continue-as-new input"
            )
            self._emit(
                cmd.ContinueAsNew(
                    arguments=arguments,
                    workflow_type=exc.workflow_type or self.run.workflow_type,
                    queue=exc.queue or self.run.task_queue,
                )
            )
        elif isinstance(exc, ReplayAborted):
            raise exc
        elif isinstance(exc, asyncio.CancelledError):
            self._emit(cmd.CancelWorkflow(message=str(exc) or "workflow cancelled"))
        elif isinstance(exc, ApplicationError):
            self._emit(cmd.FailWorkflow.of(Failure.of(failure_of(exc))))
        else:
            # A bug (TypeError, KeyError...) fails the task, not the run, so a fix can resume it.
            self.closed = False
            self._failure = exc

    def _emit(self, command: cmd.Command) -> None:
        match command:
            case cmd.CancelTimer() if command.sequence in self._recorded_timer_cancels:
                return
            case cmd.CompleteUpdate() | cmd.FailUpdate() if (
                command.update_id in self._recorded_updates
            ):
                return
            case _ if isinstance(command, cmd.TERMINAL_COMMANDS) and self._recorded_terminal:
                return
        self._commands.append(command)

    # -- what authoring functions call ----------------------------------------------------------

    def _nondeterminism(self, seq: int, expected: str, recorded: str) -> None:
        self._failure = NondeterminismError(
            run_id=self.run.run_id, seq=seq, expected=expected, recorded=recorded
        )
        raise ReplayAborted()

    def _step(self, make: Callable[[int], cmd.StepCommand]) -> int:
        """Take the next step number and match it against history, or queue it as new."""
        seq = self._next_step
        self._next_step += 1
        command = make(seq)
        recorded = self._recorded.get(seq)
        if recorded is None:
            if seq <= self._max_recorded:
                self._nondeterminism(seq, cmd.describe_step(command), "nothing")
            self._emit(command)
            return seq
        mine = cmd.describe_step(command)
        theirs = describe_event(recorded)
        if isinstance(command, cmd.StartTimer):
            matches = isinstance(recorded, ev.TimerScheduled)  # delays may differ by clock skew
        else:
            matches = mine == theirs
        if not matches:
            self._nondeterminism(seq, mine, theirs)
        return seq

    def schedule_activity(
        self,
        activity_type: str,
        args: Sequence[Any],
        *,
        queue: str | None,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
        worker_session: SessionSpec | None = None,
    ) -> asyncio.Future[Any]:
        """Schedule (or replay) a queued activity step; the future resolves from history.

        `worker_session` runs it in that worker session (W4): the snapshot is part of the command.
        """
        target = queue or self.run.task_queue
        seq = self._next_step
        if (
            seq not in self._recorded
            and self.known_activities is not None
            and target == self.run.task_queue
            and activity_type not in self.known_activities
        ):
            self._failure = UnknownActivityType(activity_type=activity_type, task_queue=target)
            raise ReplayAborted()
        arguments = payloads.encode_args(
            args, limit=self.max_payload_bytes, what=f"activity {activity_type} arguments"
        )
        self._step(
            lambda n: cmd.ScheduleActivity(
                seq=n,
                activity_type=activity_type,
                arguments=arguments,
                queue=target,
                retry_policy=retry_policy,
                worker_session=worker_session,
                **timeouts,
            )
        )
        future: asyncio.Future[Any] = self.loop.create_future()
        self._results[seq] = future
        self._result_types[seq] = (activity_type, result_type)
        return future

    def local_activity(
        self,
        activity_type: str,
        args: Sequence[Any],
        *,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: Any,
    ) -> asyncio.Future[Any]:
        """Take a local activity step (A3); its future resolves at the code's next block point.

        `retry_policy` and `timeouts` were validated by the caller's options (checked timeouts).

        New: the worker runs it within this workflow task. Recorded: its recorded outcome is
        delivered at the same point the original run delivered it, and it never runs again.
        """
        seq = self._next_step
        recorded = self._recorded.get(seq)
        known = self.known_activities
        if recorded is None and known is not None and activity_type not in known:
            # It would run right here: a worker without it cannot take this step (A3).
            self._failure = UnknownActivityType(
                activity_type=activity_type, task_queue=self.run.task_queue
            )
            raise ReplayAborted()
        arguments = payloads.encode_args(
            args, limit=self.max_payload_bytes, what=f"local activity {activity_type} arguments"
        )
        self._next_step += 1
        mine = f"local activity {activity_type!r}"
        if recorded is None:
            if seq <= self._max_recorded:
                self._nondeterminism(seq, mine, "nothing")
            options = LocalActivitySpec(
                activity_type=activity_type,
                arguments=arguments,
                retry_policy=retry_policy,
                start_to_close_timeout=timeouts.get("start_to_close_timeout"),
                schedule_to_close_timeout=timeouts.get("schedule_to_close_timeout"),
                heartbeat_timeout=timeouts.get("heartbeat_timeout"),
            )
            request = LocalActivityRequest(
                seq=seq,
                activity_type=activity_type,
                activity_execution_id=activity_execution_id(self.run.run_id, seq),
                options=options,
            )
            self._local_new[seq] = request
            self._commands.append(request)
        else:
            theirs = describe_event(recorded)
            if mine != theirs:
                self._nondeterminism(seq, mine, theirs)
            self._local_waiting.add(seq)
        future: asyncio.Future[Any] = self.loop.create_future()
        self._results[seq] = future
        self._result_types[seq] = (activity_type, result_type)
        return future

    def _settle_local_activities(self) -> bool:
        """At a block point: deliver recorded local outcomes; True when the code may go on.

        A new local activity nobody awaits any more, or one left when the run closed, is
        recorded as cancelled without running. Nothing is delivered once the run has closed,
        so no command can follow the terminal one.
        """
        for seq, request in sorted(self._local_new.items()):
            future = self._results[seq]
            if self.closed:
                self._record_local(request, request.cancelled("the run closed before it ran"))
            elif future.done():
                self._record_local(request, request.cancelled("its caller stopped waiting"))
        if self.closed:
            self._local_waiting.clear()
            return False
        ready = sorted(seq for seq in self._local_waiting if seq in self._local_outcomes)
        for seq in ready:
            self._local_waiting.discard(seq)
            self._deliver_local(self._local_outcomes[seq])
        return bool(ready)

    def _record_local(self, request: LocalActivityRequest, record: cmd.RecordLocalActivity) -> None:
        """Put the record in its step's place among the commands and deliver its outcome."""
        del self._local_new[request.seq]
        # By identity, from the end where it usually is: list.index would compare every command.
        place = next(
            i for i in range(len(self._commands) - 1, -1, -1) if self._commands[i] is request
        )
        self._commands[place] = record
        terminal = ev.local_terminal_event(
            record, run_id=self.run.run_id, step=request.seq, now=self.now
        )
        if not self.closed:
            self._deliver_local(terminal)

    def _deliver_local(self, event: ev.ActivityClosed) -> None:
        """A local outcome reaches the code; a cancelled one cancels the workflow (A3).

        A local activity is cancelled only because its run was asked to cancel while it ran:
        the code sees that request here, as asyncio cancellation, exactly as a queued activity
        lets it through; the CancelRequested event that follows changes nothing more.
        """
        future = self._results.get(event.sequence)
        if future is None or future.done():
            return
        match event:
            case ev.ActivityCompleted():
                self._on_activity_completed(event)
            case ev.ActivityCancelled():
                self._on_cancel_requested()
                if not future.done():
                    future.cancel()
            case _:
                self._on_activity_failed(event)

    def start_timer(self, delay: float, handle: asyncio.TimerHandle) -> None:
        """Called by the loop for call_later/asyncio.sleep: a durable timer step.

        A delay no timer can take (NaN, infinite, over MAX_DURATION_SECONDS) fails the workflow
        task whichever coroutine asked, as an unknown activity does: in a task nobody awaits
        the error would be lost and the run would wait for ever (issue 25 item 5).
        """
        try:
            check_duration_seconds("a workflow timer's delay", delay)
        except ValueError as exc:
            self._failure = self._failure or ValueError(
                f"{exc} (asyncio.sleep, wait_for or call_later in workflow code)"
            )
            raise ReplayAborted() from None
        seq = self._step(lambda n: cmd.StartTimer(seq=n, delay_seconds=round(delay, 6)))
        self._timers[seq] = handle
        self._timer_steps[id(handle)] = seq

    def cancel_timer(self, handle: asyncio.TimerHandle) -> None:
        """Called by the loop when a timer handle is cancelled before it fired."""
        seq = self._timer_steps.pop(id(handle), None)
        if seq is not None and self._timers.pop(seq, None) is not None:
            self._emit(cmd.CancelTimer(sequence=seq))

    def side_effect(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` once and record its value; replays return the recorded value."""
        seq = self._next_step
        recorded = self._recorded.get(seq)
        if isinstance(recorded, ev.SideEffectRecorded):
            self._step(lambda n: cmd.RecordSideEffect(seq=n, result=""))
            return payloads.decode_value({"codec": recorded.payload_codec, "blob": recorded.result})
        with unguarded():  # the one place non-deterministic code is meant to run
            value = fn()
        encoded = self._encode(value, Any, "side effect result")
        self._step(lambda n: cmd.RecordSideEffect.of(encoded, seq=n))
        return payloads.decode_value(encoded)

    def get_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """The version this run uses for `change_id` (recorded once per run)."""
        seq = self._next_step
        recorded = self._recorded.get(seq)
        if isinstance(recorded, ev.VersionMarkerRecorded) and recorded.change_id == change_id:
            self._next_step += 1
            version = recorded.version
            if not min_supported <= version <= max_supported:
                self._nondeterminism(
                    seq,
                    f"version of {change_id!r} in [{min_supported}, {max_supported}]",
                    f"version {version}",
                )
            return version
        if seq <= self._max_recorded:
            # History from before this get_version call existed: the old branch.
            return min_supported
        self._step(
            lambda n: cmd.RecordVersionMarker(
                seq=n,
                change_id=change_id,
                version=max_supported,
                min_supported=min_supported,
                max_supported=max_supported,
            )
        )
        return max_supported

    def wait_condition(self, predicate: Callable[[], bool]) -> asyncio.Future[bool]:
        """A future that resolves once `predicate()` holds (checked after every step)."""
        future: asyncio.Future[bool] = self.loop.create_future()
        self._conditions.append((predicate, future))
        return future

    def query(self, name: str, arguments: Payload | dict[str, Any] | None) -> Any:
        """Run a query handler against the current state (read-only)."""
        method = self.definition.queries.get(name)
        if method is None or self._workflow is None:
            raise ApplicationError(
                f"unknown query {name!r}", type="UnknownQuery", non_retryable=True
            )
        bound = getattr(self._workflow, method)
        args = payloads.decode_args(arguments, param_types(bound, skip_self=False))
        return bound(*args)

    def uuid4(self) -> uuid.UUID:
        """A deterministic UUID from the run's seeded generator."""
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def after(self, delay: float | timedelta) -> float:
        """Seconds from a float or timedelta."""
        return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


def activations(events: Sequence[HistoryEvent]) -> list[list[HistoryEvent]]:
    """Split events into activations: consecutive events of one workflow task."""
    groups: list[list[HistoryEvent]] = []
    for event in events:
        if event.workflow_task_id is None:
            continue
        if groups and groups[-1][-1].workflow_task_id == event.workflow_task_id:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups
