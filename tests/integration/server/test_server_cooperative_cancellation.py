"""Cooperative cancellation over the worker and control planes (PROTOCOL.md 6.5, 7, 8.2; 1.20).

The shapes are the SDK 2.12.0 client's: `Client.request_workflow_cancellation` (accepted,
duplicate, workflow_id, run_id, cancellation_request{request_id, requested_at,
cleanup_deadline_at, history_refresh_page_token}), `Client.deliver_workflow_cancellation`
(delivered + the recorded call, or delivered false with the claim released while an activity
or child ends), `activity_task_status` and `acknowledge_activity_cancellation`. Commands are
built by the SDK itself (`commands_to_server_commands`). Refusals answer a status and reason
and write nothing.
"""

from __future__ import annotations

from typing import Any

from durable_workflow.workflow import (
    ScheduleActivity,
    StartChildWorkflow,
    StartTimer,
    commands_to_server_commands,
)

from tests.integration.server.conftest import QUEUE, Api, fence
from tests.integration.server.test_worker_plane import history_types

COOPERATIVE = "CooperativeCancellationRequested"
DELIVERED = "CooperativeCancellationDelivered"


def sdk_command(command: Any) -> dict[str, Any]:
    [wire] = commands_to_server_commands([command], QUEUE)
    return wire


def sdk_activity(policy: str | None) -> dict[str, Any]:
    return sdk_command(
        ScheduleActivity(
            "greet", ["world"], schedule_to_close_timeout=60, cancellation_policy=policy
        )
    )


async def complete(api: Api, task: dict[str, Any], *commands: dict[str, Any]) -> Any:
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=list(commands)))
    assert done.status_code == 200, done.text
    return done


async def release(api: Api, task: dict[str, Any]) -> None:
    """The SDK's "waiting for history" acknowledgement: the claim ends with nothing new."""
    url = f"/api/worker/workflow-tasks/{task['task_id']}/fail"
    failure = {"type": "WorkflowTaskWaitingForHistory", "message": "waiting for history"}
    done = await api.worker("POST", url, json=fence(task, failure=failure))
    assert done.status_code == 200, done.text


async def request(api: Api, workflow_id: str, **body: Any) -> Any:
    return await api.control(
        "POST", f"/api/workflows/{workflow_id}/request-cancellation", json=body
    )


async def deliver(api: Api, task: dict[str, Any], **body: Any) -> Any:
    url = f"/api/worker/workflow-tasks/{task['task_id']}/deliver-cancellation"
    return await api.worker("POST", url, json=fence(task, **body))


async def waiting_on(api: Api, workflow_id: str, command: dict[str, Any]) -> tuple[str, Any]:
    """A run whose first task scheduled `command`; its run id and the activity claimed (if any)."""
    await api.register()
    started = await api.start(workflow_id)
    await complete(api, await api.poll_workflow(), command)
    activity = await api.poll_activity() if command["type"] == "schedule_activity" else None
    return started["run_id"], activity


async def requested_claim(api: Api, workflow_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Request cancellation and poll the task it wakes: the request's answer and the task."""
    answer = await request(api, workflow_id, reason="customer left", cleanup_timeout_seconds=60)
    assert answer.status_code == 200, answer.text
    return answer.json(), await api.poll_workflow()


async def activity_call(api: Api, path: str, activity: dict[str, Any], **body: Any) -> Any:
    url = f"/api/worker/activity-tasks/{activity['task_id']}/{path}"
    fenced = {"activity_attempt_id": activity["activity_attempt_id"], "lease_owner": "w1"}
    return await api.worker("POST", url, json={**fenced, **body})


async def test_discovery_advertises_cooperative_cancellation(api: Api) -> None:
    """PROTOCOL 3.3, 6.5: `cooperative_cancellation` is advertised with protocol 1.20, which
    the SDK requires before it calls any of the routes."""
    info = (await api.control("GET", "/api/cluster/info")).json()
    assert info["worker_protocol"]["version"] == "1.20"
    assert info["worker_protocol"]["server_capabilities"]["cooperative_cancellation"] is True


async def test_request_is_recorded_once_and_reaches_the_claim(api: Api) -> None:
    """PROTOCOL 6.5, 8.2: the request answers the SDK's shape; a repeat answers the original
    id and deadline (`duplicate`) and records nothing; the task it wakes carries it as
    `cancellation_request`, whose token pages the claim's history from its first event."""
    run_id, _ = await waiting_on(api, "wf-req", sdk_command(StartTimer(delay_seconds=3600)))
    first, task = await requested_claim(api, "wf-req")
    assert first["accepted"] is True and first["duplicate"] is False
    assert (first["workflow_id"], first["run_id"]) == ("wf-req", run_id)
    request_info = first["cancellation_request"]
    assert set(request_info) == {
        "request_id",
        "requested_at",
        "cleanup_deadline_at",
        "history_refresh_page_token",
    }
    again = await request(api, "wf-req")
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["cancellation_request"] == request_info
    assert (await history_types(api, run_id)).count(COOPERATIVE) == 1
    assert task["cancellation_request"] == request_info
    page = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/history",
        json=fence(task, next_history_page_token=request_info["history_refresh_page_token"]),
    )
    assert page.status_code == 200
    assert page.json()["history_events"][0]["event_type"] == "WorkflowStarted"
    assert page.json()["history_events"][-1]["event_type"] == COOPERATIVE
    payload = page.json()["history_events"][-1]["payload"]
    assert payload["workflow_command_id"] == request_info["request_id"]
    assert payload["reason"] == "customer left"


async def test_request_refusals_write_nothing(api: Api) -> None:
    """PROTOCOL 2.4, 17: an unknown workflow is 404 `workflow_not_found`; a cleanup bound out
    of 1..3600 is 422 `validation_failed`; a closed run is 409 `run_not_active`. History is
    unchanged by each."""
    run_id, _ = await waiting_on(api, "wf-refused", sdk_command(StartTimer(delay_seconds=3600)))
    before = await history_types(api, run_id)
    missing = await request(api, "wf-nobody")
    assert (missing.status_code, missing.json()["reason"]) == (404, "workflow_not_found")
    for bound in (0, 3601):
        bad = await request(api, "wf-refused", cleanup_timeout_seconds=bound)
        assert (bad.status_code, bad.json()["reason"]) == (422, "validation_failed")
    assert await history_types(api, run_id) == before
    await api.control("POST", "/api/workflows/wf-refused/terminate", json={})
    closed = await history_types(api, run_id)
    late = await request(api, "wf-refused")
    assert (late.status_code, late.json()["reason"]) == (409, "run_not_active")
    assert await history_types(api, run_id) == closed


async def test_delivery_refusals_write_nothing(api: Api) -> None:
    """PROTOCOL 5.6, 6.5: a delivery before any request, naming another request, or naming a
    step that is no call of that kind is 409 with its reason; a stale attempt is the fence's
    409. Nothing is written."""
    run_id, _ = await waiting_on(api, "wf-deliver", sdk_command(StartTimer(delay_seconds=3600)))
    signalled = await api.control(
        "POST",
        "/api/workflows/wf-deliver/signal/poke",
        json={"input": {"codec": "avro", "blob": "AA=="}},
    )
    assert signalled.status_code in (200, 202), signalled.text
    early = await api.poll_workflow()
    refused = await deliver(api, early, request_id="r", sequence=1, call_kind="timer")
    assert (refused.status_code, refused.json()["reason"]) == (409, "cancellation_not_requested")
    await release(api, early)
    answer, task = await requested_claim(api, "wf-deliver")
    request_id = answer["cancellation_request"]["request_id"]
    before = await history_types(api, run_id)
    cases = [
        (
            {"request_id": "another", "sequence": 1, "call_kind": "timer"},
            409,
            "cancellation_request_mismatch",
        ),
        (
            {"request_id": request_id, "sequence": 1, "call_kind": "activity"},
            409,
            "cancellation_call_mismatch",
        ),
        (
            {"request_id": request_id, "sequence": 1, "call_kind": "timer", "sequence_span": 2},
            422,
            "validation_failed",
        ),
    ]
    for body, status, reason in cases:
        response = await deliver(api, task, **body)
        assert (response.status_code, response.json()["reason"]) == (status, reason), body
    stale = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/deliver-cancellation",
        json={
            "lease_owner": "w1",
            "workflow_task_attempt": task["workflow_task_attempt"] + 1,
            "request_id": request_id,
            "sequence": 1,
            "call_kind": "timer",
        },
    )
    assert (stale.status_code, stale.json()["reason"]) == (409, "workflow_task_attempt_mismatch")
    assert await history_types(api, run_id) == before


async def test_delivery_at_a_timer_records_it_once(api: Api) -> None:
    """PROTOCOL 6.5, 8.2: the delivery answers the recorded call; its resend after a lost answer
    is the same delivery (nothing more recorded); another call after it is 409
    `cancellation_already_delivered`."""
    run_id, _ = await waiting_on(api, "wf-timer", sdk_command(StartTimer(delay_seconds=3600)))
    answer, task = await requested_claim(api, "wf-timer")
    body = {
        "request_id": answer["cancellation_request"]["request_id"],
        "sequence": 1,
        "call_kind": "timer",
    }
    first = await deliver(api, task, **body)
    assert first.status_code == 200, first.text
    assert first.json() | body == first.json()
    assert first.json()["delivered"] is True and first.json()["sequence_span"] == 1
    resent = await deliver(api, task, **body)
    assert resent.status_code == 200 and resent.json()["delivered"] is True
    other = await deliver(api, task, **{**body, "call_kind": "condition", "sequence": 2})
    assert (other.status_code, other.json()["reason"]) == (409, "cancellation_already_delivered")
    assert (await history_types(api, run_id)).count(DELIVERED) == 1


async def test_activity_try_cancel_delivers_now_and_asks_the_activity_to_stop(api: Api) -> None:
    """Activity `try_cancel` (PROTOCOL 6.2, 7): recorded on ActivityScheduled; the delivery
    records at once; the attempt's heartbeat and status report `cancel_requested`, the status
    with its acknowledgement receipt; the acknowledgement closes it as ActivityCancelled."""
    run_id, activity = await waiting_on(api, "wf-try", sdk_activity("try_cancel"))
    scheduled = (await api.state.store.read_history(run_id=run_id))[-1]
    assert scheduled.payload["activity"]["cancellation_policy"] == "try_cancel"
    answer, task = await requested_claim(api, "wf-try")
    request_id = answer["cancellation_request"]["request_id"]
    delivered = await deliver(api, task, request_id=request_id, sequence=1, call_kind="activity")
    assert delivered.json()["delivered"] is True
    beat = await activity_call(api, "heartbeat", activity)
    assert beat.json()["cancel_requested"] is True
    status = (await activity_call(api, "status", activity)).json()
    assert (status["can_continue"], status["cancel_requested"]) == (False, True)
    assert status["heartbeat_recorded"] is False
    receipt = status["cancellation_acknowledgement"]
    assert receipt["request_id"] == receipt["root_request_id"] == request_id
    refused = await activity_call(api, "acknowledge-cancellation", activity, request_id="another")
    assert (refused.status_code, refused.json()["reason"]) == (409, "cancellation_request_mismatch")
    ack = await activity_call(api, "acknowledge-cancellation", activity, request_id=request_id)
    assert ack.status_code == 200, ack.text
    assert ack.json()["acknowledged"] is True and ack.json()["history_event_id"]
    await release(api, task)
    await api.poll_workflow()  # the close wakes the run and joins its history
    assert (await history_types(api, run_id))[-1] == "ActivityCancelled"


async def test_activity_wait_cancellation_completed_waits_for_the_activity(api: Api) -> None:
    """Activity `wait_cancellation_completed`: the first delivery asks the activity to stop
    and answers `cancellation_waiting_for_activity` with the claim released; once the attempt
    ends as cancelled, the next claim's delivery records."""
    run_id, activity = await waiting_on(api, "wf-wait", sdk_activity("wait_cancellation_completed"))
    answer, task = await requested_claim(api, "wf-wait")
    body = {
        "request_id": answer["cancellation_request"]["request_id"],
        "sequence": 1,
        "call_kind": "activity",
    }
    waiting = (await deliver(api, task, **body)).json()
    assert waiting["delivered"] is False
    assert waiting["reason"] == "cancellation_waiting_for_activity"
    assert waiting["claim_released"] is True and waiting["workflow_run_id"] == run_id
    assert DELIVERED not in await history_types(api, run_id)
    url = f"/api/worker/workflow-tasks/{task['task_id']}/heartbeat"
    gone = await api.worker("POST", url, json=fence(task))
    assert gone.status_code == 409, gone.text  # released
    assert (await activity_call(api, "heartbeat", activity)).json()["cancel_requested"] is True
    failed = await activity_call(
        api,
        "fail",
        activity,
        failure={
            "type": "ActivityCancelled",
            "message": "activity cancelled",
            "non_retryable": True,
        },
    )
    assert failed.status_code == 200, failed.text
    after = await api.poll_workflow()
    assert (await deliver(api, after, **body)).json()["delivered"] is True
    types = await history_types(api, run_id)
    assert types.index("ActivityCancelled") < types.index(DELIVERED)


async def test_activity_abandon_leaves_the_activity_running(api: Api) -> None:
    """Activity `abandon`: the delivery records at once and the attempt is not asked to stop."""
    _, activity = await waiting_on(api, "wf-abandon", sdk_activity("abandon"))
    answer, task = await requested_claim(api, "wf-abandon")
    body = {
        "request_id": answer["cancellation_request"]["request_id"],
        "sequence": 1,
        "call_kind": "activity",
    }
    assert (await deliver(api, task, **body)).json()["delivered"] is True
    assert (await activity_call(api, "heartbeat", activity)).json()["cancel_requested"] is False
    status = (await activity_call(api, "status", activity)).json()
    assert (status["can_continue"], status["cancel_requested"]) == (True, False)


async def test_child_try_cancel_asks_the_child_to_cancel(api: Api) -> None:
    """Child `try_cancel` (PROTOCOL 7): the delivery at the child's call records at once and
    the child run is asked to cancel (CancelRequested in its history)."""
    command = sdk_command(
        StartChildWorkflow(
            "greeter", ["world"], task_queue="child-queue", cancellation_policy="try_cancel"
        )
    )
    run_id, _ = await waiting_on(api, "wf-parent", command)
    events = await api.state.store.read_history(run_id=run_id)
    child = next(e for e in events if e.event_type == "ChildWorkflowScheduled").payload
    assert child["cancellation_policy"] == "try_cancel"
    answer, task = await requested_claim(api, "wf-parent")
    body = {
        "request_id": answer["cancellation_request"]["request_id"],
        "sequence": 1,
        "call_kind": "child",
    }
    delivered = await deliver(api, task, **body)
    assert delivered.status_code == 200, delivered.text
    assert delivered.json()["delivered"] is True
    child_run = await api.state.store.get_run(
        namespace="default", workflow_id=child["child_workflow_instance_id"]
    )
    assert child_run.cancel_requested is True


async def test_workflow_cancelled_failure_closes_the_run_as_cancelled(api: Api) -> None:
    """PROTOCOL 7: the SDK ends a cancelled workflow with `fail_workflow` naming
    `WorkflowCancelled`; the run closes as cancelled (WorkflowCancelled), not failed."""
    run_id, _ = await waiting_on(api, "wf-close", sdk_command(StartTimer(delay_seconds=3600)))
    _, task = await requested_claim(api, "wf-close")
    closing = {
        "type": "fail_workflow",
        "message": "workflow cancellation was requested",
        "exception_type": "WorkflowCancelled",
        "exception_class": "durable_workflow.errors.WorkflowCancelled",
    }
    done = await complete(api, task, closing)
    assert done.json()["run_status"] == "cancelled"
    assert (await history_types(api, run_id))[-1] == "WorkflowCancelled"


async def test_cancel_activity_naming_no_activity_is_refused(api: Api) -> None:
    """Burrow's `cancel_activity` (commands.py) must name a step that scheduled a queued
    activity: otherwise 409 `invalid_commands` with the reference, and nothing is written."""
    run_id, _ = await waiting_on(api, "wf-ref", sdk_command(StartTimer(delay_seconds=3600)))
    signalled = await api.control(
        "POST",
        "/api/workflows/wf-ref/signal/poke",
        json={"input": {"codec": "avro", "blob": "AA=="}},
    )
    assert signalled.status_code in (200, 202), signalled.text
    task = await api.poll_workflow()
    before = await history_types(api, run_id)
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    body = fence(task, commands=[{"type": "cancel_activity", "sequence": 1}])
    refused = await api.worker("POST", url, json=body)
    assert (refused.status_code, refused.json()["reason"]) == (409, "invalid_commands")
    assert refused.json()["missing_reference"] == {"sequence": 1}
    assert await history_types(api, run_id) == before
