"""SDK command shapes the store's command models do not take verbatim (PROTOCOL.md 7).

SDK 2.12.0 sends `fail_workflow` with catalogue fields Burrow's `FailWorkflow` does not model
(`exception_class`, `failed_step_sequence`, `failed_activity_execution_id`, and `exception`
carrying `type`/`class`/`message`). They are folded into the fields Burrow records: the
message, the exception type, and the nested details it keeps. `fail_update` likewise carries
`exception_class`, which Burrow's `FailUpdate` does not record (the type names the failure).
`record_local_activity` heartbeat `details` arrive as plain JSON; Burrow records payloads, so
they are Avro-encoded as sent. `continue_as_new` without a `workflow_type` continues the same
type; `start_child_workflow` without `arguments` starts the child with none (the Durable
Workflow server takes it so, `WorkflowWorkerProtocolTest` sends one). Every other command
passes on unchanged, and the store validates all of them.

Step commands the SDK yields together (a list, PROTOCOL.md 7) carry `parallel_group_*`
metadata naming the step each expects: `base_sequence + index`. Burrow numbers the steps of a
batch consecutively in submission order (8.3), so the metadata is checked against that order
and dropped; the SDK's replay accepts histories without it (it compares a recorded path only
when one is there). A non-root `cancellation_scope_id` is not taken off: replay compares it, and
Burrow records no scopes, so such a command stays refused.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow import codec
from burrow.protocol import commands as cmd
from burrow.protocol.shapes import ExceptionInfo, JsonDict
from burrow.server.api_errors import ApiError

_FAIL_WORKFLOW_FIELDS = ("type", "message", "exception_type", "non_retryable")


def _fail_workflow(command: JsonDict) -> JsonDict:
    exception = command.get("exception")
    nested: JsonDict = exception if isinstance(exception, dict) else {}
    folded = {k: command[k] for k in _FAIL_WORKFLOW_FIELDS if k in command}
    if folded.get("message") is None and isinstance(nested.get("message"), str):
        folded["message"] = nested["message"]
    if folded.get("exception_type") is None and isinstance(nested.get("type"), str):
        folded["exception_type"] = nested["type"]
    kept = {k: v for k, v in nested.items() if k in ExceptionInfo.model_fields}
    if "stack" not in kept and isinstance(nested.get("stack_trace"), str):
        kept["stack"] = nested["stack_trace"]
    failed_activity = command.get("failed_activity_execution_id")
    if "activity_execution_id" not in kept and isinstance(failed_activity, str):
        kept["activity_execution_id"] = failed_activity
    if kept:
        folded["exception"] = kept
    return folded


def _fail_update(command: JsonDict) -> JsonDict:
    return {k: v for k, v in command.items() if k != "exception_class"}


def _is_envelope(value: object) -> bool:
    return isinstance(value, dict) and {"codec", "blob"} <= value.keys()


def _local_activity(command: JsonDict) -> JsonDict:
    attempts = command.get("attempts")
    if not isinstance(attempts, list):
        return command
    encoded = []
    for attempt in attempts:
        beats = attempt.get("heartbeats") if isinstance(attempt, dict) else None
        if isinstance(beats, list):
            beats = [
                {**beat, "details": dict(codec.encode(beat["details"]))}
                if isinstance(beat, dict)
                and beat.get("details") is not None
                and not _is_envelope(beat["details"])
                else beat
                for beat in beats
            ]
            attempt = {**attempt, "heartbeats": beats}
        encoded.append(attempt)
    return {**command, "attempts": encoded}


_ADAPTERS = {
    "fail_workflow": _fail_workflow,
    "fail_update": _fail_update,
    "record_local_activity": _local_activity,
}


PARALLEL_KEYS = (
    "parallel_group_id",
    "parallel_group_kind",
    "parallel_group_base_sequence",
    "parallel_group_size",
    "parallel_group_index",
    "parallel_group_path",
)
_STEP_TYPES = frozenset(str(c.model_fields["type"].default) for c in cmd.STEP_COMMANDS)


def _refused(index: int, message: str) -> ApiError:
    return ApiError(409, "invalid_commands", f"command {index}: {message}", command=index)


def _ints(command: JsonDict, *keys: str) -> list[int] | None:
    values = [command.get(key) for key in keys]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return [v for v in values if isinstance(v, int)]
    return None


def _check_group_members(commands: Sequence[JsonDict]) -> None:
    """Each parallel group's members are consecutive steps, in index order, all of them.

    Their steps are then `first step + index`, which is `base_sequence + index` when the
    SDK's base is the run's next step (the only base it computes, PROTOCOL.md 8.3).
    """
    groups: dict[str, tuple[int, int, int]] = {}  # group id -> (step of index 0, base, size)
    members: dict[str, int] = {}
    step = 0
    for index, command in enumerate(commands):
        grouped = any(key in command for key in PARALLEL_KEYS)
        if str(command.get("type")) not in _STEP_TYPES:
            if grouped:
                raise _refused(index, "parallel group metadata on a command that is not a step")
            continue
        step += 1
        if not grouped:
            continue
        group = command.get("parallel_group_id")
        numbers = _ints(
            command, "parallel_group_index", "parallel_group_base_sequence", "parallel_group_size"
        )
        if not isinstance(group, str) or numbers is None:
            raise _refused(index, "a parallel group member needs its id, index, base and size")
        member, base, size = numbers
        first = groups.setdefault(group, (step - member, base, size))
        if first != (step - member, base, size) or not 0 <= member < size:
            raise _refused(
                index,
                f"parallel group {group!r} member {member} is not step {base + member}"
                " of its batch",
            )
        members[group] = members.get(group, 0) + 1
    for group, (_, _, size) in groups.items():
        if members[group] != size:
            raise _refused(0, f"parallel group {group!r} has {members[group]} of {size} members")


def normalize(commands: Sequence[JsonDict]) -> list[JsonDict]:
    """The commands as the store reads them; 409 `invalid_commands` for a broken group."""
    _check_group_members(commands)
    normalized = []
    for command in commands:
        if any(key in command for key in PARALLEL_KEYS):
            command = {k: v for k, v in command.items() if k not in PARALLEL_KEYS}
        kind = str(command.get("type"))
        if kind in _ADAPTERS:
            command = _ADAPTERS[kind](command)
        elif kind == "start_child_workflow" and command.get("arguments") is None:
            command = {**command, "arguments": dict(codec.encode([]))}
        elif kind == "continue_as_new" and not command.get("workflow_type"):
            command = {**command, "workflow_type": ""}  # the store continues the run's own type
        normalized.append(command)
    return normalized
