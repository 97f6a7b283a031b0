"""How history events reach workflow code: start, results, timers, signals, updates, cancels."""

from __future__ import annotations

import asyncio
from typing import Any

from burrow import payloads
from burrow.codec import Payload
from burrow.errors import (
    ApplicationError,
    ChildWorkflowAlreadyStartedError,
    ChildWorkflowError,
    InvalidArgumentsError,
)
from burrow.failures import error_from_failure, failure_of
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import Failure
from burrow.replay.activation import (
    INVALID_UPDATE_ARGUMENTS,
    INVALID_WORKFLOW_INPUT,
    ReplayAborted,
)
from burrow.replay.state import InstanceState


class EventInputs(InstanceState):
    """Applies recorded input events to the run's code, in recorded order."""

    def _register_recorded(self, record: HistoryEvent) -> None:
        event = record.event
        match event:
            case (
                ev.ActivityScheduled()
                | ev.TimerScheduled()
                | ev.SideEffectRecorded()
                | ev.VersionMarkerRecorded()
                | ev.ChildWorkflowScheduled()
                | ev.ChildSignalled()
                | ev.MemoUpserted()
                | ev.SearchAttributesUpserted()
            ):
                self._recorded[event.sequence] = event
                self._recorded_order.append(event.sequence)
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
            case ev.ChildCancelRequested():
                self._child_cancels.add(event.sequence)
            case ev.ActivityCancelRequested():
                self._activity_cancels.add(event.sequence)
            case ev.UpdateCompleted():
                self._recorded_updates.add(event.update_id)
            case ev.SignalSkipped():
                self._recorded_skips.add(event.signal_id)
            case _ if isinstance(event, ev.TERMINAL_EVENTS):
                self._recorded_terminal = True

    def _apply(self, event: ev.Event) -> None:
        match event:
            case ev.WorkflowStarted():
                self.started = event
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
            case ev.CancelRequested() | ev.CooperativeCancellationRequested():
                self._on_cancel_requested()
            case (
                ev.ChildRunCompleted()
                | ev.ChildRunFailed()
                | ev.ChildRunCancelled()
                | ev.ChildRunTerminated()
            ):
                self._on_child_closed(event)

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

    def _future_for(self, event: ev.ActivityClosed) -> asyncio.Future[object] | None:
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
                        update_id=update_id, result=self._encode(result, "update result")
                    )
                )
            except ReplayAborted:
                raise
            except Exception as exc:
                self._emit(cmd.FailUpdate.of(update_id, Failure.of(failure_of(exc))))

        self.loop.create_task(run_update(), name=f"update:{name}")

    def _on_child_closed(self, event: ev.ChildClosed) -> None:
        seq = event.sequence
        if seq >= self._next_step:
            self._nondeterminism(seq, "no such child yet", f"{event.event_type} for step {seq}")
        future = self._results.get(seq)
        if future is None or future.done():
            return
        if isinstance(event, ev.ChildRunCompleted):
            hint = self._result_types.get(seq, ("", Any))[1]
            encoded: Payload = {"codec": event.payload_codec, "blob": event.output}
            future.set_result(payloads.decode_value(encoded, hint))
            return
        future.set_exception(child_error(event))

    def _on_cancel_requested(self) -> None:
        if self.cancel_requested:
            return  # already delivered, through a local activity it cancelled
        self.cancel_requested = True
        if self._main is not None and not self._main.done():
            self._main.cancel()


_CLOSED_CAUSE_TYPES = {
    ev.ChildRunCancelled: "WorkflowCancelled",
    ev.ChildRunTerminated: "WorkflowTerminated",
}


def child_error(event: ev.ChildClosed) -> ChildWorkflowError:
    """The error the parent sees for a child that closed without a result, cause chained."""
    cause: BaseException
    match event:
        case ev.ChildRunFailed():
            failure = Failure.joined(
                event.message, event.exception_type, bool(event.non_retryable), event.exception
            )
            cause = error_from_failure(failure)
        case _:
            message = getattr(event, "message", None) or event.closed_reason
            cause = ApplicationError(str(message), type=_CLOSED_CAUSE_TYPES.get(type(event)))
    kind = (
        ChildWorkflowAlreadyStartedError
        if event.child_status == "start_failed"
        else ChildWorkflowError
    )
    error = kind(
        f"child workflow {event.child_workflow_instance_id} ({event.child_workflow_type})"
        f" {event.child_status}: {cause}",
        workflow_id=event.child_workflow_instance_id,
        run_id=event.child_workflow_run_id,
        workflow_type=event.child_workflow_type,
        status=event.child_status,
    )
    error.__cause__ = cause
    return error
