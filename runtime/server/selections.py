"""The SDK's durable first-completion groups (`ctx.select`) on Burrow's engine (PROTOCOL.md 7, 8.2).

`ctx.select({...})` arrives as one batch of step commands, one per member, each carrying the
group's outer path entry with `parallel_group_mode: "select"` and its `selection_member_*`
(key, index, base, size, kind). Burrow takes groups whose members are single activities,
timers or children (`check`): the members start as ordinary steps, and `open_selection`,
derived here, records the group (SelectionGroupOpened) so the server can show each member
step's path again (`paths_of`).

The SDK never picks the winner itself: it waits for `SelectionResolved`. The first member step
whose terminal event reaches history wins: when a workflow task is claimed with such an event
and no resolution yet, the server appends SelectionResolved (`resolutions`) naming the member,
its durable identity (activity execution id, timer id, child run id) and the terminal event
(`outcome` `failed` for a failure, else `completed`). Losers keep running.

`cancel_selection_operation` (`handle.cancel()`) of a member that has not closed records
SelectionOperationCancelled, after the timer's or child's own cancel (`cancels`); an activity
member is only marked (its attempt runs on; its result is then ignored by the SDK). A member that
already closed is not cancelled: the command is dropped and its result stands.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol.shapes import JsonDict
from burrow.server.api_errors import ApiError

MODE = "parallel_group_mode"
CANCEL = "cancel_selection_operation"
MEMBER_KEYS = (
    MODE,
    "selection_member_key",
    "selection_member_index",
    "selection_member_base_sequence",
    "selection_member_size",
    "selection_member_kind",
)
"""The selection fields of a member's path entry (on top of the ordinary group fields)."""

_KINDS = {"schedule_activity": "activity", "start_timer": "timer", "start_child_workflow": "child"}
_STEP_TYPES = frozenset(str(c.model_fields["type"].default) for c in cmd.STEP_COMMANDS)
_FAILED = (
    ev.ActivityFailed,
    ev.ActivityTimedOut,
    ev.ActivityCancelled,
    ev.ChildRunFailed,
    ev.ChildRunCancelled,
    ev.ChildRunTerminated,
)
_COMPLETED = (ev.ActivityCompleted, ev.TimerFired, ev.ChildRunCompleted)


def is_select(commands: Sequence[JsonDict]) -> bool:
    """Whether the batch opens a select group."""
    return any(command.get(MODE) == "select" for command in commands)


def _refused(index: int, message: str) -> ApiError:
    return ApiError(409, "invalid_commands", f"command {index}: {message}", command=index)


def _valid_key(key: object) -> bool:
    if isinstance(key, bool):
        return False
    return (isinstance(key, str) and bool(key)) or (isinstance(key, int) and key >= 0)


def check(commands: Sequence[JsonDict], first_free_step: int) -> list[JsonDict]:
    """The batch with `open_selection` before the group's first member.

    409 if Burrow cannot give the group back exactly: nested or condition members, or metadata
    that does not name the steps the members get.
    """
    waiting = [i for i, c in enumerate(commands) if str(c.get("type")) in _KINDS]
    members = [i for i, c in enumerate(commands) if c.get(MODE) == "select"]
    for index in members:
        kind = str(commands[index].get("type"))
        if kind not in _KINDS:
            raise _refused(index, f"select members of type {kind!r} are not supported")
    if members != waiting:
        raise _refused(members[0], "a select group must hold every waiting step of its batch")
    base = first_free_step + sum(
        1 for command in commands[: members[0]] if str(command.get("type")) in _STEP_TYPES
    )
    size = len(members)
    group_id = f"select-calls:{base}:{size}"
    group_kind = commands[members[0]].get("parallel_group_kind")
    seen: set[object] = set()
    entries: list[JsonDict] = []
    for position, index in enumerate(members):
        command = commands[index]
        kind = _KINDS[str(command["type"])]
        key = command.get("selection_member_key")
        expected = entry(group_id, str(group_kind), base, size, position, key, kind)
        leaf = {name: command.get(name) for name in expected}
        path = command.get("parallel_group_path")
        if not isinstance(path, list) or len(path) != 1 or not isinstance(path[0], dict):
            raise _refused(index, "nested select members are not supported")
        if not _valid_key(key) or key in seen:
            raise _refused(index, f"select member key {key!r} is not a unique, valid key")
        if leaf != expected or path[0] != leaf:
            raise _refused(
                index,
                f"select member {position} is {leaf}, but as step {base + position}"
                f" of its batch it is {expected}",
            )
        seen.add(key)
        entries.append(
            {"key": key, "index": position, "base_sequence": base + position, "size": 1}
            | {"kind": kind}
        )
    opened: JsonDict = {
        "type": "open_selection",
        "selection_group_id": group_id,
        "group_kind": str(group_kind),  # `parallel_group_*` fields are taken off for the store
        "base_sequence": base,
        "size": size,
        "members": entries,
    }
    return [*commands[: members[0]], opened, *commands[members[0] :]]


def strip(command: JsonDict) -> JsonDict:
    """The command without its selection fields (the store does not take them)."""
    if not any(key in command for key in MEMBER_KEYS):
        return command
    return {k: v for k, v in command.items() if k not in MEMBER_KEYS}


def entry(
    group_id: str, group_kind: str, base: int, size: int, index: int, key: object, kind: str
) -> JsonDict:
    """A single-leaf member's path entry, as the SDK builds it."""
    return {
        "parallel_group_id": group_id,
        "parallel_group_kind": group_kind,
        MODE: "select",
        "parallel_group_base_sequence": base,
        "parallel_group_size": size,
        "parallel_group_index": index,
        "selection_member_key": key,
        "selection_member_index": index,
        "selection_member_base_sequence": base + index,
        "selection_member_size": 1,
        "selection_member_kind": kind,
    }


def _groups(history: Sequence[ev.HistoryEvent]) -> list[ev.SelectionGroupOpened]:
    return [r.event for r in history if isinstance(r.event, ev.SelectionGroupOpened)]


def paths_of(history: Sequence[ev.HistoryEvent]) -> dict[int, JsonDict]:
    """Each select member step's path entry, by step."""
    found: dict[int, JsonDict] = {}
    for group in _groups(history):
        for member in group.members:
            found[int(member["base_sequence"])] = entry(
                group.selection_group_id,
                group.parallel_group_kind,
                group.base_sequence,
                group.size,
                int(member["index"]),
                member["key"],
                str(member["kind"]),
            )
    return found


def event_id(record: ev.HistoryEvent) -> str:
    """A history record's durable id (PROTOCOL.md 8.1 `id`): its run and sequence."""
    return f"{record.run_id}:{record.sequence}"


def _step(event: ev.Event) -> int | None:
    step = getattr(event, "sequence", None)
    return step if isinstance(step, int) else None


def _identity(history: Sequence[ev.HistoryEvent], step: int) -> str | None:
    for record in history:
        event = record.event
        if _step(event) != step:
            continue
        match event:
            case ev.ActivityScheduled():
                return event.activity_execution_id
            case ev.TimerScheduled():
                return event.timer_id
            case ev.ChildWorkflowScheduled():
                return event.child_workflow_run_id or None
    return None


def _closed(history: Sequence[ev.HistoryEvent], step: int) -> ev.HistoryEvent | None:
    for record in history:
        if isinstance(record.event, (*_FAILED, *_COMPLETED)) and _step(record.event) == step:
            return record
    return None


def resolutions(history: Sequence[ev.HistoryEvent]) -> list[ev.SelectionResolved]:
    """SelectionResolved for each group not yet resolved whose first member closed."""
    resolved = {
        r.event.selection_group_id for r in history if isinstance(r.event, ev.SelectionResolved)
    }
    found: list[ev.SelectionResolved] = []
    for group in _groups(history):
        if group.selection_group_id in resolved:
            continue
        by_step = {int(m["base_sequence"]): m for m in group.members}
        first = next(
            (
                record
                for record in history
                if isinstance(record.event, (*_FAILED, *_COMPLETED))
                and _step(record.event) in by_step
            ),
            None,
        )
        if first is None:
            continue
        step = _step(first.event)
        assert step is not None  # found by it
        member = by_step[step]
        identity = _identity(history, step)
        if identity is None:
            continue
        found.append(
            ev.SelectionResolved(
                selection_group_id=group.selection_group_id,
                selection_group_base_sequence=group.base_sequence,
                selection_group_size=group.size,
                member_key=member["key"],
                member_index=int(member["index"]),
                member_base_sequence=step,
                member_size=1,
                operation_kind=str(member["kind"]),
                operation_identity=identity,
                outcome="failed" if isinstance(first.event, _FAILED) else "completed",
                resolution_event_id=event_id(first),
                resolution_event_type=first.event.event_type,
            )
        )
    return found


def cancels(commands: Sequence[JsonDict], history: Sequence[ev.HistoryEvent]) -> list[JsonDict]:
    """The batch with each member cancel resolved against history (see the module docstring)."""
    if not any(command.get("type") == CANCEL for command in commands):
        return list(commands)
    members = {
        (group.selection_group_id, int(member["base_sequence"])): member
        for group in _groups(history)
        for member in group.members
    }
    rewritten: list[JsonDict] = []
    for index, command in enumerate(commands):
        if command.get("type") != CANCEL:
            rewritten.append(command)
            continue
        step = command.get("member_base_sequence")
        member = members.get((str(command.get("selection_group_id")), step))  # type: ignore[arg-type]
        if member is None or not isinstance(step, int):
            raise _refused(index, "cancel_selection_operation names no member of an open select")
        if _closed(history, step) is not None:
            continue  # it closed first: nothing to cancel, its result stands
        kind = member["kind"]
        if kind == "timer":
            rewritten.append({"type": "cancel_timer", "sequence": step})
        elif kind == "child":
            rewritten.append({"type": "cancel_child_workflow", "sequence": step})
        rewritten.append(command)
    return rewritten
