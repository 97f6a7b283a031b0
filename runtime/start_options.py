"""The keyword options of `Client.start_workflow()` and `Client.start_activity()`, spelled once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from burrow.protocol import shapes
from burrow.store.models import IdReusePolicy
from burrow.workflow.options import Duration, RetryPolicy, to_seconds
from burrow.workflow.visibility import SearchAttributeValue


class StartOptions(TypedDict):
    """The keyword options of `Client.start_workflow()`, spelled once for its overloads."""

    task_queue: str
    id: NotRequired[str | None]
    check_workers: NotRequired[bool]
    id_reuse_policy: NotRequired[IdReusePolicy]
    build_id: NotRequired[str | None]
    connection: NotRequired[str]
    execution_timeout: NotRequired[Duration | None]
    run_timeout: NotRequired[Duration | None]
    retry_policy: NotRequired[RetryPolicy | None]
    memo: NotRequired[Mapping[str, object] | None]
    search_attributes: NotRequired[Mapping[str, SearchAttributeValue] | None]


class ActivityStartOptions(TypedDict):
    """The keyword options of `Client.start_activity()`, spelled once for its overloads."""

    task_queue: str
    id: NotRequired[str | None]
    connection: NotRequired[str]
    retry_policy: NotRequired[RetryPolicy | None]
    start_to_close_timeout: NotRequired[Duration | None]
    schedule_to_close_timeout: NotRequired[Duration | None]
    schedule_to_start_timeout: NotRequired[Duration | None]
    heartbeat_timeout: NotRequired[Duration | None]
    activity_class: NotRequired[str | None]
    business_key: NotRequired[str | None]


def workflow_timeouts(
    execution: Duration | None, run: Duration | None
) -> tuple[float | None, float | None]:
    """A start's (execution, run) timeouts in seconds, checked as `shapes.check_workflow_timeouts`.

    Raises:
        ValueError: not positive, past the maximum, or a run timeout above the execution one.
        TypeError: not a timedelta or a number.
    """
    try:
        found = (
            None if execution is None else to_seconds(execution, "execution_timeout"),
            None if run is None else to_seconds(run, "run_timeout"),
        )
        shapes.check_workflow_timeouts(*found)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"start_workflow: {exc}") from None
    return found
