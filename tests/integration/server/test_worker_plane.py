"""Worker plane over HTTP: lifecycle, workflow and activity tasks, fencing and reason codes
(PROTOCOL.md 4-6, 5.6, 18; SPEC M4b, M6).
"""

from __future__ import annotations

import asyncio

from burrow.testing import assert_eventually
from tests.integration.server.conftest import GREET, QUEUE, Api, ApiFactory, fence


async def history_types(api: Api, run_id: str) -> list[str]:
    return [e.event_type for e in await api.state.store.read_history(run_id=run_id)]


async def test_register_heartbeat_deregister_releases_leases_w18(api: Api) -> None:
    """PROTOCOL 4.1-4.3, 18.6: deregistration hands back held workflow-task leases."""
    await api.register()
    ack = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "w1"})
    assert ack.status_code == 200
    assert ack.json()["heartbeat_interval_seconds"] > 0
    started = await api.start("wf-dereg")
    task = await api.poll_workflow()
    assert task["run_id"] == started["run_id"]
    gone = await api.worker("DELETE", "/api/worker/registrations/w1")
    assert gone.status_code == 200
    assert gone.json() == {
        **gone.json(),
        "worker_id": "w1",
        "outcome": "deregistered",
        "recovered_workflow_task_count": 1,
    }
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.state == "ready"
    assert lease.attempt == task["workflow_task_attempt"] + 1
    unknown = await api.worker("DELETE", "/api/worker/registrations/nobody")
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "worker_not_found")
    beat = await api.worker("POST", "/api/worker/heartbeat", json={"worker_id": "nobody"})
    assert (beat.status_code, beat.json()["reason"]) == (404, "worker_not_registered")


async def test_poll_needs_a_registration_on_that_queue(api: Api) -> None:
    """PROTOCOL 5.1: 412 `worker_not_registered`, 409 `task_queue_mismatch`."""
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
    refused = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
    assert (refused.status_code, refused.json()["reason"]) == (412, "worker_not_registered")
    await api.register()
    other = {**body, "task_queue": "elsewhere"}
    refused = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=other)
    assert (refused.status_code, refused.json()["reason"]) == (409, "task_queue_mismatch")
    empty = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
    assert empty.json()["task"] is None
    assert empty.json()["poll_status"] == "empty"


async def test_poll_task_carries_history_from_sequence_one(api: Api) -> None:
    """PROTOCOL 5.1, 9: the task names its fence and starts its history at WorkflowStarted."""
    await api.register()
    started = await api.start("wf-1")
    task = await api.poll_workflow()
    assert task["workflow_id"] == "wf-1"
    assert task["run_id"] == started["run_id"]
    assert task["payload_codec"] == "avro"
    assert task["workflow_task_attempt"] == 1
    assert task["lease_owner"] == "w1"
    events = task["history_events"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["event_type"] == "WorkflowStarted"
    assert task["last_history_sequence"] == len(events)


async def test_poll_is_idempotent_by_poll_request_id_m6(api: Api) -> None:
    """PROTOCOL 2.5, 18.1: a resent poll gets the task it leased, not another one."""
    await api.register()
    await api.start("wf-a")
    await api.start("wf-b")
    first = await api.poll_workflow(poll_request_id="wf-poll-1")
    again = await api.poll_workflow(poll_request_id="wf-poll-1")
    assert again["task_id"] == first["task_id"]
    assert again["workflow_task_attempt"] == first["workflow_task_attempt"]
    other = await api.poll_workflow(poll_request_id="wf-poll-2")
    assert other["task_id"] != first["task_id"]


async def test_a_held_poll_is_woken_by_a_start(api: Api) -> None:
    """PROTOCOL 2.5, M5: a long poll returns the task a start makes ready while it waits."""
    await api.register()
    polling = asyncio.create_task(api.poll_workflow())
    await asyncio.sleep(0.3)
    started = await api.start("wf-late")
    task = await polling
    assert task["run_id"] == started["run_id"]


async def test_duplicate_completion_is_409_without_new_history_18_4(api: Api) -> None:
    """PROTOCOL 5.3, 18.4, 18.10: a byte-identical resend after commit gets 409
    `task_not_leased` and appends nothing."""
    await api.register()
    started = await api.start("wf-dup")
    task = await api.poll_workflow()
    body = fence(task, commands=[GREET])
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text
    assert done.json()["outcome"] == "completed"
    before = await history_types(api, started["run_id"])
    again = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert again.status_code == 409
    assert again.json()["reason"] == "task_not_leased"
    assert again.json()["protocol_version"] == "1.20"
    assert await history_types(api, started["run_id"]) == before
    assert before.count("ActivityScheduled") == 1


async def test_fencing_reason_codes_5_6(api: Api) -> None:
    """PROTOCOL 5.6: unknown task, wrong attempt, wrong owner: each its reason; nothing written."""
    await api.register()
    started = await api.start("wf-fence")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    unknown = await api.worker(
        "POST",
        "/api/worker/workflow-tasks/00000000-0000-0000-0000-000000000000/complete",
        json=fence(task, commands=[GREET]),
    )
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "task_not_found")
    garbage = await api.worker(
        "POST", "/api/worker/workflow-tasks/not-a-task/complete", json=fence(task, commands=[GREET])
    )
    assert (garbage.status_code, garbage.json()["reason"]) == (404, "task_not_found")
    stale = await api.worker(
        "POST", url, json={**fence(task, commands=[GREET]), "workflow_task_attempt": 7}
    )
    assert (stale.status_code, stale.json()["reason"]) == (409, "workflow_task_attempt_mismatch")
    assert stale.json()["current_attempt"] == 1
    other = await api.worker(
        "POST", url, json={**fence(task, commands=[GREET]), "lease_owner": "w2"}
    )
    assert (other.status_code, other.json()["reason"]) == (409, "lease_owner_mismatch")
    assert other.json()["lease_owner"] == "w1"
    assert await history_types(api, started["run_id"]) == ["WorkflowStarted"]


async def test_expired_lease_is_409_lease_expired(make_api: ApiFactory) -> None:
    """PROTOCOL 5.6: a call after the lease ran out is 409 `lease_expired`."""
    api = await make_api(workflow_task_lease_seconds=0.2)
    await api.register()
    await api.start("wf-exp")
    task = await api.poll_workflow()
    await asyncio.sleep(0.4)
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    expired = await api.worker("POST", url, json=fence(task, commands=[GREET]))
    assert (expired.status_code, expired.json()["reason"]) == (409, "lease_expired")


async def test_invalid_commands_are_refused_and_nothing_is_written(api: Api) -> None:
    """PROTOCOL 5.3: a malformed command refuses the batch (409 `invalid_commands`)."""
    await api.register()
    started = await api.start("wf-bad")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    bad = await api.worker("POST", url, json=fence(task, commands=[{"type": "launch_rocket"}]))
    assert (bad.status_code, bad.json()["reason"]) == (409, "invalid_commands")
    empty = await api.worker("POST", url, json=fence(task, commands=[]))
    assert empty.status_code == 422
    assert "commands" in empty.json()["errors"]
    assert await history_types(api, started["run_id"]) == ["WorkflowStarted"]
    good = await api.worker("POST", url, json=fence(task, commands=[GREET]))
    assert good.status_code == 200


async def test_waiting_for_history_is_acknowledged_5_5(api: Api) -> None:
    """PROTOCOL 5.5, 18.7: the SDK's empty-commands path completes the task, no retry."""
    await api.register()
    await api.start("wf-wait")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/fail"
    failure = {
        "type": "WorkflowTaskWaitingForHistory",
        "message": "Workflow task waiting for scheduled history.",
    }
    ack = await api.worker("POST", url, json=fence(task, failure=failure))
    assert ack.status_code == 200
    assert ack.json()["outcome"] == "waiting_for_history"
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.state == "completed"
    retry = await api.worker(
        "POST",
        "/api/worker/workflow-tasks/poll",
        json={"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0},
    )
    assert retry.json()["task"] is None


async def test_failed_workflow_task_is_retried_as_next_attempt(api: Api) -> None:
    """PROTOCOL 5.5: an ordinary failure records it and hands the task back (attempt + 1)."""
    await api.register()
    await api.start("wf-retry")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/fail"
    failed = await api.worker(
        "POST", url, json=fence(task, failure={"message": "boom", "type": "ValueError"})
    )
    assert failed.json()["outcome"] == "failed"
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.state == "ready" and lease.attempt == 2


async def test_history_pages_for_the_leased_task_5_2(api: Api) -> None:
    """PROTOCOL 5.2, 9: pages follow base64 tokens; "MA==" refetches from the start."""
    await api.register()
    await api.start("wf-pages")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/history"
    whole = await api.worker("POST", url, json=fence(task, next_history_page_token="MA=="))
    assert whole.status_code == 200
    assert [e["sequence"] for e in whole.json()["history_events"]] == [1]
    assert whole.json()["next_history_page_token"] is None
    bad = await api.worker("POST", url, json=fence(task, next_history_page_token="!!"))
    assert (bad.status_code, bad.json()["reason"]) == (400, "invalid_page_token")


async def test_workflow_task_heartbeat_renews_the_lease_5_4(api: Api) -> None:
    """PROTOCOL 5.4: the answer echoes task, owner and attempt with `renewed: true`."""
    await api.register()
    await api.start("wf-hb")
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/heartbeat"
    beat = await api.worker("POST", url, json=fence(task))
    assert beat.status_code == 200
    body = beat.json()
    assert (
        body["task_id"],
        body["lease_owner"],
        body["workflow_task_attempt"],
        body["renewed"],
    ) == (task["task_id"], "w1", 1, True)


async def test_activity_round_trip_and_duplicate_completion_18_3(api: Api) -> None:
    """PROTOCOL 6.1-6.2, 18.3-18.4: poll, heartbeat, complete once; resend is 409; wrong
    attempt id is 409 `stale_attempt`."""
    await api.register()
    started = await api.start("wf-act")
    task = await api.poll_workflow()
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=fence(task, commands=[GREET]),
    )
    assert done.status_code == 200
    attempt = await api.poll_activity(poll_request_id="activity-poll-1")
    assert attempt["activity_type"] == "greet"
    assert attempt["attempt_number"] == 1
    assert attempt["payload_codec"] == "avro"
    again = await api.poll_activity(poll_request_id="activity-poll-1")
    assert again["task_id"] == attempt["task_id"]
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    base = f"/api/worker/activity-tasks/{attempt['task_id']}"
    beat = await api.worker("POST", f"{base}/heartbeat", json={**own, "details": {"progress": 1}})
    assert beat.status_code == 200
    assert beat.json()["cancel_requested"] is False
    wrong = await api.worker(
        "POST", f"{base}/complete", json={**own, "activity_attempt_id": "other"}
    )
    assert (wrong.status_code, wrong.json()["reason"]) == (409, "stale_attempt")
    result = {**own, "result": {"codec": "avro", "blob": "wwHioz3/VYAiNwoYaGVsbG8sIHdvcmxk"}}
    first = await api.worker("POST", f"{base}/complete", json=result)
    assert first.status_code == 200
    assert first.json()["outcome"] == "completed"
    resend = await api.worker("POST", f"{base}/complete", json=result)
    assert (resend.status_code, resend.json()["reason"]) == (409, "task_not_leased")
    follow_up = await api.poll_workflow()
    types = [e["event_type"] for e in follow_up["history_events"]]
    assert types.count("ActivityCompleted") == 1
    assert follow_up["run_id"] == started["run_id"]


async def test_activity_failure_schedules_a_retry(api: Api) -> None:
    """PROTOCOL 6.2: a retryable failure schedules the next attempt."""
    await api.register()
    await api.start("wf-actfail")
    task = await api.poll_workflow()
    await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=fence(task, commands=[GREET]),
    )
    attempt = await api.poll_activity()
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    failed = await api.worker(
        "POST",
        f"/api/worker/activity-tasks/{attempt['task_id']}/fail",
        json={**own, "failure": {"message": "flaky", "type": "IOError"}},
    )
    assert failed.status_code == 200
    assert failed.json()["outcome"] == "retry_scheduled"


async def test_sdk_shaped_fail_workflow_closes_the_run_failed_7(api: Api) -> None:
    """PROTOCOL 7: `fail_workflow` as SDK 2.12.0 sends it (catalogue extras included)."""
    await api.register()
    started = await api.start("wf-fail")
    task = await api.poll_workflow()
    command = {
        "type": "fail_workflow",
        "message": "never works",
        "exception_type": "ValueError",
        "exception_class": "durable_workflow.errors.ActivityFailed",
        "exception": {"type": "ValueError", "class": "x.ValueError", "message": "never works"},
        "failed_step_sequence": 1,
        "failed_activity_execution_id": "abc:1",
    }
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=[command]))
    assert done.status_code == 200, done.text
    assert done.json()["run_status"] == "failed"
    run = await api.state.store.get_run(namespace="default", workflow_id="wf-fail")
    assert run.run_id == started["run_id"]
    assert run.failure is not None and run.failure["message"] == "never works"
    assert run.failure["exception_type"] == "ValueError"


async def test_reregistration_releases_leases_and_fences_the_old_attempt_18_5(api: Api) -> None:
    """PROTOCOL 13, 18.5: a worker id registering again gets the same task back at attempt + 1;
    a completion naming the old attempt is 409 `workflow_task_attempt_mismatch`."""
    await api.register()
    started = await api.start("wf-restart")
    before = await api.poll_workflow()
    await api.register()
    after = await api.poll_workflow()
    assert after["task_id"] == before["task_id"]
    assert after["workflow_task_attempt"] == before["workflow_task_attempt"] + 1
    url = f"/api/worker/workflow-tasks/{before['task_id']}/complete"
    old = await api.worker("POST", url, json=fence(before, commands=[GREET]))
    assert (old.status_code, old.json()["reason"]) == (409, "workflow_task_attempt_mismatch")
    assert await history_types(api, started["run_id"]) == ["WorkflowStarted"]
    new = await api.worker("POST", url, json=fence(after, commands=[GREET]))
    assert new.status_code == 200


async def test_call_on_a_closed_run_is_409_run_closed_5_6(api: Api) -> None:
    """PROTOCOL 5.6: after terminate, the task's calls are 409 `run_closed` (`run_terminated`)."""
    await api.register()
    await api.start("wf-closed")
    task = await api.poll_workflow()
    await api.control("POST", "/api/workflows/wf-closed/terminate", json={"reason": "ops"})
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    late = await api.worker("POST", url, json=fence(task, commands=[GREET]))
    assert late.status_code == 409
    body = late.json()
    assert (body["reason"], body["stop_reason"], body["can_continue"]) == (
        "run_closed",
        "run_terminated",
        False,
    )


async def test_long_poll_capacity_is_a_typed_429_2_4(make_api: ApiFactory) -> None:
    """PROTOCOL 2.4: beyond the held-poll cap, 429 `long_poll_capacity_exhausted`, retryable."""
    api = await make_api(max_held_polls=1)
    await api.register()
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 2}
    held = asyncio.create_task(api.worker("POST", "/api/worker/workflow-tasks/poll", json=body))

    async def holding() -> bool:
        return api.state.held.held == 1

    await assert_eventually(holding, message="the first poll is held")
    refused = await api.worker("POST", "/api/worker/activity-tasks/poll", json=body)
    assert refused.status_code == 429
    answer = refused.json()
    assert answer["reason"] == answer["poll_status"] == "long_poll_capacity_exhausted"
    assert (answer["task"], answer["task_kind"], answer["retryable"]) == (
        None,
        "activity_task",
        True,
    )
    assert answer["retry_after_seconds"] >= 1
    assert (await held).json()["poll_status"] == "empty"


async def test_inline_history_page_and_its_continuation_9(api: Api) -> None:
    """PROTOCOL 9: a small `history_page_size` pages the inline history; the history route
    continues from the token to the end."""
    await api.register()
    await api.start("wf-paged")
    await api.control("POST", "/api/workflows/wf-paged/signal/a", json={"request_id": "s1"})
    await api.control("POST", "/api/workflows/wf-paged/signal/b", json={"request_id": "s2"})
    task = await api.poll_workflow(history_page_size=2)
    assert [e["sequence"] for e in task["history_events"]] == [1, 2]
    assert task["total_history_events"] == 3
    token = task["next_history_page_token"]
    assert token is not None
    url = f"/api/worker/workflow-tasks/{task['task_id']}/history"
    rest = await api.worker("POST", url, json=fence(task, next_history_page_token=token))
    assert [e["sequence"] for e in rest.json()["history_events"]] == [3]
    assert rest.json()["next_history_page_token"] is None
