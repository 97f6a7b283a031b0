"""The SDK's condition waits (`ctx.wait_condition`) on Burrow's engine (PROTOCOL.md 7, 8.2).

The SDK sends `open_condition_wait` when its predicate is false, and nothing at all when a
later workflow task finds it true: it just goes on. Woken while the predicate is still false,
it sends `open_condition_wait` again, with the same key and fingerprint; its replay takes the
repeated opens as one wait. So the server derives what the code decided from the waits left
open before the task (`open_waits`):

* a wait the batch opens again is re-opened (`supersedes`: the new step keeps its timer);
* any other open wait was found true: `satisfy_condition_wait` goes first in the batch, naming
  the last signal received since the wait opened.

Not for an update's task (it runs the update handler alone) nor a batch that fails the run (a
predicate that raised fails it: nothing was satisfied). The timeout is a durable timer whose
firing records `ConditionWaitTimedOut` (burrow.store.condition_waits).

Field errors of `open_condition_wait` are 422 `validation_failed`, as the Durable Workflow
server's request validation gives them (`commands.N.field`); anything else wrong is 409
`invalid_commands`, with nothing written.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from burrow.protocol import events as ev
from burrow.protocol.shapes import JsonDict
from burrow.server.api_errors import ApiError

OPEN = "open_condition_wait"
SATISFY = "satisfy_condition_wait"
EVENT_TYPES = (
    *(kind.event_type for kind in ev.CONDITION_WAIT_EVENTS),
    ev.SignalReceived.event_type,
)
"""The events `open_waits` reads."""

_STRINGS = ("condition_key", "condition_definition_fingerprint")
_DERIVED = ("supersedes",)


def validate(commands: Sequence[JsonDict]) -> None:
    """Refuse field errors of `open_condition_wait` (422) and commands only the server makes."""
    errors: dict[str, list[str]] = {}
    for index, command in enumerate(commands):
        kind = command.get("type")
        if kind == SATISFY:
            raise ApiError(
                409,
                "invalid_commands",
                f"command {index}: {SATISFY} is derived by the server, not sent",
                command=index,
            )
        if kind != OPEN:
            continue
        for name in _STRINGS:
            value = command.get(name)
            if value is not None and not isinstance(value, str):
                errors.setdefault(f"commands.{index}.{name}", []).append(
                    f"The commands.{index}.{name} field must be a string."
                )
        timeout = command.get("timeout_seconds")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0
        ):
            errors.setdefault(f"commands.{index}.timeout_seconds", []).append(
                f"The commands.{index}.timeout_seconds field must be an integer of at least 0."
            )
        for name in _DERIVED:
            if name in command:
                raise ApiError(
                    409,
                    "invalid_commands",
                    f"command {index}: {name!r} is derived by the server, not sent",
                    command=index,
                )
    if errors:
        fields = ", ".join(errors)
        raise ApiError(422, "validation_failed", f"invalid request: {fields}", errors=errors)


@dataclass(frozen=True, slots=True)
class OpenWait:
    """A wait left open before the task, and the last signal received since it opened."""

    opened: ev.ConditionWaitOpened
    signal: ev.SignalReceived | None

    @property
    def identity(self) -> tuple[str | None, str | None]:
        """What the SDK compares to take a new open as this wait again."""
        return _identity(self.opened)


def _identity(opened: ev.ConditionWaitOpened) -> tuple[str | None, str | None]:
    return opened.condition_key, opened.condition_definition_fingerprint


def open_waits(history: Sequence[ev.HistoryEvent]) -> list[OpenWait]:
    """The waits neither resolved nor re-opened by a later open, in step order."""
    opened: dict[str, ev.ConditionWaitOpened] = {}
    signals: dict[str, ev.SignalReceived] = {}
    for record in history:
        event = record.event
        match event:
            case ev.ConditionWaitOpened():
                identity = _identity(event)
                for wait_id, earlier in list(opened.items()):
                    if _identity(earlier) == identity:
                        del opened[wait_id]  # re-opened: this open is the same wait now
                        signals.pop(wait_id, None)
                opened[event.condition_wait_id] = event
            case ev.ConditionWaitSatisfied() | ev.ConditionWaitTimedOut():
                opened.pop(event.condition_wait_id, None)
                signals.pop(event.condition_wait_id, None)
            case ev.SignalReceived():
                for wait_id in opened:
                    signals[wait_id] = event
    return [OpenWait(wait, signals.get(wait_id)) for wait_id, wait in opened.items()]


def _closes_failed(commands: Sequence[JsonDict]) -> bool:
    return bool(commands) and commands[-1].get("type") == "fail_workflow"


def derive(commands: Sequence[JsonDict], waits: Sequence[OpenWait]) -> list[JsonDict]:
    """The batch with what the code decided about each open wait (see the module docstring)."""
    if not waits or _closes_failed(commands):
        return list(commands)
    left = list(waits)
    rewritten: list[JsonDict] = []
    for command in commands:
        if command.get("type") == OPEN:
            identity = (command.get(_STRINGS[0]), command.get(_STRINGS[1]))
            same = next((wait for wait in left if wait.identity == identity), None)
            if same is not None:
                left.remove(same)
                command = {**command, "supersedes": same.opened.sequence}
        rewritten.append(command)
    satisfied = [_satisfy(wait) for wait in left]
    return [*satisfied, *rewritten]


def _satisfy(wait: OpenWait) -> JsonDict:
    opened = wait.opened
    command: JsonDict = {"type": SATISFY, "sequence": opened.sequence}
    optional = {
        "condition_key": opened.condition_key,
        "condition_definition_fingerprint": opened.condition_definition_fingerprint,
        "timeout_seconds": opened.timeout_seconds,
        "workflow_signal_id": None if wait.signal is None else wait.signal.signal_id,
        "signal_name": None if wait.signal is None else wait.signal.signal_name,
    }
    command.update({k: v for k, v in optional.items() if v is not None})
    return command


class KnownWaits:
    """The open waits of tasks this process leased, as their claims saw them (by task, attempt).

    A completion in the same process then needs no read of its run's waits: the history of a
    leased task changes only through its own completion (the inbox joins at the next claim).
    Bounded: the oldest entries go first (their completions read the waits again).
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._known: OrderedDict[tuple[str, int], tuple[OpenWait, ...]] = OrderedDict()

    def remember(self, task_id: str, attempt: int, history: Sequence[ev.HistoryEvent]) -> None:
        """Keep what a claim's whole history says about the run's open waits."""
        self._known[(task_id, attempt)] = tuple(open_waits(history))
        while len(self._known) > self._limit:
            self._known.popitem(last=False)

    def get(self, task_id: str, attempt: int) -> tuple[OpenWait, ...] | None:
        """The open waits known for that lease, or None if this process did not see its claim."""
        return self._known.get((task_id, attempt))

    def forget(self, task_id: str, attempt: int) -> None:
        """Drop a completed lease's entry."""
        self._known.pop((task_id, attempt), None)
