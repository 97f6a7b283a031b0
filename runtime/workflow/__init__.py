"""Workflow authoring API: decorators plus the durable calls workflow code may make.

Each name lives in a small module (options, activities, local_activities, sessions, calls,
log, definition, unsafe); workflow code reaches the engine only through `context.Runtime`.
"""

from __future__ import annotations

from burrow.workflow import unsafe
from burrow.workflow.activities import activity
from burrow.workflow.calls import (
    ParentInfo,
    WorkflowInfo,
    continue_as_new,
    get_version,
    info,
    is_replaying,
    now,
    random,
    side_effect,
    sleep,
    uuid4,
    wait_condition,
)
from burrow.workflow.children import (
    ChildCancellationPolicy,
    ChildWorkflowHandle,
    ChildWorkflowOptions,
    ParentClosePolicy,
    execute_child_workflow,
    start_child_workflow,
)
from burrow.workflow.definition import (
    WorkflowDefinition,
    defn,
    get_definition,
    query,
    run,
    signal,
    update,
)
from burrow.workflow.local_activities import local_activity
from burrow.workflow.log import logger
from burrow.workflow.options import (
    MAX_DURATION_SECONDS,
    ActivityCancellationPolicy,
    ActivityOptions,
    LocalActivityOptions,
    RetryPolicy,
)
from burrow.workflow.options import (
    Duration as Duration,  # importable as before, not exported
)
from burrow.workflow.sessions import WorkerSession, WorkerSessionOptions, worker_session
from burrow.workflow.visibility import (
    SearchAttributeValue,
    memo,
    search_attributes,
    upsert_memo,
    upsert_search_attributes,
)

__all__ = [
    "MAX_DURATION_SECONDS",
    "ActivityCancellationPolicy",
    "ActivityOptions",
    "ChildCancellationPolicy",
    "ChildWorkflowHandle",
    "ChildWorkflowOptions",
    "LocalActivityOptions",
    "ParentClosePolicy",
    "ParentInfo",
    "RetryPolicy",
    "SearchAttributeValue",
    "WorkerSession",
    "WorkerSessionOptions",
    "WorkflowDefinition",
    "WorkflowInfo",
    "activity",
    "continue_as_new",
    "defn",
    "execute_child_workflow",
    "get_definition",
    "get_version",
    "info",
    "is_replaying",
    "local_activity",
    "logger",
    "memo",
    "now",
    "query",
    "random",
    "run",
    "search_attributes",
    "side_effect",
    "signal",
    "sleep",
    "start_child_workflow",
    "unsafe",
    "update",
    "upsert_memo",
    "upsert_search_attributes",
    "uuid4",
    "wait_condition",
    "worker_session",
]
