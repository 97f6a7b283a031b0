"""Prepared local activities over the worker plane (PROTOCOL.md 5.6; SDK 2.12.0, 1.20).

The SDK's `Client.prepared_local_activity_operation` posts to
`/worker/workflow-tasks/{taskId}/local-activities/{operation}` (admission: checkpoint,
checkpoint-group, prepare, recover) and `.../local-activities/{activityAttemptId}/{operation}`
(control, heartbeat, outcome, acknowledge-cancellation), each naming the workflow task's lease.
Each receipt is checked by the SDK's own validators (`PreparedAttempt`), each resend is
answered `duplicate` from history, a stale lease is refused as on every fenced call, and bad
input is refused with its reason, nothing written.
"""

from __future__ import annotations

import time
from typing import Any

from durable_workflow._cooperative_cancellation import read_cancellation_history
from durable_workflow._prepared_local_activity import PreparedAttempt
from durable_workflow.client import _payload_completion_context

from burrow.codec import decode_blob
from burrow.testing.helpers import assert_eventually
from tests.integration.server.conftest import WORKER_TOKEN, Api, fence
from tests.integration.server.test_worker_plane import history_types

ADMISSIONS = ["checkpoint", "checkpoint-group", "prepare", "recover"]
ATTEMPT_CALLS = ["control", "heartbeat", "outcome", "acknowledge-cancellation"]
NONCE = "n" * 64
ARGS = {"codec": "avro", "blob": "AA=="}


def descriptor(**extra: Any) -> dict[str, Any]:
    """A local call as the SDK's `PreparedLocalActivityCall.descriptor` sends it."""
    return {
        "type": "record_local_activity",
        "activity_type": "greet",
        "execution_mode": "local",
        "arguments": ARGS,
        "payload_codec": "avro",
        "start_to_close_timeout": 60,
        **extra,
    }


def leaf(base: int, size: int, index: int, kind: str = "activity") -> dict[str, Any]:
    """A group path entry as the SDK builds it."""
    prefix = {"activity": "parallel-activities", "mixed": "parallel-calls"}[kind]
    return {
        "parallel_group_id": f"{prefix}:{base}:{size}",
        "parallel_group_kind": kind,
        "parallel_group_base_sequence": base,
        "parallel_group_size": size,
        "parallel_group_index": index,
    }


def member(base: int, size: int, index: int, kind: str = "activity") -> dict[str, Any]:
    """A `checkpoint-group` member of the SDK's shape (`prepare_local_activity`)."""
    entry = leaf(base, size, index, kind)
    return {
        **descriptor(),
        "type": "prepare_local_activity",
        **entry,
        "parallel_group_path": [entry],
    }


def path(task_id: str, operation: str, attempt: str = "attempt-1") -> str:
    """The SDK's path for the operation (an attempt call names the activity attempt)."""
    named = f"{attempt}/" if operation in ATTEMPT_CALLS else ""
    return f"/api/worker/workflow-tasks/{task_id}/local-activities/{named}{operation}"


def body(operation: str) -> dict[str, Any]:
    """A valid body of the SDK's shape for the operation (the caller adds the lease fence)."""
    match operation:
        case "checkpoint":
            side_effect = {"type": "record_side_effect", "result": ARGS}
            return {"checkpoint_id": "c" * 64, "start_sequence": 1, "commands": [side_effect]}
        case "checkpoint-group":
            return {"checkpoint_id": "g" * 64, "start_sequence": 1, "commands": [member(1, 1, 0)]}
        case "prepare":
            return {"sequence": 1, "worker_attempt_id": NONCE, "descriptor": descriptor()}
        case "recover":
            return {"sequence": 1, "descriptor": descriptor()}
        case "outcome":
            return {"report": {"outcome": "completed", "result": ARGS, "payload_codec": "avro"}}
        case "heartbeat":
            return {"progress": {}}
        case "acknowledge-cancellation":
            return {"request_id": "r1"}
        case _:
            return {"renew_lease": True}


async def leased(api: Api, workflow_id: str) -> tuple[str, dict[str, Any]]:
    await api.register()
    started = await api.start(workflow_id)
    return started["run_id"], await api.poll_workflow()


async def call(
    api: Api, task: dict[str, Any], operation: str, attempt: str = "", **extra: Any
) -> dict[str, Any]:
    """The operation on the task's claim; its 200 receipt."""
    url = path(task["task_id"], operation, attempt)
    response = await api.worker("POST", url, json=fence(task, **extra))
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def admitted(
    api: Api, task: dict[str, Any], run_id: str, **extra: Any
) -> tuple[dict[str, Any], PreparedAttempt]:
    """`prepare` of step 1 and the SDK's own validation of its receipt."""
    started = time.monotonic()
    receipt = await call(api, task, "prepare", **{**body("prepare"), **extra})
    attempt = PreparedAttempt.admitted(
        receipt,
        task_id=task["task_id"],
        run_id=run_id,
        owner=task["lease_owner"],
        epoch=task["workflow_task_attempt"],
        nonce=NONCE,
        heartbeat_timeout=extra.get("descriptor", {}).get("heartbeat_timeout"),
        cleanup=None,
        request_started=started,
    )
    return receipt, attempt


async def test_discovery_advertises_prepared_local_activities_and_groups(api: Api) -> None:
    """PROTOCOL 3.1, 5.6, 1.20, A3: the SDK negotiates prepared locals (and their groups) only when
    discovery advertises them beside cooperative cancellation; every SDK path is the one the
    server serves."""
    response = await api.http.get(
        "/api/cluster/info", headers={"Authorization": f"Bearer {WORKER_TOKEN}"}
    )
    capabilities = response.json()["worker_protocol"]["server_capabilities"]
    for name in ("cooperative_cancellation", "prepared_local_activities"):
        assert capabilities[name] is True
    assert capabilities["prepared_local_activity_groups"] is True
    for operation in [*ADMISSIONS, "outcome"]:
        url = path("t1", operation).removeprefix("/api")
        sent = {"lease_owner": "w1", "workflow_task_attempt": 1, **body(operation)}
        assert _payload_completion_context(url, sent, allow_prepared=True) is not None


async def test_prepare_control_heartbeat_outcome_record_the_activity_once(api: Api) -> None:
    """PROTOCOL 5.6, A3, D3: prepare records ActivityScheduled and ActivityStarted (the claim's
    lease renewed, the deadlines fixed), control and heartbeat keep it, outcome records
    ActivityCompleted; each receipt passes the SDK's validators and each resend is a
    duplicate of the same attempt. The completion then takes the next step (2)."""
    run_id, task = await leased(api, "wf-pla")
    heartbeat_descriptor = descriptor(heartbeat_timeout=30)
    receipt, attempt = await admitted(api, task, run_id, descriptor=heartbeat_descriptor)
    assert (receipt["duplicate"], receipt["attempt_number"]) == (False, 1)
    again = await call(
        api, task, "prepare", **{**body("prepare"), "descriptor": heartbeat_descriptor}
    )
    assert (again["duplicate"], again["activity_attempt_id"]) == (True, attempt.attempt_id)
    control = await call(api, task, "control", attempt.attempt_id, renew_lease=True)
    attempt.validate_control(control)
    assert (control["active"], control["renewed"]) == (True, True)
    beat = await call(api, task, "heartbeat", attempt.attempt_id, progress={"details": {"n": 1}})
    attempt.validate_control(beat, heartbeat=True)
    assert beat["heartbeat_history_event_id"].startswith(f"{run_id}:")
    done = await call(api, task, "outcome", attempt.attempt_id, **body("outcome"))
    attempt.validate_outcome(done)
    assert (done["event_type"], done["duplicate"], done["claim_released"]) == (
        "ActivityCompleted",
        False,
        False,
    )
    resent = await call(api, task, "outcome", attempt.attempt_id, **body("outcome"))
    assert (resent["duplicate"], resent["event_id"]) == (True, done["event_id"])
    assert await history_types(api, run_id) == [
        "WorkflowStarted",
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityHeartbeatRecorded",
        "ActivityCompleted",
    ]
    recorded = await api.state.store.read_history(run_id=run_id)
    progress = recorded[3].event.to_json()["progress"]
    assert decode_blob(progress["blob"], codec=progress["codec"]) == {"n": 1}
    timer = {"type": "start_timer", "delay_seconds": 60}
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    completed = await api.worker("POST", url, json=fence(task, commands=[timer]))
    assert completed.status_code == 200, completed.text
    recorded = await api.state.store.read_history(run_id=run_id)
    assert [(r.event_type, getattr(r.event, "sequence", None)) for r in recorded][-1] == (
        "TimerScheduled",
        2,
    )


async def test_an_attempt_past_its_heartbeat_deadline_must_stop(api: Api) -> None:
    """PROTOCOL 5.6, A3: once an attempt's heartbeat deadline passes, control and heartbeat answer
    inactive (`heartbeat_deadline_expired`, stop required, nothing renewed or recorded), in
    the shape the SDK's validators take; the deadlines never move."""
    run_id, task = await leased(api, "wf-pla-expired")
    _, attempt = await admitted(api, task, run_id, descriptor=descriptor(heartbeat_timeout=1))

    async def stopped() -> dict[str, Any] | None:
        answer = await call(api, task, "control", attempt.attempt_id)
        return None if answer["active"] else answer

    control = await assert_eventually(stopped, timeout=5, interval=0.2)
    attempt.validate_control(control)
    assert (control["reason"], control["stop_required"], control["renewed"]) == (
        "heartbeat_deadline_expired",
        True,
        False,
    )
    beat = await call(api, task, "heartbeat", attempt.attempt_id, progress={})
    attempt.validate_control(beat, heartbeat=True)
    assert (beat["active"], beat["heartbeat_recorded"]) == (False, False)
    assert await history_types(api, run_id) == [
        "WorkflowStarted",
        "ActivityScheduled",
        "ActivityStarted",
    ]


async def test_a_failed_attempt_retries_on_a_new_claim_then_fails(api: Api) -> None:
    """PROTOCOL 5.6, A3: a failure the retry policy retries is ActivityRetryScheduled, the claim
    released and the run's next task made, due after the backoff; the new claim prepares
    attempt 2, whose failure (no attempts left) is ActivityFailed on a claim kept."""
    run_id, task = await leased(api, "wf-pla-retry")
    retrying = descriptor(retry_policy={"max_attempts": 2, "backoff_seconds": [1]})
    _, attempt = await admitted(api, task, run_id, descriptor=retrying)
    failed = {"report": {"outcome": "failed", "message": "flaky", "exception_type": "IOError"}}
    retried = await call(api, task, "outcome", attempt.attempt_id, **failed)
    attempt.validate_outcome(retried)
    assert (retried["event_type"], retried["claim_released"]) == ("ActivityRetryScheduled", True)
    stale = await api.worker(
        "POST", path(task["task_id"], "control", attempt.attempt_id), json=fence(task)
    )
    assert stale.status_code == 409, stale.text
    assert await api.poll_workflow(timeout_seconds=0) is None  # due after the 1 s backoff
    task = await api.poll_workflow()
    assert task["task_id"] == retried["created_task_ids"][0]
    receipt, second = await admitted(api, task, run_id, descriptor=retrying)
    assert receipt["attempt_number"] == 2
    final = await call(api, task, "outcome", second.attempt_id, **failed)
    second.validate_outcome(final)
    assert (final["event_type"], final["claim_released"]) == ("ActivityFailed", False)
    assert await history_types(api, run_id) == [
        "WorkflowStarted",
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityRetryScheduled",
        "ActivityStarted",
        "ActivityFailed",
    ]


async def test_checkpoint_group_opens_every_member_at_once_shown_as_its_group(api: Api) -> None:
    """PROTOCOL 5.6, 7, 8.3, A3, D3: checkpoint-group records each member's ActivityScheduled in one
    call (idempotent on resend), and the worker's history shows each with the SDK's group
    path; a different batch for those steps, or a member no group can hold, is refused and
    writes nothing."""
    run_id, task = await leased(api, "wf-pla-group")
    group = {
        "checkpoint_id": "g" * 64,
        "start_sequence": 1,
        "commands": [member(1, 2, 0), member(1, 2, 1)],
    }
    receipt = await call(api, task, "checkpoint-group", **group)
    assert (receipt["checkpointed"], receipt["duplicate"], receipt["next_sequence"]) == (
        True,
        False,
        3,
    )
    assert [local["sequence"] for local in receipt["local_activities"]] == [1, 2]
    again = await call(api, task, "checkpoint-group", **group)
    assert (again["duplicate"], again["local_activities"]) == (True, receipt["local_activities"])
    history_url = f"/api/worker/workflow-tasks/{task['task_id']}/history"
    token = receipt["history_refresh_page_token"]
    reply = await api.worker("POST", history_url, json=fence(task, next_history_page_token=token))
    page = reply.json()
    opened = [
        e["payload"] for e in page["history_events"] if e["event_type"] == "ActivityScheduled"
    ]
    assert [p["parallel_group_path"] for p in opened] == [
        [member(1, 2, i)["parallel_group_path"][0]] for i in range(2)
    ]
    other = {**group, "commands": [member(1, 1, 0)]}
    url = path(task["task_id"], "checkpoint-group")
    conflict = await api.worker("POST", url, json=fence(task, **other))
    assert conflict.json()["reason"] == "prepared_checkpoint_conflict", conflict.text
    closing = {"type": "complete_workflow", **leaf(3, 2, 1, "mixed")}
    refused = await api.worker(
        "POST", url, json=fence(task, **{**group, "start_sequence": 3, "commands": [closing]})
    )
    assert refused.json()["reason"] == "invalid_commands", refused.text
    assert await history_types(api, run_id) == ["WorkflowStarted", *["ActivityScheduled"] * 2]


async def test_a_mixed_group_opens_its_timer_beside_its_local_call(api: Api) -> None:
    """PROTOCOL 5.6, 7, A3: a group of a local call and a timer (`parallel-calls`) opens both in
    one checkpoint: the local's ActivityScheduled and the timer's TimerScheduled (its timer
    row started, as a completion starts it), each shown at its place in the group."""
    run_id, task = await leased(api, "wf-pla-mixed")
    entry = leaf(1, 2, 1, "mixed")
    timer = {"type": "start_timer", "delay_seconds": 60, **entry, "parallel_group_path": [entry]}
    mixed = {"checkpoint_id": "m" * 64, "start_sequence": 1}
    mixed["commands"] = [member(1, 2, 0, "mixed"), timer]
    receipt = await call(api, task, "checkpoint-group", **mixed)
    assert [local["sequence"] for local in receipt["local_activities"]] == [1]
    again = await call(api, task, "checkpoint-group", **mixed)
    assert again["duplicate"] is True
    history_url = f"/api/worker/workflow-tasks/{task['task_id']}/history"
    reply = await api.worker("POST", history_url, json=fence(task))
    opened = [
        (e["event_type"], e["payload"]["parallel_group_path"])
        for e in reply.json()["history_events"]
        if e["event_type"] in ("ActivityScheduled", "TimerScheduled")
    ]
    assert opened == [
        ("ActivityScheduled", [leaf(1, 2, 0, "mixed")]),
        ("TimerScheduled", [leaf(1, 2, 1, "mixed")]),
    ]
    assert await history_types(api, run_id) == [
        "WorkflowStarted",
        "ActivityScheduled",
        "TimerScheduled",
    ]


async def test_checkpoint_records_the_prefix_and_recover_closes_a_lost_attempt(api: Api) -> None:
    """PROTOCOL 5.6, A3, D3: checkpoint records a side effect before the local call (idempotent); an
    attempt left open by a failed claim is closed by the next claim's recover as
    ActivityFailed with `local_recovery` (callback stop unknown), idempotent on resend."""
    run_id, task = await leased(api, "wf-pla-recover")
    first = await call(api, task, "checkpoint", **body("checkpoint"))
    assert (first["duplicate"], first["start_sequence"], first["next_sequence"]) == (False, 1, 2)
    again = await call(api, task, "checkpoint", **body("checkpoint"))
    assert again["duplicate"] is True
    prepared = {"sequence": 2, "worker_attempt_id": NONCE, "descriptor": descriptor()}
    lost = await call(api, task, "prepare", **prepared)
    url = f"/api/worker/workflow-tasks/{task['task_id']}/fail"
    failed = await api.worker("POST", url, json=fence(task, failure={"message": "worker lost"}))
    assert failed.status_code == 200, failed.text
    task = await api.poll_workflow()
    assert task["workflow_task_attempt"] == 2
    reopened = await api.worker(
        "POST", path(task["task_id"], "prepare"), json=fence(task, **prepared)
    )
    assert reopened.json()["reason"] == "prepared_local_attempt_open", reopened.text
    recovery = {"sequence": 2, "descriptor": descriptor()}
    closed = await call(api, task, "recover", **recovery)
    assert (closed["recovered"], closed["callback_stop_state"], closed["event_type"]) == (
        True,
        "unknown",
        "ActivityFailed",
    )
    assert closed["activity_attempt_id"] == lost["activity_attempt_id"]
    resent = await call(api, task, "recover", **recovery)
    assert (resent["duplicate"], resent["event_id"]) == (True, closed["event_id"])
    history = await api.state.store.read_history(run_id=run_id)
    assert [r.event_type for r in history] == [
        "WorkflowStarted",
        "SideEffectRecorded",
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityFailed",
    ]
    recovered = history[-1].event.to_json()["local_recovery"]
    assert recovered == {
        "workflow_task_id": task["task_id"],
        "workflow_task_attempt": 2,
        "lease_owner": "w1",
        "callback_stop_state": "unknown",
    }


async def test_a_local_call_in_cancellation_cleanup_ends_by_its_deadline(api: Api) -> None:
    """PROTOCOL 5.6, 6.5, A3: the worker's history shows the request with its cancellation context
    (the SDK's `cancellation-context/v1`); after its delivery (at the timer, step 1), a local
    call of the cleanup names the request and the delivery: its receipt carries that cleanup
    (the SDK's canonical shape) and its deadlines end by the cleanup deadline; a call naming
    another delivery is refused and writes nothing."""
    run_id, task = await leased(api, "wf-pla-cleanup")
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    timer = {"type": "start_timer", "delay_seconds": 600}
    assert (await api.worker("POST", url, json=fence(task, commands=[timer]))).status_code == 200
    asked = await api.control(
        "POST",
        "/api/workflows/wf-pla-cleanup/request-cancellation",
        json={"cleanup_timeout_seconds": 60},
    )
    request = asked.json()["cancellation_request"]
    task = await api.poll_workflow()
    deliver = f"/api/worker/workflow-tasks/{task['task_id']}/deliver-cancellation"
    delivery = {"request_id": request["request_id"], "sequence": 1, "call_kind": "timer"}
    delivered = await api.worker("POST", deliver, json=fence(task, **delivery))
    assert delivered.json()["delivered"] is True, delivered.text
    recorded = await api.state.store.read_history(run_id=run_id)
    event = next(r for r in recorded if r.event_type == "CooperativeCancellationDelivered")
    history_url = f"/api/worker/workflow-tasks/{task['task_id']}/history"
    page = (await api.worker("POST", history_url, json=fence(task))).json()["history_events"]
    seen = read_cancellation_history(page, run_id=run_id).request
    context = None if seen is None else seen.context
    assert context is not None  # the SDK takes cleanup's identities and deadline from it
    assert context.root_request_id == request["request_id"]
    proof = {
        "request_id": request["request_id"],
        "delivery_history_event_id": f"{run_id}:{event.sequence}",
    }
    cleanup = {
        **proof,
        "root_request_id": request["request_id"],
        "cleanup_deadline_at": request["cleanup_deadline_at"],
    }
    wrong = {**proof, "delivery_history_event_id": f"{run_id}:1"}
    sent = {"sequence": 2, "worker_attempt_id": NONCE}
    refused = await api.worker(
        "POST",
        path(task["task_id"], "prepare"),
        json=fence(task, **sent, descriptor=descriptor(cancellation_cleanup=wrong)),
    )
    assert refused.json()["reason"] == "cancellation_cleanup_mismatch", refused.text
    before = await history_types(api, run_id)
    started = time.monotonic()
    receipt = await call(
        api, task, "prepare", **sent, descriptor=descriptor(cancellation_cleanup=proof)
    )
    attempt = PreparedAttempt.admitted(
        receipt,
        task_id=task["task_id"],
        run_id=run_id,
        owner=task["lease_owner"],
        epoch=task["workflow_task_attempt"],
        nonce=NONCE,
        heartbeat_timeout=None,
        cleanup=cleanup,
        request_started=started,
    )
    assert (
        receipt["heartbeat_deadline_at"] == receipt["cancellation_cleanup"]["cleanup_deadline_at"]
    )
    attempt.validate_control(await call(api, task, "control", attempt.attempt_id))
    assert await history_types(api, run_id) == [*before, "ActivityScheduled", "ActivityStarted"]


async def test_a_stale_lease_is_refused_first_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL 5.6, A3: wrong attempt, wrong owner, unknown task: each its lease reason, for every
    operation."""
    run_id, task = await leased(api, "wf-pla-stale")
    for operation in ADMISSIONS + ATTEMPT_CALLS:
        await _refused_stale(api, task, operation)
    assert await history_types(api, run_id) == ["WorkflowStarted"]


async def _refused_stale(api: Api, task: dict[str, Any], operation: str) -> None:
    url = path(task["task_id"], operation)
    stale = await api.worker(
        "POST", url, json={**fence(task, **body(operation)), "workflow_task_attempt": 7}
    )
    assert (stale.status_code, stale.json()["reason"]) == (409, "workflow_task_attempt_mismatch")
    other = await api.worker(
        "POST", url, json={**fence(task, **body(operation)), "lease_owner": "w2"}
    )
    assert (other.status_code, other.json()["reason"]) == (409, "lease_owner_mismatch")
    unknown = await api.worker(
        "POST",
        path("00000000-0000-0000-0000-000000000000", operation),
        json=fence(task, **body(operation)),
    )
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "task_not_found")


async def test_bad_input_is_refused_with_its_reason_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL 5.6, A3: an undefined operation is 404, a body without the lease fence 422, a step
    that is not the run's next 409, an unknown attempt 404, an explicit cancellation policy
    409 (not installed), a completed outcome without its result 422, and no attempt is ever
    asked to stop, so acknowledge-cancellation is 409; none writes."""
    run_id, task = await leased(api, "wf-pla-bad")
    base = f"/api/worker/workflow-tasks/{task['task_id']}/local-activities"
    for url in (f"{base}/launch", f"{base}/attempt-1/prepare", f"{base}/attempt-1/launch"):
        wrong = await api.worker("POST", url, json=fence(task))
        assert (wrong.status_code, wrong.json()["reason"]) == (
            404,
            "unknown_local_activity_operation",
        )
    unfenced = await api.worker("POST", f"{base}/prepare", json={"sequence": 1})
    assert unfenced.status_code == 422
    assert "workflow_task_attempt" in unfenced.json()["errors"]
    refusals = [
        ("prepare", {**body("prepare"), "sequence": 5}, 409, "prepared_local_sequence_mismatch"),
        (
            "prepare",
            {**body("prepare"), "descriptor": descriptor(cancellation_policy="abandon")},
            409,
            "worker_capability_not_supported",
        ),
        ("recover", body("recover"), 409, "prepared_local_attempt_not_open"),
        ("control", body("control"), 404, "prepared_local_attempt_not_found"),
        ("outcome", {"report": {"outcome": "completed"}}, 422, "validation_failed"),
        (
            "acknowledge-cancellation",
            body("acknowledge-cancellation"),
            409,
            "prepared_local_cancellation_not_requested",
        ),
    ]
    for operation, sent, status, reason in refusals:
        refused = await api.worker(
            "POST", path(task["task_id"], operation), json=fence(task, **sent)
        )
        assert (refused.status_code, refused.json()["reason"]) == (status, reason), operation
    assert await history_types(api, run_id) == ["WorkflowStarted"]
