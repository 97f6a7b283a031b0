"""The state of one workflow run in memory, and the step bookkeeping every part of it shares.

`WorkflowInstance` (instance.py) is built in layers, each a module: this state with step
matching, emitted commands and durable timers; `EventInputs` (inputs.py), which applies history
events to the code; `Steps` (steps.py), the calls authoring functions make through the Runtime.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import NoReturn

from burrow import codec, payloads
from burrow.codec import Payload
from burrow.errors import NondeterminismError
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.shapes import check_duration_seconds
from burrow.replay.activation import LocalActivityRequest, ReplayAborted, RunContext, describe_event
from burrow.replay.scheduler import DeterministicLoop
from burrow.workflow.definition import WorkflowDefinition


class InstanceState:
    """Everything one run keeps between activations; the layers above read and change it."""

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
        self.last_seq = 0
        self.now = datetime.fromtimestamp(0).astimezone()
        self.rng = random.Random(uuid.UUID(run.run_id).int)
        self.is_replaying = False
        self.cancel_requested = False
        self.closed = False
        self._next_step = 1
        self._recorded: dict[int, ev.StepEvent] = {}
        self._recorded_order: deque[int] = deque()  # their steps, as registered
        self._max_recorded = 0
        self._recorded_timer_cancels: set[int] = set()
        self._child_cancels: set[int] = set()
        self._activity_cancels: set[int] = set()
        self._recorded_updates: set[str] = set()
        self._recorded_skips: set[str] = set()
        self._skipped_now: list[cmd.SkipSignal] = []
        self._recorded_terminal = False
        self._results: dict[int, asyncio.Future[object]] = {}
        self._result_types: dict[int, tuple[str, object]] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._timer_steps: dict[int, int] = {}
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[bool]]] = []
        # A new local activity holds its step's place in the commands until its record is in.
        self._commands: list[cmd.Command | LocalActivityRequest] = []
        self._local_new: dict[int, LocalActivityRequest] = {}
        self._local_waiting: set[int] = set()
        self._local_outcomes: dict[int, ev.ActivityClosed] = {}
        self._failure: BaseException | None = None
        self._workflow: object | None = None
        self._main: asyncio.Task[object] | None = None
        self.started: ev.WorkflowStarted | None = None
        """The run's first event once applied: what `workflow.info()` reads beyond the ids."""

    @property
    def recorded_steps(self) -> int:
        """Recorded step events the instance keeps to match replayed steps against.

        Only the steps the code has not reached yet: a step is matched once, and an instance
        that replayed up to its block point keeps none. What a cache weighs it by
        (worker/sticky_cache.py).
        """
        return len(self._recorded)

    @property
    def awaits_recorded_outcomes(self) -> bool:
        """Whether the code awaits a recorded local activity whose outcome was not fed yet."""
        return bool(self._local_waiting)

    def _forget_reached_steps(self) -> None:
        """Let go of the recorded steps the code has taken: none is looked up again.

        Steps are looked up only at `_next_step`, which never goes back, so a long replayed
        history does not stay in memory through its records. They are dropped in the order
        they were recorded, from the oldest, so each is dropped once (behind a step recorded
        out of order, the rest wait for it); an emptied table is given back whole.
        """
        order, recorded = self._recorded_order, self._recorded
        while order and order[0] < self._next_step:
            recorded.pop(order.popleft(), None)
        if not recorded:
            recorded.clear()

    def _nondeterminism(self, seq: int, expected: str, recorded: str) -> NoReturn:
        self._failure = NondeterminismError(
            run_id=self.run.run_id, seq=seq, expected=expected, recorded=recorded
        )
        raise ReplayAborted()

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

    def _encode(self, value: object, what: str) -> Payload:
        return payloads.encode_value(value, limit=self.max_payload_bytes, what=what)

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
