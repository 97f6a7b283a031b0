"""The steps workflow code takes through the Runtime: activities, side effects, versions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TypeVar

from burrow import payloads
from burrow.errors import UnknownActivityType
from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.shapes import (
    ActivityCancellationPolicyName,
    LocalActivitySpec,
    RetrySpec,
    SessionSpec,
    activity_execution_id,
)
from burrow.replay.activation import (
    LocalActivityRequest,
    ReplayAborted,
    ReplayStateError,
    describe_event,
)
from burrow.replay.inputs import EventInputs
from burrow.replay.sandbox import unguarded

T = TypeVar("T")


class Steps(EventInputs):
    """The Runtime calls that record or replay a step (`burrow.workflow.context.Runtime`)."""

    def schedule_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        queue: str | None,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
        worker_session: SessionSpec | None = None,
        connection: str | None = None,
        cancellation_policy: ActivityCancellationPolicyName | None = None,
    ) -> asyncio.Future[object]:
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
                connection=connection,
                retry_policy=retry_policy,
                worker_session=worker_session,
                cancellation_policy=cancellation_policy,
                **timeouts,
            )
        )
        future: asyncio.Future[object] = self.loop.create_future()
        self._results[seq] = future
        self._result_types[seq] = (activity_type, result_type)
        return future

    def cancel_activity(self, result: asyncio.Future[object], *, wait: bool) -> None:
        """Ask the queued activity whose result `result` is to stop, once (not when it ended)."""
        seq = next((n for n, future in self._results.items() if future is result), None)
        if seq is None or seq in self._activity_cancels:
            return
        self._activity_cancels.add(seq)
        self._emit(cmd.CancelActivity(sequence=seq, wait=wait))

    def local_activity(
        self,
        activity_type: str,
        args: Sequence[object],
        *,
        retry_policy: RetrySpec,
        timeouts: Mapping[str, float | None],
        result_type: object,
    ) -> asyncio.Future[object]:
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
        future: asyncio.Future[object] = self.loop.create_future()
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
            (i for i in range(len(self._commands) - 1, -1, -1) if self._commands[i] is request),
            None,
        )
        if place is None:
            raise ReplayStateError(
                f"local activity step {request.seq} holds no place among the commands",
                run_id=self.run.run_id,
                seq=request.seq,
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

    def side_effect(self, fn: Callable[[], T]) -> T:
        """Run `fn` once and record its value; replays return the recorded value."""
        seq = self._next_step
        recorded = self._recorded.get(seq)
        if isinstance(recorded, ev.SideEffectRecorded):
            self._step(lambda n: cmd.RecordSideEffect(seq=n, result=""))
            replayed: T = payloads.decode_value(
                {"codec": recorded.payload_codec, "blob": recorded.result}
            )
            return replayed
        with unguarded():  # the one place non-deterministic code is meant to run
            value = fn()
        encoded = self._encode(value, "side effect result")
        self._step(lambda n: cmd.RecordSideEffect.of(encoded, seq=n))
        # The caller gets the value as replay will give it: the codec's plain form.
        plain: T = payloads.decode_value(encoded)
        return plain

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

    def uuid4(self) -> uuid.UUID:
        """A deterministic UUID from the run's seeded generator."""
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def after(self, delay: float | timedelta) -> float:
        """Seconds from a float or timedelta."""
        return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
