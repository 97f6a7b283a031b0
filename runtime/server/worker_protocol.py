"""Protocol versions and the capabilities this server honestly advertises (PROTOCOL.md 2.3, 3).

Only what works is advertised: query tasks, update validation, worker sessions, local
activities, sticky execution; no other 1.20 extras. The SDK treats an absent capability as off.
"""

from __future__ import annotations

import re

WORKER_PROTOCOL_VERSION = "1.20"
WORKER_PROTOCOL_HEADER = "X-Durable-Workflow-Protocol-Version"
CONTROL_PLANE_VERSION = "2"
CONTROL_PLANE_HEADER = "X-Durable-Workflow-Control-Plane-Version"
HISTORY_PAGE_SIZE_DEFAULT = 500
HISTORY_PAGE_SIZE_MAX = 1000
LONG_POLL_TIMEOUT_MAX = 60

SUPPORTED_WORKFLOW_TASK_COMMANDS = [
    "complete_workflow",
    "fail_workflow",
    "continue_as_new",
    "schedule_activity",
    "start_timer",
    "record_side_effect",
    "record_version_marker",
    "record_local_activity",
    "start_child_workflow",
    "open_condition_wait",
    "cancel_selection_operation",
    "upsert_memo",
    "upsert_search_attributes",
]
UPDATE_WAIT_STAGES = ["accepted", "completed"]


WORKER_SESSION_VERBS = ["create", "heartbeat", "close"]


def worker_sessions_contract() -> dict[str, object]:
    """`server_capabilities.worker_sessions`: the runtime contract of sessions (W9, 12)."""
    return {
        "supported": True,
        "minimum_protocol_version": "1.18",
        "verbs": list(WORKER_SESSION_VERBS),
        "endpoints": {
            "create": "POST /worker/sessions",
            "heartbeat": "POST /worker/sessions/{sessionId}/heartbeat",
            "close": "DELETE /worker/sessions/{sessionId}",
        },
        "options": {
            "lease_seconds": 120,
            "ttl_seconds": 1800,
            "max_concurrent_activities": 1,
            "create_if_missing": True,
            "allow_reacquire_after_failure": True,
        },
        "statuses": ["active", "closed", "expired", "failed", "orphaned"],
        "failure_reasons": [
            "ttl_expired",
            "lease_expired",
            "worker_heartbeat_stale",
            "worker_shutdown",
        ],
        "admission": "requirements_subset_of_registered_capabilities",
        "activity_heartbeat_renews_session": True,
    }


def sticky_execution_contract() -> dict[str, object]:
    """`server_capabilities.sticky_execution` (PROTOCOL.md 11; SPEC S3-S7, S10).

    Routing and binding only: caches belong to workers (S2), and every task still carries its
    history from sequence 1, so a worker without a valid entry replays cold (S6).
    """
    return {
        "supported": True,
        "minimum_protocol_version": "1.18",
        "replay_modes": ["sticky_hit_expected", "cold_replay", "forced_cold_replay"],
        "completion_field": "sticky_cache",
        "cache_directives": ["resume_if_present", "cold_replay"],
    }


def synchronous_update_validation_contract() -> dict[str, object]:
    """`server_capabilities.synchronous_update_validation` (PROTOCOL.md 3.3, 6.5).

    An update whose worker declares a validator is accepted only once the validator approved
    it; SDK workers take validation tasks on their workflow task poll.
    """
    return {
        "supported": True,
        "acceptance_boundary": "validator_approved",
        "worker_capability": "update_validation_tasks",
        "workflow_contract_field": "update_validators",
        "task_poll": {
            "strategy": "multiplexed",
            "endpoint": "/worker/workflow-tasks/poll",
            "request_field": "task_kinds",
            "task_kinds": ["workflow", "update_validation"],
            "response_discriminator": "task.task_kind",
        },
    }


def server_capabilities() -> dict[str, object]:
    """`worker_protocol.server_capabilities`: what the worker plane supports."""
    return {
        "long_poll_timeout": LONG_POLL_TIMEOUT_MAX,
        "supported_workflow_task_commands": list(SUPPORTED_WORKFLOW_TASK_COMMANDS),
        "workflow_task_poll_request_idempotency": True,
        "poll_status": True,
        "history_page_size_default": HISTORY_PAGE_SIZE_DEFAULT,
        "history_page_size_max": HISTORY_PAGE_SIZE_MAX,
        # Queries are worker-routed query tasks (PROTOCOL.md 6.3), answered by any worker.
        "query_tasks": True,
        "query_task_poll_request_idempotency": True,
        # Issue 30: upserts recorded as MemoUpserted / SearchAttributesUpserted steps.
        "workflow_memo_updates": {"supported": True, "worker_capability": "memo_upserts"},
        "update_validation_tasks": True,
        "synchronous_update_validation": synchronous_update_validation_contract(),
        "activity_retry_policy": True,
        "activity_timeouts": True,
        "sticky_execution": sticky_execution_contract(),
        "local_activities": {"supported": True, "minimum_protocol_version": "1.18"},
        "worker_session_verbs": list(WORKER_SESSION_VERBS),
        "worker_sessions": worker_sessions_contract(),
        # Issue 28: a child's close policy, retry policy and timeouts are the store's (the
        # repair pass applies policies and deadlines; a failed child run is retried).
        "child_workflow_retry_policy": True,
        "child_workflow_timeouts": True,
        "parent_close_policy": True,
        # PROTOCOL.md 10: blobs uploaded to /api/external-payloads/v1, references resolved at
        # ingress (external_payload_ingress.py); the manifest is discovery's `namespace`.
        "runtime_external_payload_transport": True,
        # Protocol 1.20: request-cancellation, the claim's `cancellation_request` and
        # deliver-cancellation (cancellation_routes.py); scopes are not served.
        "cooperative_cancellation": True,
        # Protocol 1.20 prepared local activities, alone and in parallel groups of local calls
        # (local_activity_routes.py); no explicit local cancellation policies.
        "prepared_local_activities": True,
        "prepared_local_activity_groups": True,
        # POST /worker/activity-tasks/{taskId}/renew-lease: liveness without progress; leased
        # polls carry `server_time`, heartbeats `last_heartbeat_at` (activity_task_routes.py).
        "activity_lease_renewal": True,
        # GET /worker/query-tasks/{id}/status: a query claim observed, never renewed; leased
        # query tasks carry their admission, deadline and `server_time` (query_task_routes.py).
        "query_task_authority": True,
    }


# ASCII digits only, and few enough that int() never refuses them: "²" is a digit to
# str.isdigit(), and 5,000 digits pass Python's int-from-text limit (issue 25).
_VERSION = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})", re.ASCII)


def accepts_worker_version(requested: str | None) -> str | None:
    """None if `requested` is a worker protocol version we serve, else the refusal reason.

    Same major, minor not above ours (PROTOCOL.md 2.3). Anything but MAJOR.MINOR in ASCII
    digits is unsupported, never an error.
    """
    if not requested:
        return "missing_protocol_version"
    ours_major, ours_minor = (int(p) for p in WORKER_PROTOCOL_VERSION.split("."))
    parts = _VERSION.fullmatch(requested.strip())
    if parts is None:
        return "unsupported_protocol_version"
    major, minor = int(parts[1]), int(parts[2])
    if major != ours_major or minor > ours_minor:
        return "unsupported_protocol_version"
    return None


def version_header(path: str) -> tuple[str, str]:
    """The version header of a response on `path`: worker plane or control plane (2.3)."""
    if path.startswith("/api/worker/"):
        return WORKER_PROTOCOL_HEADER, WORKER_PROTOCOL_VERSION
    return CONTROL_PLANE_HEADER, CONTROL_PLANE_VERSION


def worker_envelope() -> dict[str, object]:
    """What every worker-plane response carries besides its own fields."""
    return {
        "protocol_version": WORKER_PROTOCOL_VERSION,
        "server_capabilities": server_capabilities(),
    }
