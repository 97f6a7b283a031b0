"""One workflow run in memory: history events in, commands out; it never does I/O.

An instance can stay suspended between workflow tasks and resume from only the new events
(sticky execution), or be rebuilt from the full history (cold replay); both give the same
commands (S12). Each workflow task's events form one activation: its inputs (results, fired
timers, signals) are applied in recorded order, then the loop runs until the code waits again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

import structlog

from burrow import codec, payloads
from burrow.codec import Payload
from burrow.errors import ApplicationError
from burrow.failures import failure_of as failure_of  # re-exported for the worker
from burrow.protocol import commands as cmd
from burrow.protocol.events import HistoryEvent
from burrow.protocol.shapes import Failure, JsonObject
from burrow.replay.activation import INPUT_EVENTS as INPUT_EVENTS
from burrow.replay.activation import INVALID_UPDATE_ARGUMENTS as INVALID_UPDATE_ARGUMENTS
from burrow.replay.activation import INVALID_WORKFLOW_INPUT as INVALID_WORKFLOW_INPUT
from burrow.replay.activation import Activation as Activation
from burrow.replay.activation import LocalActivityRequest as LocalActivityRequest
from burrow.replay.activation import ReplayAborted as ReplayAborted
from burrow.replay.activation import ReplayStateError as ReplayStateError
from burrow.replay.activation import RunContext as RunContext
from burrow.replay.activation import activations as activations
from burrow.replay.activation import describe_event as describe_event
from burrow.replay.activation import is_input as is_input
from burrow.replay.sandbox import protect, sandboxed
from burrow.replay.visibility_steps import VisibilitySteps
from burrow.workflow import context
from burrow.workflow.context import ContinueAsNewRequest as ContinueAsNewRequest
from burrow.workflow.definition import WorkflowDefinition, param_types

log = structlog.get_logger("burrow.replay")


class WorkflowInstance(VisibilitySteps):
    """A suspended workflow run: feed it events with `activate`, get commands back.

    It is the `burrow.workflow.context.Runtime` its code finds through the loop.
    """

    def __init__(
        self,
        *,
        definition: WorkflowDefinition,
        run: RunContext,
        known_activities: Iterable[str] | None = None,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        super().__init__(
            definition=definition,
            run=run,
            known_activities=known_activities,
            max_payload_bytes=max_payload_bytes,
        )
        context.install(self.loop, self)
        protect(definition.cls)

    def activate(self, events: Sequence[HistoryEvent]) -> Activation:
        """Apply new history events; returns the commands not yet in history. Never raises."""
        return self._guarded(lambda: self._activate(events))

    def release(self) -> None:
        """Let go of everything the instance holds: a cache evicted it and never uses it again.

        Its loop, task and coroutine refer to each other and to it, so without this an evicted
        instance waits for Python's cyclic garbage collector, and evicted runs pile up meanwhile.
        Its code's coroutines are closed first, while the state their cleanup calls into is
        still whole (a closed coroutine left to the collector would find it cleared).
        """
        self.loop.close_tasks()
        self.__dict__.clear()

    def resolve_local_activities(self, records: Sequence[cmd.RecordLocalActivity]) -> Activation:
        """Hand the code the outcomes of the local activities it awaited, and go on (A3).

        `records` answer the last activation's `local_activities` (each `seq` once); they are
        delivered in step order at the point where the code blocked, as replay delivers them.
        """

        def resolve() -> None:
            for record in sorted(records, key=lambda r: r.seq or 0):
                request = self._local_new.get(record.seq or 0)
                if request is None:
                    raise ReplayStateError(
                        f"no local activity awaits a record for step {record.seq}",
                        run_id=self.run.run_id,
                        seq=record.seq,
                    )
                self._record_local(request, record)
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
                self.now = max(e.workflow_time for e in inputs)
                self.loop.set_time(self.now.timestamp())
            for event in inputs:
                self.loop.call_soon(self._apply, event.event)
            self._run_until_blocked()
            self._forget_reached_steps()
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
                result = self._encode(main.result(), "workflow result")
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

    def query(self, name: str, arguments: Payload | JsonObject | None) -> object:
        """Run a query handler against the current state (read-only)."""
        method = self.definition.queries.get(name)
        if method is None or self._workflow is None:
            raise ApplicationError(
                f"unknown query {name!r}", type="UnknownQuery", non_retryable=True
            )
        bound = getattr(self._workflow, method)
        args = payloads.decode_args(arguments, param_types(bound, skip_self=False))
        return bound(*args)

    def validate_update(self, name: str, arguments: Payload | JsonObject | None) -> None:
        """Run an update's validator against the current state (read-only); raise to reject.

        An update without a validator is approved; a validator returning False rejects it.
        """
        validator = self.definition.validators.get(name)
        if validator is None or self._workflow is None:
            return
        args = payloads.decode_args(arguments, param_types(validator, skip_self=True))
        if validator(self._workflow, *args) is False:
            raise ApplicationError(
                f"update validator of {name!r} returned False", type="ValueError"
            )
