"""SDK command shapes the store's command models do not take verbatim (PROTOCOL.md 7).

SDK 2.12.0 sends `fail_workflow` with catalogue fields Burrow's `FailWorkflow` does not model
(`exception_class`, `failed_step_sequence`, `failed_activity_execution_id`, and `exception`
carrying `type`/`class`/`message`). They are folded into the fields Burrow records: the
message, the exception type, and the nested details it keeps. Every other command passes on
unchanged, and the store validates all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from burrow.replay.shapes import ExceptionInfo

JsonDict = dict[str, Any]
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


def normalize(commands: Sequence[JsonDict]) -> list[JsonDict]:
    """The commands as the store reads them."""
    return [_fail_workflow(c) if c.get("type") == "fail_workflow" else c for c in commands]
