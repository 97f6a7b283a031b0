"""Fleet and system control routes through the SDK 2.12.0 `Client` (SPEC M7, M8; reference
server routes/api.php: TaskQueueController, WorkerManagementController, SystemController).

The SDK's own methods call the in-process app; what they parse must come back filled, refusals
carry the reference's status and reason, and a refused call writes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from durable_workflow import Client
from durable_workflow.errors import DurableWorkflowError, ServerError

from burrow.store import repair
from burrow.store import schema as s
from tests.integration.server.conftest import (
    ADMIN_TOKEN,
    CONTROL,
    GREET,
    OPERATOR_TOKEN,
    QUEUE,
    WORLD,
    Api,
    fence,
)
from tests.support.store import execute, rows

AS_ADMIN = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}
SDK_WORKER = {"sdk_version": "2.12.0", "max_concurrent_workflow_tasks": 4}


@pytest.fixture
async def sdk(api: Api) -> AsyncIterator[tuple[Client, Client]]:
    """(operator, admin) SDK clients whose requests go to the in-process app."""
    clients = []
    for token in (OPERATOR_TOKEN, ADMIN_TOKEN):
        client = Client("http://test", token=token, namespace="default")
        await client._http.aclose()
        client._http = api.http  # the app, through ASGI (closed by the api fixture)
        clients.append(client)
    yield clients[0], clients[1]


async def _leased(api: Api) -> dict[str, Any]:
    """w1 (an SDK worker) on QUEUE holding one workflow task; another run's task ready."""
    await api.register("w1", **SDK_WORKER)
    first = await api.start("wf-leased")
    await api.start("wf-ready")
    task = await api.poll_workflow("w1")
    assert task["workflow_id"] == first["workflow_id"]
    return task


async def test_sdk_reads_task_queues_and_workers_m8(api: Api, sdk: tuple[Client, Client]) -> None:
    """M8, reference TaskQueueVisibilityTest / WorkerManagementTest: `list_task_queues`,
    `describe_task_queue`, `list_workers`, `describe_worker` parse filled values; an unknown
    worker is 404 `worker_not_found`."""
    operator, _ = sdk
    task = await _leased(api)

    [listed] = (await operator.list_task_queues()).task_queues
    assert listed.name == QUEUE and listed.admission is not None
    assert listed.stats is not None and listed.stats["approximate_backlog_count"] == 1
    assert listed.pollers is None  # the index leaves pollers out, as the reference does
    one = await operator.describe_task_queue(QUEUE)
    assert (one.name, one.namespace) == (QUEUE, "default")
    assert one.stats is not None and one.stats["workflow_tasks"] == {
        "ready_count": 1,
        "leased_count": 1,
        "expired_lease_count": 0,
    }
    assert one.stats["oldest_ready_task"]["workflow_id"] == "wf-ready"
    assert one.pollers is not None and one.pollers[0]["worker_id"] == "w1"
    assert one.current_leases is not None
    [lease] = one.current_leases
    assert (lease["task_id"], lease["lease_owner"], lease["workflow_task_attempt"]) == (
        task["task_id"],
        "w1",
        1,
    )
    assert one.admission is not None and one.admission.workflow_tasks is not None
    admitted = one.admission.workflow_tasks
    assert (admitted.configured_slot_count, admitted.available_slot_count) == (4, 3)
    assert admitted.status == "accepting"
    assert one.raw is not None and one.raw["backlog"]["runnable_tasks"] == 1  # Burrow's own

    roster = await operator.list_workers()
    assert roster.stale_after_seconds and [w.worker_id for w in roster.workers] == ["w1"]
    [worker] = roster.workers
    assert (worker.task_queue, worker.status, worker.sdk_version) == (QUEUE, "active", "2.12.0")
    assert worker.supported_workflow_types == ["greeter"]
    assert worker.max_concurrent_workflow_tasks == 4
    assert (await operator.list_workers(task_queue="other")).workers == []
    assert (await operator.list_workers(status="stale")).workers == []
    described = await operator.describe_worker("w1")
    assert (described.worker_id, described.runtime, described.status) == ("w1", "python", "active")
    assert described.last_heartbeat_at and described.registered_at and described.updated_at

    missing = await api.control("GET", "/api/workers/nobody")
    assert (missing.status_code, missing.json()["reason"]) == (404, "worker_not_found")
    assert missing.json()["message"] == "Worker [nobody] not found in namespace [default]."


async def test_deregister_worker_needs_the_admin_role_m8(
    api: Api, sdk: tuple[Client, Client]
) -> None:
    """M8, reference routes/api.php: `DELETE /api/workers/{id}` is admin only; the operator is
    refused and nothing changes; the admin's removal stops the worker and hands its workflow
    task back; unknown ids are 404 and other methods 405."""
    operator, admin = sdk
    task = await _leased(api)
    before = await rows(api.state.store, s.worker_registrations)

    with pytest.raises(DurableWorkflowError):
        await operator.deregister_worker("w1")
    assert await rows(api.state.store, s.worker_registrations) == before

    assert await admin.deregister_worker("w1") == {
        "worker_id": "w1",
        "outcome": "deregistered",
        "recovered_workflow_task_count": 1,
    }
    assert (await operator.list_workers()).workers == []
    states = {t["task_id"]: t["state"] for t in await rows(api.state.store, s.workflow_tasks)}
    assert states[task["task_id"]] == "ready" and set(states.values()) == {"ready"}

    gone = await api.http.delete("/api/workers/w1", headers=AS_ADMIN)
    assert (gone.status_code, gone.json()["reason"]) == (404, "worker_not_found")
    put = await api.http.put("/api/workers/w1", headers=AS_ADMIN)
    assert put.status_code == 405


async def test_build_id_drain_and_resume_m7(api: Api, sdk: tuple[Client, Client]) -> None:
    """M7, M8, reference TaskQueueBuildIdsTest / TaskQueueBuildIdDrainTest: cohorts by build id;
    a drained cohort's workers are refused new work at once and register draining; a repeated
    drain keeps its `drained_at`; resume makes them active; `build_id` is required (422, nothing
    written)."""
    operator, _ = sdk
    await api.register("old", build_id="v1", **SDK_WORKER)
    await api.register("new", build_id="v2", **SDK_WORKER)
    await api.register("plain")

    rollout = await operator.list_task_queue_build_ids(QUEUE)
    assert (rollout.task_queue, rollout.stale_after_seconds) == (QUEUE, rollout.stale_after_seconds)
    statuses = {c.build_id: (c.rollout_status, c.active_worker_count) for c in rollout.build_ids}
    assert statuses == {"v1": ("active", 1), "v2": ("active", 1), None: ("active", 1)}
    assert rollout.build_ids[-1].build_id is None  # the unversioned cohort sorts last
    assert rollout.build_ids[0].sdk_versions == ["2.12.0"]

    missing = await api.control("POST", f"/api/task-queues/{QUEUE}/build-ids/drain", json={})
    assert (missing.status_code, missing.json()["reason"]) == (422, "validation_failed")
    assert await rows(api.state.store, s.build_rollouts) == []

    drained = await operator.drain_task_queue_build_id(QUEUE, "v1")
    assert (drained.build_id, drained.drain_intent) == ("v1", "draining")
    assert drained.drained_at is not None
    again = await operator.drain_task_queue_build_id(QUEUE, "v1")
    assert again.drained_at == drained.drained_at
    poll = {"worker_id": "old", "task_queue": QUEUE, "timeout_seconds": 1}
    refused = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=poll)
    assert (refused.status_code, refused.json()["reason"]) == (409, "worker_draining")
    late = {"worker_id": "old-2", "task_queue": QUEUE, "build_id": "v1"}
    registered = await api.worker("POST", "/api/worker/register", json=late)
    assert (registered.status_code, registered.json()["status"]) == (201, "draining")
    assert (await operator.describe_worker("old-2")).status == "draining"
    cohort = {c.build_id: c for c in (await operator.list_task_queue_build_ids(QUEUE)).build_ids}
    assert (cohort["v1"].rollout_status, cohort["v1"].draining_worker_count) == ("draining", 2)

    resumed = await operator.resume_task_queue_build_id(QUEUE, "v1")
    assert (resumed.drain_intent, resumed.drained_at) == ("active", None)
    assert {w.worker_id: w.status for w in (await operator.list_workers()).workers} == {
        "old": "active",
        "old-2": "active",
        "new": "active",
        "plain": "active",
    }
    unversioned = await operator.drain_task_queue_build_id(QUEUE, None)
    assert (unversioned.build_id, unversioned.drain_intent) == (None, "draining")
    assert (await operator.describe_worker("plain")).status == "draining"


async def test_promoted_build_pins_fresh_starts_m7(api: Api, sdk: tuple[Client, Client]) -> None:
    """M7, newest reference TaskQueueController::promoteBuildId: fresh starts on the queue pin to
    the promoted build (one at a time, idempotent); a draining cohort or one without a live
    worker is refused with 409 and its blockage, and nothing is written."""
    operator, _ = sdk
    await api.register("old", build_id="v1")
    await api.register("new", build_id="v2")
    await operator.drain_task_queue_build_id(QUEUE, "v1")
    before = await rows(api.state.store, s.build_rollouts)

    with pytest.raises(ServerError) as draining:
        await operator.promote_task_queue_build_id(QUEUE, "v1")
    assert (draining.value.status, draining.value.reason()) == (409, "fleet_is_draining")
    nobody = await api.control(
        "POST", f"/api/task-queues/{QUEUE}/build-ids/promote", json={"build_id": "v9"}
    )
    assert (nobody.status_code, nobody.json()["reason"]) == (409, "no_compatible_workers")
    assert nobody.json()["blockages"][0]["reason"] == "no_compatible_workers"
    assert await rows(api.state.store, s.build_rollouts) == before

    promoted = await operator.promote_task_queue_build_id(QUEUE, "v2")
    assert (promoted.build_id, promoted.new_start_selected) == ("v2", True)
    assert promoted.promoted_at is not None
    again = await operator.promote_task_queue_build_id(QUEUE, "v2")
    assert again.promoted_at == promoted.promoted_at
    cohorts = {c.build_id: c for c in (await operator.list_task_queue_build_ids(QUEUE)).build_ids}
    assert (cohorts["v2"].new_start_selected, cohorts["v1"].new_start_selected) == (True, False)

    await api.start("wf-fresh")
    explicit = {
        "workflow_id": "wf-pinned",
        "workflow_type": "greeter",
        "task_queue": QUEUE,
        "input": WORLD,
    }
    started = await api.control("POST", "/api/workflows", json={**explicit, "build_id": "v1"})
    assert started.status_code == 201, started.text
    pins = {r["workflow_id"]: r["build_id"] for r in await rows(api.state.store, s.runs)}
    assert pins == {"wf-fresh": "v2", "wf-pinned": "v1"}  # an explicit build wins
    [fresh] = [r for r in await rows(api.state.store, s.workflow_tasks) if r["build_id"] == "v2"]
    assert fresh["state"] == "ready"


async def test_repair_status_and_pass_m8(api: Api, sdk: tuple[Client, Client]) -> None:
    """M8, reference TransportRepairTest: admin only (the operator is refused and nothing is
    repaired); the status counts an expired lease, one pass returns it to ready and reports it;
    a malformed filter is 422."""
    operator, admin = sdk
    await _leased(api)
    await execute(
        api.state.store,
        "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 minute'"
        " WHERE state = 'leased'",
    )
    with pytest.raises(DurableWorkflowError):
        await operator.repair_pass()
    leased = [t for t in await rows(api.state.store, s.workflow_tasks) if t["state"] == "leased"]
    assert len(leased) == 1

    status = await admin.repair_status()
    assert status["policy"]["scan_limit"] > 0
    assert status["candidates"]["existing_task_candidates"] == 1
    report = await admin.repair_pass()
    assert (report["throttled"], report["repaired_existing_tasks"]) == (False, 1)
    assert report["existing_task_failures"] == []
    assert [t["state"] for t in await rows(api.state.store, s.workflow_tasks)] == ["ready"] * 2

    bad = await api.http.post("/api/system/repair/pass", headers=AS_ADMIN, json={"run_ids": "x"})
    assert (bad.status_code, bad.json()["reason"]) == (422, "validation_failed")


async def test_activity_timeouts_and_retention_m8(api: Api, sdk: tuple[Client, Client]) -> None:
    """M8, reference ActivityTimeoutTest / HistoryRetentionTest: an activity whose lease ran
    out is listed and enforced (retried); an unknown execution is skipped; the default
    namespace keeps closed runs 30 days, so an open run is neither listed nor deleted."""
    _, admin = sdk
    await api.register("w1", **SDK_WORKER)
    await api.start("wf-act")
    task = await api.poll_workflow("w1")
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=fence(task, commands=[GREET]),
    )
    assert done.status_code == 200, done.text
    attempt = await api.poll_activity("w1")
    await execute(
        api.state.store,
        "UPDATE activity_tasks SET lease_expires_at = now() - interval '1 minute'",
    )

    status = await admin.activity_timeout_status()
    [execution_id] = status["expired_execution_ids"]
    assert (status["expired_count"], status["scan_limit"], status["scan_pressure"]) == (
        1,
        100,
        False,
    )
    skipped = await admin.activity_timeout_pass(execution_ids=["nope"])
    assert skipped["results"] == [
        {"execution_id": "nope", "outcome": "skipped", "reason": "execution_not_found"}
    ]
    enforced = await admin.activity_timeout_pass()
    assert (enforced["processed"], enforced["enforced"], enforced["failed"]) == (1, 1, 0)
    assert enforced["results"] == [
        {"execution_id": execution_id, "outcome": "enforced", "has_retry": True}
    ]
    [activity] = await rows(api.state.store, s.activity_tasks)
    assert (activity["state"], activity["attempt"]) == ("ready", attempt["attempt_number"] + 1)

    runs = await rows(api.state.store, s.runs)
    retention = await admin.retention_status()
    assert (retention["namespace"], retention["retention_days"]) == ("default", 30)
    assert (retention["expired_run_count"], retention["expired_run_ids"]) == (0, [])
    pruned = await admin.retention_pass(run_ids=[runs[0]["run_id"]])
    assert (pruned["processed"], pruned["pruned"], pruned["skipped"]) == (1, 0, 1)
    assert pruned["results"][0]["reason"] == "run_not_terminal"
    assert await rows(api.state.store, s.runs) == runs


async def test_activity_timeout_pass_isolates_a_failing_execution_m8(
    api: Api, sdk: tuple[Client, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """M8, reference SystemController: an execution whose enforcement raises is rolled back and
    reported as an error with 207; its activity stays as it was."""
    _, admin = sdk
    await api.register("w1", **SDK_WORKER)
    await api.start("wf-act")
    task = await api.poll_workflow("w1")
    done = await api.worker(
        "POST",
        f"/api/worker/workflow-tasks/{task['task_id']}/complete",
        json=fence(task, commands=[GREET]),
    )
    assert done.status_code == 200, done.text
    await api.poll_activity("w1")
    await execute(
        api.state.store, "UPDATE activity_tasks SET lease_expires_at = now() - interval '1 minute'"
    )
    before = await rows(api.state.store, s.activity_tasks)

    async def broken(*_: object) -> int:
        raise RuntimeError("enforcement broke")

    monkeypatch.setattr(repair, "_time_out_attempt", broken)
    [execution_id] = (await admin.activity_timeout_status())["expired_execution_ids"]
    response = await api.http.post(
        "/api/system/activity-timeouts/pass",
        headers=AS_ADMIN,
        json={"execution_ids": [execution_id]},
    )
    assert response.status_code == 207, response.text
    assert (response.json()["failed"], response.json()["results"][0]["outcome"]) == (1, "error")
    assert await rows(api.state.store, s.activity_tasks) == before
