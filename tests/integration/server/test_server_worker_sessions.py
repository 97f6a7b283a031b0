"""Worker sessions over HTTP: lifecycle verbs, typed refusals, admission on activity polls
(PROTOCOL.md 6.4, 12; SPEC W1-W3, W5, W6, W8, W9).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from burrow.testing import assert_eventually
from tests.integration.server.conftest import GREET, QUEUE, Api

SESSIONS = "/api/worker/sessions"
GPU = "gpu:l4"


def session_body(worker_id: str, session_id: str = "s1", **extra: Any) -> dict[str, Any]:
    return {"worker_id": worker_id, "session_id": session_id, **extra}


async def test_create_heartbeat_close_lifecycle_w2_w5(api: Api) -> None:
    """W2, W5: create (201 `created`), renew (`heartbeat_recorded`), close (`closed`), close
    again (`already_closed`); a closed session id is done for good (`session_closed`)."""
    await api.register("w1")
    created = await api.worker("POST", SESSIONS, json=session_body("w1", lease_seconds=30))
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["admitted"], body["outcome"], body["status"]) == (True, "created", 201)
    assert body["session"]["session_id"] == "s1"
    assert body["session"]["status"] == "active"
    assert body["session"]["lease_owner"] == "w1"
    assert body["session"]["queue"] == QUEUE
    assert body["server_capabilities"]["worker_session_verbs"] == ["create", "heartbeat", "close"]

    reused = await api.worker("POST", SESSIONS, json=session_body("w1"))
    assert (reused.status_code, reused.json()["outcome"]) == (200, "reused")

    beat = await api.worker(
        "POST", f"{SESSIONS}/s1/heartbeat", json={"worker_id": "w1", "lease_seconds": 60}
    )
    assert (beat.status_code, beat.json()["outcome"]) == (200, "heartbeat_recorded")
    assert beat.json()["session"]["lease_expires_at"] > body["session"]["lease_expires_at"]

    closed = await api.worker(
        "DELETE", f"{SESSIONS}/s1", json={"worker_id": "w1", "reason": "worker_shutdown"}
    )
    assert (closed.status_code, closed.json()["outcome"]) == (200, "closed")
    assert closed.json()["session"]["status"] == "closed"
    again = await api.worker("DELETE", f"{SESSIONS}/s1", json={"worker_id": "w1"})
    assert (again.status_code, again.json()["outcome"]) == (200, "already_closed")

    reopened = await api.worker("POST", SESSIONS, json=session_body("w1"))
    assert (reopened.status_code, reopened.json()["reason"]) == (409, "session_closed")
    assert reopened.json()["admitted"] is False
    beat = await api.worker("POST", f"{SESSIONS}/s1/heartbeat", json={"worker_id": "w1"})
    assert (beat.status_code, beat.json()["reason"]) == (409, "session_not_active")


async def test_refusals_are_typed_and_write_nothing_w6(api: Api) -> None:
    """PROTOCOL 6.4, W6: each refusal carries its reason and HTTP status, and changes nothing."""
    await api.register("w1")
    await api.register("w2")
    unregistered = await api.worker("POST", SESSIONS, json=session_body("nobody"))
    assert (unregistered.status_code, unregistered.json()["reason"]) == (
        412,
        "worker_not_registered",
    )
    invalid = await api.worker("POST", SESSIONS, json=session_body("w1", lease_seconds=0))
    assert (invalid.status_code, invalid.json()["reason"]) == (422, "invalid_worker_session")
    assert "lease_seconds" in invalid.json()["errors"]
    no_id = await api.worker("POST", SESSIONS, json={"worker_id": "w1"})
    assert (no_id.status_code, no_id.json()["reason"]) == (422, "invalid_worker_session")
    missing = await api.worker(
        "POST", SESSIONS, json=session_body("w1", "s-new", create_if_missing=False)
    )
    assert (missing.status_code, missing.json()["reason"]) == (409, "session_missing")
    wrong_queue = await api.worker(
        "POST", SESSIONS, json=session_body("w1", "s-q", queue="elsewhere")
    )
    assert (wrong_queue.status_code, wrong_queue.json()["reason"]) == (
        409,
        "session_queue_mismatch",
    )
    unknown = await api.worker("POST", f"{SESSIONS}/ghost/heartbeat", json={"worker_id": "w1"})
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "session_not_found")
    for session_id in ("s-new", "s-q", "ghost"):
        found = await api.state.store.get_worker_session(namespace="default", session_id=session_id)
        assert found is None

    assert (await api.worker("POST", SESSIONS, json=session_body("w1"))).status_code == 201
    taken = await api.worker("POST", SESSIONS, json=session_body("w2"))
    assert (taken.status_code, taken.json()["reason"]) == (409, "session_owned_by_another_worker")
    assert taken.json()["session"]["lease_owner"] == "w1"
    not_yours = await api.worker("DELETE", f"{SESSIONS}/s1", json={"worker_id": "w2"})
    assert (not_yours.status_code, not_yours.json()["reason"]) == (409, "session_owner_mismatch")
    beat = await api.worker("POST", f"{SESSIONS}/s1/heartbeat", json={"worker_id": "w2"})
    assert (beat.status_code, beat.json()["reason"]) == (409, "session_owner_mismatch")


async def test_requirements_and_session_limit_come_from_registration_w3_w6(api: Api) -> None:
    """W3, W6: requirements must be in the registered `capabilities`; a worker holds at most
    `max_concurrent_worker_sessions` sessions."""
    await api.register("plain")
    await api.register(
        "gpu", capabilities=[GPU, "worker_sessions"], max_concurrent_worker_sessions=1
    )
    refused = await api.worker(
        "POST", SESSIONS, json=session_body("plain", requirements=[GPU, "fs:/models"])
    )
    assert (refused.status_code, refused.json()["reason"]) == (
        409,
        "session_requirements_not_met",
    )
    assert refused.json()["missing_requirements"] == ["fs:/models", GPU]
    first = await api.worker("POST", SESSIONS, json=session_body("gpu", "a", requirements=[GPU]))
    assert first.status_code == 201, first.text
    second = await api.worker("POST", SESSIONS, json=session_body("gpu", "b"))
    assert (second.status_code, second.json()["reason"]) == (
        409,
        "worker_session_limit_exceeded",
    )
    assert second.json()["max_concurrent_worker_sessions"] == 1


async def schedule_session_activity(api: Api, workflow_id: str, session: dict[str, Any]) -> str:
    """Start a run and complete its first task with one activity in `session`."""
    await api.register("scheduler", supported_activity_types=[])
    started = await api.start(workflow_id)
    task = await api.poll_workflow("scheduler")
    command = {
        "type": "schedule_activity",
        "activity_type": "greet",
        "queue": QUEUE,
        "arguments": {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgp3b3JsZAA="},
        "worker_session": session,
    }
    body = {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [command],
    }
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text
    run_id: str = started["run_id"]
    return run_id


async def test_activity_poll_admits_only_a_capable_worker_w3_w6_w1(api: Api) -> None:
    """W3, W6: a session activity goes to a worker whose capabilities cover its requirements;
    the leased task carries the session snapshot, and its heartbeat renews the session (W1)."""
    session = {"session_id": "gpu-job", "requirements": [GPU], "lease_seconds": 30}
    await schedule_session_activity(api, "wf-session", session)
    await api.register("plain", supported_workflow_types=[])
    await api.register("gpu", supported_workflow_types=[], capabilities=[GPU])
    body = {"worker_id": "plain", "task_queue": QUEUE, "timeout_seconds": 0}
    empty = (await api.worker("POST", "/api/worker/activity-tasks/poll", json=body)).json()
    assert (empty["task"], empty["poll_status"]) == (None, "empty")
    [refusal] = empty["session_refusals"]
    assert (refusal["session_id"], refusal["reason"]) == ("gpu-job", "session_requirements_not_met")
    assert refusal["missing_requirements"] == [GPU]
    task = await api.poll_activity("gpu", timeout_seconds=0)
    assert task is not None
    snapshot = task["worker_session"]
    assert snapshot["session_id"] == "gpu-job"
    assert (snapshot["status"], snapshot["lease_owner"]) == ("active", "gpu")
    assert snapshot["requirements"] == [GPU]

    beat = await api.worker(
        "POST",
        f"/api/worker/activity-tasks/{task['task_id']}/heartbeat",
        json={"activity_attempt_id": task["activity_attempt_id"], "lease_owner": "gpu"},
    )
    assert beat.status_code == 200, beat.text
    ack = beat.json()
    assert (ack["can_continue"], ack["reason"]) == (True, None)
    assert ack["worker_session"]["lease_expires_at"] >= snapshot["lease_expires_at"]
    held = await api.worker("POST", SESSIONS, json=session_body("plain", "gpu-job"))
    assert (held.status_code, held.json()["reason"]) == (409, "session_owned_by_another_worker")


async def test_deregistration_hands_over_or_closes_held_sessions_w5_w8(api: Api) -> None:
    """W5, W8: a worker that stops hands over the sessions another worker may reacquire
    (`orphaned`, `worker_shutdown`) and closes the others."""
    await api.register("w1")
    await api.register("w2")
    assert (await api.worker("POST", SESSIONS, json=session_body("w1"))).status_code == 201
    pinned = session_body("w1", "s2", allow_reacquire_after_failure=False)
    assert (await api.worker("POST", SESSIONS, json=pinned)).status_code == 201
    gone = await api.worker("DELETE", "/api/worker/registrations/w1")
    assert gone.status_code == 200
    store = api.state.store
    handed = await store.get_worker_session(namespace="default", session_id="s1")
    assert handed is not None
    assert (handed.state, handed.failure_reason) == ("orphaned", "worker_shutdown")
    closed = await store.get_worker_session(namespace="default", session_id="s2")
    assert closed is not None and (closed.state, closed.close_reason) == (
        "closed",
        "worker_shutdown",
    )
    taken = await api.worker("POST", SESSIONS, json=session_body("w2"))
    assert (taken.status_code, taken.json()["outcome"]) == (200, "reacquired")


async def test_the_worker_heartbeat_renews_the_sessions_it_holds_w1(api: Api) -> None:
    """W1: an HTTP worker that runs no session attempt keeps its sessions by its registration
    heartbeat alone, past their `lease_seconds`."""
    await api.register("w1")
    await api.register("w2")
    created = await api.worker("POST", SESSIONS, json=session_body("w1", lease_seconds=60))
    assert created.status_code == 201, created.text
    async with api.state.store.engine.begin() as conn:
        await conn.exec_driver_sql(
            "UPDATE worker_sessions SET lease_expires_at = now() + interval '1 second',"
            " last_heartbeat_at = now() - interval '59 seconds'"
        )
        mark = (await conn.exec_driver_sql("SELECT now()")).scalar_one()
    beat = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "w1"})
    assert beat.status_code == 200, beat.text
    info = await api.state.store.get_worker_session(namespace="default", session_id="s1")
    assert info is not None and info.state == "active"
    assert info.last_heartbeat_at is not None and info.last_heartbeat_at >= mark
    assert info.lease_expires_at - info.last_heartbeat_at == timedelta(seconds=60)
    # Past the lease it had before the heartbeat, another worker still finds it held.
    async with api.state.store.engine.begin() as conn:
        await conn.exec_driver_sql(
            "UPDATE worker_sessions SET lease_expires_at = lease_expires_at - interval '2 seconds',"
            " last_heartbeat_at = last_heartbeat_at - interval '2 seconds'"
        )
    taken = await api.worker("POST", SESSIONS, json=session_body("w2"))
    assert (taken.status_code, taken.json()["reason"]) == (409, "session_owned_by_another_worker")


async def test_discovery_advertises_session_verbs_w9(api: Api) -> None:
    """W9: `worker_session_verbs` and the `worker_sessions` contract are in discovery."""
    info = await api.control("GET", "/api/cluster/info")
    capabilities = info.json()["worker_protocol"]["server_capabilities"]
    assert capabilities["worker_session_verbs"] == ["create", "heartbeat", "close"]
    contract = capabilities["worker_sessions"]
    assert contract["supported"] is True
    assert contract["statuses"] == ["active", "closed", "expired", "failed", "orphaned"]
    # W5: a planned stop's hand-over is a failure reason of its own.
    assert contract["failure_reasons"] == [
        "ttl_expired",
        "lease_expired",
        "worker_heartbeat_stale",
        "worker_shutdown",
    ]


async def test_a_heartbeat_after_losing_the_session_stops_the_attempt_w1_w7(api: Api) -> None:
    """W1, W7: once another capable worker reacquired the session (its lease lapsed), the old
    holder's activity heartbeat answers `can_continue: false` with the reason."""
    session = {"session_id": "short", "requirements": [GPU], "lease_seconds": 1}
    await schedule_session_activity(api, "wf-lost", session)
    await api.register("gpu-a", supported_workflow_types=[], capabilities=[GPU])
    await api.register("gpu-b", supported_workflow_types=[], capabilities=[GPU])
    task = await api.poll_activity("gpu-a", timeout_seconds=0)
    assert task["worker_session"]["lease_owner"] == "gpu-a"

    async def reacquired() -> bool:
        taken = await api.worker("POST", SESSIONS, json=session_body("gpu-b", "short"))
        return taken.status_code == 200 and taken.json()["outcome"] == "reacquired"

    await assert_eventually(reacquired, message="the lapsed session was never reacquired")
    beat = await api.worker(
        "POST",
        f"/api/worker/activity-tasks/{task['task_id']}/heartbeat",
        json={"activity_attempt_id": task["activity_attempt_id"], "lease_owner": "gpu-a"},
    )
    assert beat.status_code == 200, beat.text
    ack = beat.json()
    assert (ack["can_continue"], ack["reason"]) == (False, "session_owner_mismatch")
    assert ack["worker_session"]["lease_owner"] == "gpu-b"


async def test_every_worker_plane_response_carries_the_session_contract_w9(api: Api) -> None:
    """W9: not only discovery: register, heartbeat, both polls, the workflow and activity
    completions, an activity heartbeat and a refusal all carry `worker_session_verbs` and the
    `worker_sessions` contract in their `server_capabilities`."""
    responses: dict[str, httpx.Response] = {}
    body = {
        "worker_id": "w1",
        "task_queue": QUEUE,
        "runtime": "python",
        "supported_workflow_types": ["greeter"],
        "supported_activity_types": ["greet"],
    }
    responses["register"] = await api.worker("POST", "/api/worker/register", json=body)
    responses["heartbeat"] = await api.worker(
        "POST", "/api/worker/heartbeat", json={"worker_id": "w1"}
    )
    await api.start("wf-envelope")
    poll = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
    responses["workflow poll"] = await api.worker(
        "POST", "/api/worker/workflow-tasks/poll", json=poll
    )
    task = responses["workflow poll"].json()["task"]
    fence = {"lease_owner": "w1", "workflow_task_attempt": task["workflow_task_attempt"]}
    complete = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    responses["workflow completion"] = await api.worker(
        "POST", complete, json={**fence, "commands": [GREET]}
    )
    responses["refusal"] = await api.worker("POST", complete, json={**fence, "commands": [GREET]})
    responses["activity poll"] = await api.worker(
        "POST", "/api/worker/activity-tasks/poll", json=poll
    )
    activity = responses["activity poll"].json()["task"]
    attempt = {"activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1"}
    base = f"/api/worker/activity-tasks/{activity['task_id']}"
    responses["activity heartbeat"] = await api.worker("POST", f"{base}/heartbeat", json=attempt)
    responses["activity completion"] = await api.worker(
        "POST", f"{base}/complete", json={**attempt, "result": GREET["arguments"]}
    )

    assert responses["refusal"].status_code == 409, responses["refusal"].text
    for name, response in responses.items():
        assert response.status_code < 300 or name == "refusal", (name, response.text)
        capabilities = response.json()["server_capabilities"]
        assert capabilities["worker_session_verbs"] == ["create", "heartbeat", "close"], name
        contract = capabilities["worker_sessions"]
        assert contract["supported"] is True, name
        assert "orphaned" in contract["statuses"], name
        assert "worker_shutdown" in contract["failure_reasons"], name
