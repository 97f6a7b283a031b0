"""Standalone activities over HTTP: `/api/activities` as SDK 2.12.0's Client uses it.

PROTOCOL.md 17 (`start_activity`, `describe_activity`, `list_activities`,
`get_activity_result`): an activity run without workflow code, claimed by ordinary activity
workers of its queue and anchored by a host run that closes with it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from burrow import codec
from burrow.store import activities
from burrow.store import schema as s
from burrow.store.models import ClaimFence
from burrow.testing import assert_eventually
from tests.integration.server.conftest import QUEUE, WORLD, Api


async def _start(api: Api, activity_id: str, **extra: Any) -> dict[str, Any]:
    body = {"activity_type": "greet", "task_queue": QUEUE, "activity_id": activity_id, **extra}
    response = await api.control("POST", "/api/activities", json={"input": WORLD, **body})
    assert response.status_code == 201, response.text
    started: dict[str, Any] = response.json()
    return started


async def _written(api: Api) -> tuple[int, int, int]:
    """How many standalone rows, runs and history events the database holds."""
    async with api.state.store.engine.begin() as conn:
        counts = [
            (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar_one()
            for table in (s.standalone_activities, s.runs, s.history_events)
        ]
    return counts[0], counts[1], counts[2]


async def _open_workflow_tasks(api: Api, run_id: str) -> int:
    w = s.workflow_tasks.c
    async with api.state.store.engine.begin() as conn:
        stmt = sa.select(sa.func.count()).where(
            w.run_id == run_id, w.state.in_(["ready", "leased"])
        )
        count: int = (await conn.execute(stmt)).scalar_one()
    return count


async def _report(api: Api, task: dict[str, Any], outcome: str, **body: Any) -> dict[str, Any]:
    own = {"activity_attempt_id": task["activity_attempt_id"], "lease_owner": "w1"}
    response = await api.worker(
        "POST", f"/api/worker/activity-tasks/{task['task_id']}/{outcome}", json={**own, **body}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_standalone_activity_runs_on_an_activity_worker_and_completes(api: Api) -> None:
    """PROTOCOL.md 17 `start_activity` / `describe_activity`: the SDK's shapes; an ordinary
    activity worker of the queue claims it; its result closes the host run (no workflow task)."""
    await api.register()
    started = await _start(api, "act-1", activity_class="greeting", business_key="order-7")
    assert started["activity_id"] == "act-1"
    assert started["status"] == "running"
    assert started["activity_status"] == "ready"
    assert started["workflow_type"] == "burrow.standalone_activity"
    run_id = started["workflow_run_id"]
    assert started["activity_execution_id"] == f"{run_id}:1"
    assert await _open_workflow_tasks(api, run_id) == 0

    task = await api.poll_activity()
    assert (task["workflow_id"], task["run_id"]) == ("act-1", run_id)
    assert (task["activity_type"], task["arguments"]) == ("greet", WORLD)
    result = dict(codec.encode("hello world"))
    assert (await _report(api, task, "complete", result=result))["outcome"] == "completed"

    described = (await api.control("GET", "/api/activities/act-1")).json()
    assert described["status"] == "completed"
    assert described["activity_status"] == "completed"
    assert described["result"] == result
    assert (described["activity_class"], described["business_key"]) == ("greeting", "order-7")
    assert described["attempt_count"] == 1
    assert described["closed_at"] is not None
    assert await _open_workflow_tasks(api, run_id) == 0
    history = await api.control("GET", f"/api/workflows/act-1/runs/{run_id}/history")
    types = [event["event_type"] for event in history.json()["events"]]
    assert types[0] == "WorkflowStarted"
    assert types[-2:] == ["ActivityCompleted", "WorkflowCompleted"]


async def test_a_standalone_activity_retries_then_fails_for_good(api: Api) -> None:
    """PROTOCOL.md 17 `get_activity_result`: the retry policy applies as to any activity; the
    last failure fails the host run, and describe reads `failed` with the failure."""
    await api.register()
    policy = {"max_attempts": 2, "backoff_seconds": [0.001]}
    await _start(api, "act-retry", retry_policy=policy)
    first = await api.poll_activity()
    failure = {"failure": {"message": "flaky", "type": "IOError"}}
    assert (await _report(api, first, "fail", **failure))["outcome"] == "retry_scheduled"
    running = (await api.control("GET", "/api/activities/act-retry")).json()
    assert (running["status"], running["last_failure"]["message"]) == ("running", "flaky")

    second = await api.poll_activity()
    assert second["attempt_number"] == 2
    assert (await _report(api, second, "fail", **failure))["outcome"] == "failed"
    failed = (await api.control("GET", "/api/activities/act-retry")).json()
    assert (failed["status"], failed["closed_reason"]) == ("failed", "failed")
    assert failed["failure"]["message"] == "flaky"
    assert failed["attempt_count"] == 2


async def test_listing_pages_newest_first_and_filters_by_status(api: Api) -> None:
    """PROTOCOL.md 17 `list_activities`: `activities`, `activity_count`, `next_page_token`;
    `status` filters on the host run's bucket. Workflows are not listed."""
    await api.register()
    await api.start("wf-not-listed")
    for n in range(3):
        await _start(api, f"act-page-{n}")
    task = await api.poll_activity()
    await _report(api, task, "complete", result=dict(codec.encode(1)))

    first = (await api.control("GET", "/api/activities?page_size=2")).json()
    assert first["activity_count"] == 2
    assert [a["activity_id"] for a in first["activities"]] == ["act-page-2", "act-page-1"]
    token = first["next_page_token"]
    second = await api.control("GET", f"/api/activities?page_size=2&next_page_token={token}")
    rest = second.json()
    assert [a["activity_id"] for a in rest["activities"]] == ["act-page-0"]
    assert rest["next_page_token"] is None
    done = (await api.control("GET", "/api/activities?status=completed")).json()
    assert [a["activity_id"] for a in done["activities"]] == [task["workflow_id"]]
    running = (await api.control("GET", "/api/activities?status=running")).json()
    assert running["activity_count"] == 2


async def test_refusals_write_nothing(api: Api) -> None:
    """PROTOCOL.md 2.4, 17: a used id (409 `instance_already_started`), a bad body or timeout
    (422 `validation_failed`), an unknown status or page token, an unknown activity (404
    `activity_not_found`): each refused with its code, and nothing written."""
    await _start(api, "act-dup")
    await api.start("wf-taken")
    before = await _written(api)
    refusals: list[tuple[str, str, dict[str, Any] | None, int, str]] = [
        (
            "POST",
            "/api/activities",
            {"activity_type": "greet", "task_queue": QUEUE, "activity_id": "act-dup"},
            409,
            "instance_already_started",
        ),
        (
            "POST",
            "/api/activities",
            {"activity_type": "greet", "task_queue": QUEUE, "activity_id": "wf-taken"},
            409,
            "instance_already_started",
        ),
        ("POST", "/api/activities", {"activity_type": "greet"}, 422, "validation_failed"),
        (
            "POST",
            "/api/activities",
            {"activity_type": "greet", "task_queue": QUEUE, "activity_id": "bad id!"},
            422,
            "validation_failed",
        ),
        (
            "POST",
            "/api/activities",
            {"activity_type": "greet", "task_queue": QUEUE, "start_to_close_timeout_seconds": -1},
            422,
            "validation_failed",
        ),
        (
            "POST",
            "/api/activities",
            {"activity_type": "greet", "task_queue": QUEUE, "retry_policy": {"max_attempts": -1}},
            422,
            "validation_failed",
        ),
        ("GET", "/api/activities?status=sleeping", None, 422, "validation_failed"),
        ("GET", "/api/activities?next_page_token=bm9wZQ", None, 400, "invalid_page_token"),
        ("GET", "/api/activities/act-missing", None, 404, "activity_not_found"),
    ]
    for method, path, body, status, reason in refusals:
        response = await api.control(method, path, json=body)
        assert (response.status_code, response.json()["reason"]) == (status, reason), path
    assert await _written(api) == before


async def test_a_timeout_found_by_the_repair_pass_fails_the_activity(api: Api) -> None:
    """PROTOCOL.md 17 with 6.2's timeouts: an attempt nobody claimed within its
    schedule-to-start timeout is timed out by the repair pass, which closes the host run."""
    started = await _start(
        api, "act-late", schedule_to_start_timeout_seconds=0.001, retry_policy={"max_attempts": 1}
    )
    assert started["schedule_to_start_deadline_at"] is not None

    async def swept() -> dict[str, Any] | None:
        # A pass is skipped while the app's own sweeper holds the database's sweep lock.
        await api.state.store.sweep()
        described: dict[str, Any] = (await api.control("GET", "/api/activities/act-late")).json()
        return None if described["status"] == "running" else described

    described = await assert_eventually(swept, timeout=10, message="no timeout")
    assert (described["status"], described["closed_reason"]) == ("failed", "timed_out")
    assert described["failure"]["timeout_kind"] == "schedule_to_start"
    assert await _open_workflow_tasks(api, started["workflow_run_id"]) == 0


async def test_cancel_through_the_workflow_route_closes_the_activity(api: Api) -> None:
    """PROTOCOL.md 17: the SDK's `StandaloneActivityHandle.cancel` is the workflow cancel of
    the activity id; the activity reads cancelled and its attempt is never handed out."""
    await api.register()
    await _start(api, "act-cancel")
    cancelled = await api.control("POST", "/api/workflows/act-cancel/cancel", json={})
    assert cancelled.status_code == 200, cancelled.text
    described = (await api.control("GET", "/api/activities/act-cancel")).json()
    assert (described["status"], described["activity_status"]) == ("cancelled", "cancelled")
    poll = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
    assert (await api.worker("POST", "/api/worker/activity-tasks/poll", json=poll)).json()[
        "task"
    ] is None
    await api.state.store.sweep()  # the repair pass marks it settled and leaves it so
    assert (await api.control("GET", "/api/activities/act-cancel")).json() == described


async def test_the_repair_pass_closes_a_host_its_completion_left_open(api: Api) -> None:
    """PROTOCOL.md 17, store invariant 5: the host closes in a transaction after the
    completion's statement; when that one never ran (a crash between the two), the repair pass
    closes the host with the recorded result."""
    await api.register()
    await _start(api, "act-crash")
    task = await api.poll_activity()
    lease = ClaimFence(
        task_id=task["task_id"],
        namespace="default",
        lease_owner="w1",
        activity_attempt_id=task["activity_attempt_id"],
    )
    result = dict(codec.encode("done"))
    await api.state.store.transactions.statement(
        lambda txn: activities.complete_activity(txn, lease=lease, result=result)
    )
    left = (await api.control("GET", "/api/activities/act-crash")).json()
    assert (left["status"], left["activity_status"]) == ("running", "completed")

    async def swept() -> dict[str, Any] | None:
        await api.state.store.sweep()
        described: dict[str, Any] = (await api.control("GET", "/api/activities/act-crash")).json()
        return None if described["status"] == "running" else described

    described = await assert_eventually(swept, timeout=10, message="host left open")
    assert (described["status"], described["result"]) == ("completed", result)
    assert await _open_workflow_tasks(api, described["workflow_run_id"]) == 0
