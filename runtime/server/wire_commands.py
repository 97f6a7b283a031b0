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

A `fail_workflow` whose exception is the SDK's `WorkflowCancelled` is the workflow letting a
cancellation through (after its cleanup, protocol 1.20 cooperative cancellation): the run closes
as cancelled (`cancel_workflow`), as a Burrow workflow's does.

Parallel group metadata (PROTOCOL.md 7) is taken off after `parallel_groups.check`.
"""

from __future__ import annotations

from collections.abc import Sequence

from burrow import codec
from burrow.protocol.shapes import ExceptionInfo, JsonDict
from burrow.server import parallel_groups

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


WORKFLOW_CANCELLED = "WorkflowCancelled"


def _fail_or_cancel_workflow(command: JsonDict) -> JsonDict:
    folded = _fail_workflow(command)
    if folded.get("exception_type") != WORKFLOW_CANCELLED:
        return folded
    return {"type": "cancel_workflow", "message": folded.get("message") or "workflow cancelled"}


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
    "fail_workflow": _fail_or_cancel_workflow,
    "fail_update": _fail_update,
    "record_local_activity": _local_activity,
}


def normalize(commands: Sequence[JsonDict]) -> list[JsonDict]:
    """The commands as the store reads them (parallel group metadata taken off)."""
    normalized = []
    for command in commands:
        command = parallel_groups.strip(command)
        kind = str(command.get("type"))
        if kind in _ADAPTERS:
            command = _ADAPTERS[kind](command)
        elif kind == "start_child_workflow" and command.get("arguments") is None:
            command = {**command, "arguments": dict(codec.encode([]))}
        elif kind == "continue_as_new" and not command.get("workflow_type"):
            command = {**command, "workflow_type": ""}  # the store continues the run's own type
        normalized.append(command)
    return normalized
