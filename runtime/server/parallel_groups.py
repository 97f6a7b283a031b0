"""The SDK's parallel groups (PROTOCOL.md 7, 8.3): checked on the way in, shown on the way out.

A list the SDK yields arrives as one batch of step commands carrying `parallel_group_*`
metadata; the SDK's replay needs that metadata back on the history events of those steps, on
the resolving ones above all: it puts results that arrive out of order back into yielded order
by `base_sequence + index`, and without it takes them in arrival order.

Burrow's history does not keep the metadata; the server derives it instead, exactly, from what
the history does keep. An SDK workflow is a generator blocked on any step it has not got a
result for, so the steps of one batch that wait for a result (activities, timers, children)
come from one yielded list; its members are those steps in order. So a batch is taken only if
that holds: its group (at most one, flat, not a `select`) covers every waiting step of the
batch and its base and indexes name the steps Burrow assigns them, consecutive in submission
order (the Durable Workflow server's `parallelCommandsMatchSequences`). On the way out, the
waiting steps opened by one workflow task, two or more of them, are that group again.
`select` groups are checked and shown by `burrow.server.selections`. A group of local calls
is admitted before it runs (`checkpoint-group`, local_activity_routes.py), its openings
recording the group (`local_preparation`), which is shown from there; the completion never
carries it, so group metadata on `record_local_activity` is still refused here.

While some members of a group still wait, the SDK's replay yields the list again and sends
the whole group once more, with its first base: a group that names steps the history already
holds is taken as that same group (each member as the history shows it) and applied as nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from burrow.protocol import commands as cmd
from burrow.protocol import events as ev
from burrow.protocol import shown_groups
from burrow.protocol.shapes import JsonDict
from burrow.server import selections
from burrow.server.api_errors import ApiError

KEYS = shown_groups.PARALLEL_GROUP_SHOWN_KEYS
_SELECTION_KEYS = ("parallel_group_mode", "selection_member_key", "selection_member_index")
_STEP_TYPES = frozenset(str(c.model_fields["type"].default) for c in cmd.STEP_COMMANDS)
_WAITING_KINDS = {
    "schedule_activity": "activity",
    "start_timer": "timer",
    "start_child_workflow": "child",
}
_PREFIXES = {
    "activity": "parallel-activities",
    "child": "parallel-children",
    "timer": "parallel-timers",
    "mixed": "parallel-calls",
}


def _refused(index: int, message: str) -> ApiError:
    return ApiError(409, "invalid_commands", f"command {index}: {message}", command=index)


def entry(base: int, size: int, index: int, kind: str) -> JsonDict:
    """One group path entry, as the SDK builds it."""
    return {
        "parallel_group_id": f"{_PREFIXES[kind]}:{base}:{size}",
        "parallel_group_kind": kind,
        "parallel_group_base_sequence": base,
        "parallel_group_size": size,
        "parallel_group_index": index,
    }


def _kind(kinds: Sequence[str]) -> str:
    return kinds[0] if len(set(kinds)) == 1 else "mixed"


def has_group(commands: Sequence[JsonDict]) -> bool:
    """Whether any command carries group metadata (then `check` needs the run's next step)."""
    return any(key in command for command in commands for key in (*KEYS, *_SELECTION_KEYS))


def next_step(history: Sequence[ev.HistoryEvent]) -> int:
    """The step the run's next step command gets (PROTOCOL.md 8.3: consecutive from 1)."""
    steps = [r.event.sequence for r in history if isinstance(r.event, ev.STEP_EVENTS)]
    return max(steps, default=0) + 1


def check(commands: Sequence[JsonDict], history: Sequence[ev.HistoryEvent]) -> list[JsonDict]:
    """Refuse (409 `invalid_commands`) group metadata the history could not give back.

    Returns the commands to apply: all of them, less the members of a group the history
    already holds. The SDK sends a group again, as it was, while some of its members wait
    (its replay re-emits a partly resolved list); such a group names steps below the run's
    next one, and is taken only if it is the group the history shows there, member by member.
    """
    first_free_step = next_step(history)
    members: list[tuple[int, JsonDict]] = []  # (command index, command) of the group
    waiting: list[int] = []  # command indexes of the steps that wait for a result
    for index, command in enumerate(commands):
        kind = str(command.get("type"))
        grouped = any(key in command for key in KEYS)
        if any(key in command for key in _SELECTION_KEYS):
            raise _refused(index, "durable select() groups are not supported")
        if grouped and kind not in _WAITING_KINDS:
            raise _refused(index, f"parallel group metadata on {kind!r}")
        if kind in _WAITING_KINDS:
            waiting.append(index)
        if grouped:
            members.append((index, command))
    if not members:
        return list(commands)
    if [index for index, _ in members] != waiting:
        raise _refused(members[0][0], "a parallel group must hold every waiting step of its batch")
    first_step = first_free_step + sum(
        1 for command in commands[: waiting[0]] if str(command.get("type")) in _STEP_TYPES
    )
    declared = members[0][1].get("parallel_group_base_sequence")
    base = declared if isinstance(declared, int) and not isinstance(declared, bool) else 0
    resent = 1 <= base < first_step
    recorded = _opened(history) if resent else {}
    kinds = [_WAITING_KINDS[str(command["type"])] for _, command in members]
    for position, (index, command) in enumerate(members):
        path = command.get("parallel_group_path")
        if path is not None and not isinstance(path, list):
            raise _refused(index, "parallel_group_path must be a list")
        if path is not None and len(path) != 1:
            raise _refused(index, "nested parallel groups are not supported")
        expected: JsonDict | None
        if resent:
            step = base + position
            expected, own = recorded.get(step, (None, None))
            shown = f"step {step}, which the history shows as {own or 'no waiting'} step {expected}"
            if own != kinds[position]:
                expected = None  # the history holds another kind of step there, or none
        else:
            step = first_step + position
            expected = entry(first_step, len(members), position, _kind(kinds))
            shown = f"step {step} of its batch, which is {expected}"
        leaf = {key: command.get(key) for key in KEYS[:-1]}
        same = expected is not None and all(
            type(leaf[key]) is type(value) and leaf[key] == value for key, value in expected.items()
        )
        if not same or (path is not None and path[0] != expected):
            raise _refused(index, f"parallel group member {position} is {leaf}, but names {shown}")
        if resent and expected is not None and expected["parallel_group_size"] != len(members):
            raise _refused(index, f"the group at step {base} has other members than this one")
    if not resent:
        return list(commands)
    again = {index for index, _ in members}
    return [command for index, command in enumerate(commands) if index not in again]


def strip(command: JsonDict) -> JsonDict:
    """The command without its group metadata (the store does not take it)."""
    command = selections.strip(command)
    if not any(key in command for key in KEYS):
        return command
    return {k: v for k, v in command.items() if k not in KEYS}


def _waiting_kind(event: ev.Event) -> str | None:
    match event:
        case ev.ActivityScheduled() if event.execution_mode != "local":
            return "activity"
        case ev.TimerScheduled():
            return "timer"
        case ev.ChildWorkflowScheduled():
            return "child"
    return None


def _opened(history: Sequence[ev.HistoryEvent]) -> dict[int, tuple[JsonDict, str]]:
    """Each waiting step's path entry and kind, by step: one task's waiting steps, in order.

    The steps of a prepared group are its own (`_prepared`), whichever task opened them.
    """
    opened: dict[str, list[tuple[int, str]]] = {}
    prepared = _prepared(history)
    for record in history:
        kind = _waiting_kind(record.event)
        step = getattr(record.event, "sequence", None)
        if kind is None or record.workflow_task_id is None or not isinstance(step, int):
            continue
        if step in prepared:
            continue
        opened.setdefault(record.workflow_task_id, []).append((step, kind))
    found: dict[int, tuple[JsonDict, str]] = {}
    for steps in opened.values():
        base, kind = steps[0][0], _kind([k for _, k in steps])
        for index, (step, own) in enumerate(steps):
            found[step] = (entry(base, len(steps), index, kind), own)
    return found


def groups_of(history: Sequence[ev.HistoryEvent]) -> dict[int, JsonDict]:
    """Each grouped step's path entry, by step: the waiting steps one task opened, 2 or more."""
    found = {
        step: leaf
        for step, (leaf, _) in _opened(history).items()
        if leaf["parallel_group_size"] > 1
    }
    found.update(_prepared(history))
    found.update(selections.paths_of(history))  # a select group's steps show their own path
    return found


def _prepared(history: Sequence[ev.HistoryEvent]) -> dict[int, JsonDict]:
    """Each step of a prepared group (any size, local or not), as its local openings record it."""
    found: dict[int, JsonDict] = {}
    for record in history:
        event = record.event
        if not isinstance(event, ev.ActivityScheduled) or event.local_preparation is None:
            continue
        group = event.local_preparation
        base, size = group.parallel_group_base_sequence, group.parallel_group_size
        if base is None or size is None:
            continue
        kind = group.parallel_group_kind or "activity"
        for index in range(size):
            found[base + index] = entry(base, size, index, kind)
    return found


_FAMILIES = shown_groups.PARALLEL_GROUP_SHOWN_ON


def annotate(record: JsonDict, groups: Mapping[int, JsonDict]) -> JsonDict:
    """A rendered history record with its step's group metadata, when its step has a group."""
    payload = record.get("payload")
    if not groups or not isinstance(payload, dict):
        return record
    step = payload.get("sequence")
    kind = str(record.get("event_type", ""))
    if not isinstance(step, int) or step not in groups or not kind.startswith(_FAMILIES):
        return record
    leaf = groups[step]
    return {**record, "payload": {**payload, **leaf, "parallel_group_path": [dict(leaf)]}}
