"""Build pinning and workflow definition fingerprints over HTTP (SPEC S8, M7, M8; PROTOCOL.md 16).

A start pins its run to a build (`build_id`, or the `compatibility` family; an explicit build
wins); only a worker registered with that build is given its tasks, and until one is live the run
stays ready and shows as compatibility-blocked. The run records the definition fingerprint its
queue's workers registered; a worker registered with another one is told to replay cold.
"""

from __future__ import annotations

from typing import Any

from burrow.store import schema as s
from tests.integration.server.conftest import GREET, QUEUE, WORLD, Api, fence
from tests.support.store import rows

OLD = "sha256:" + "1" * 64
NEW = "sha256:" + "2" * 64


async def _start(api: Api, workflow_id: str, **pin: str) -> dict[str, Any]:
    response = await api.control(
        "POST",
        "/api/workflows",
        json={
            "workflow_id": workflow_id,
            "workflow_type": "greeter",
            "task_queue": QUEUE,
            "input": WORLD,
            **pin,
        },
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


async def _blocked(api: Api) -> int:
    response = await api.control("GET", f"/api/task-queues/{QUEUE}")
    assert response.status_code == 200, response.text
    kinds = response.json()["backlog"]["by_kind"]
    return sum(int(k["compatibility_blocked"]) for k in kinds if k["kind"] == "workflow")


async def _unclaimed(api: Api, run_id: str) -> bool:
    """Whether the run's one workflow task is ready and was never claimed."""
    [task] = await rows(api.state.store, s.workflow_tasks, run_id)
    return task["state"] == "ready" and task["claimed_at"] is None and task["lease_owner"] is None


async def test_m7_a_run_pinned_by_build_id_waits_blocked_for_a_worker_of_its_build(
    api: Api,
) -> None:
    """M7, M8: a run started with `build_id` is never given to a worker of another build; until
    a worker of its build is live it stays ready, shown compatibility-blocked; then that worker
    gets it."""
    await api.register("w-old", build_id="v1")
    started = await _start(api, "wf-pinned", build_id="v2")

    described = (await api.control("GET", "/api/workflows/wf-pinned")).json()
    assert described["compatibility"] == "v2"
    assert await api.poll_workflow("w-old", timeout_seconds=0) is None
    assert await _blocked(api) == 1
    assert await _unclaimed(api, started["run_id"])
    description = await api.state.store.describe_workflow(
        namespace="default", workflow_id="wf-pinned"
    )
    assert description.compatibility_gap is not None
    assert "pinned to build 'v2'" in description.compatibility_gap

    await api.register("w-new", build_id="v2")
    assert await _blocked(api) == 0
    task = await api.poll_workflow("w-new", timeout_seconds=5)
    assert task["run_id"] == started["run_id"]
    assert task["compatibility"] == "v2"


async def test_m7_an_explicit_build_id_wins_over_the_compatibility_family(api: Api) -> None:
    """M7 (PROTOCOL.md 16): `compatibility` pins a run too, but `build_id` wins when both are
    given."""
    await api.register("w-a", build_id="a")
    await api.register("w-b", build_id="b")
    both = await _start(api, "wf-both", build_id="b", compatibility="a")
    family = await _start(api, "wf-family", compatibility="a")

    task_a = await api.poll_workflow("w-a", timeout_seconds=5)
    assert task_a["run_id"] == family["run_id"]
    assert await api.poll_workflow("w-a", timeout_seconds=0) is None
    task_b = await api.poll_workflow("w-b", timeout_seconds=5)
    assert task_b["run_id"] == both["run_id"]


async def test_m6_a_poll_naming_another_build_than_registered_is_refused(api: Api) -> None:
    """M6, M7: a poll whose `build_id` is not the worker's registered build gets 409
    `build_id_mismatch` and takes no lease."""
    await api.register("w-v1", build_id="v1")
    started = await _start(api, "wf-mismatch", build_id="v2")
    body = {"worker_id": "w-v1", "task_queue": QUEUE, "timeout_seconds": 0, "build_id": "v2"}

    response = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)

    assert response.status_code == 409, response.text
    assert response.json()["reason"] == "build_id_mismatch"
    assert await _unclaimed(api, started["run_id"])


async def test_s8_the_run_records_the_registered_fingerprint_and_a_changed_one_replays_cold(
    api: Api,
) -> None:
    """S8: the run records, in `WorkflowStarted`, the definition fingerprint its queue's worker
    registered; a worker registered with another fingerprint is answered
    `workflow_definition_changed: true` with a cold-replay directive, one with the same is not."""
    await api.register("w-old", workflow_definition_fingerprints={"greeter": OLD})
    await _start(api, "wf-fp")
    await api.register("w-new", workflow_definition_fingerprints={"greeter": NEW})
    await api.register("w-same", workflow_definition_fingerprints={"greeter": OLD})

    task = await api.poll_workflow("w-new", timeout_seconds=5)

    started = task["history_events"][0]
    assert started["event_type"] == "WorkflowStarted"
    assert started["payload"]["workflow_definition_fingerprint"] == OLD
    assert task["workflow_definition_changed"] is True
    assert task["sticky_replay_mode"] == "forced_cold_replay"
    assert task["sticky_execution"]["cache_directive"] == "cold_replay"

    # The lease handed back, a worker with the run's own definition is not warned.
    await api.register("w-new", workflow_definition_fingerprints={"greeter": NEW})
    again = await api.poll_workflow("w-same", timeout_seconds=5)
    assert again["run_id"] == task["run_id"]
    assert again["workflow_definition_changed"] is False


async def test_s8_a_run_started_with_no_registered_fingerprint_records_none(api: Api) -> None:
    """S8: with no worker fingerprint known at the start nothing is recorded, and no worker is
    told its definition changed."""
    await _start(api, "wf-nofp")
    await api.register("w-any", workflow_definition_fingerprints={"greeter": NEW})

    task = await api.poll_workflow("w-any", timeout_seconds=5)

    assert "workflow_definition_fingerprint" not in task["history_events"][0]["payload"]
    assert task["workflow_definition_changed"] is False


async def test_s8_an_active_worker_id_cannot_register_another_definition(api: Api) -> None:
    """S8 (PROTOCOL.md 4.1): re-registering an active worker id with a changed fingerprint is a
    409 `workflow_definition_changed` that changes nothing; once deregistered, the id may."""
    await api.register("w1", workflow_definition_fingerprints={"greeter": OLD})
    body = {
        "worker_id": "w1",
        "task_queue": QUEUE,
        "supported_workflow_types": ["greeter"],
        "workflow_definition_fingerprints": {"greeter": NEW},
    }

    refused = await api.worker("POST", "/api/worker/register", json=body)

    assert refused.status_code == 409, refused.text
    assert refused.json()["reason"] == "workflow_definition_changed"
    reg = await api.state.store.worker_registration(worker_id="w1")
    assert reg is not None and reg.workflow_fingerprints == {"greeter": OLD}
    gone = await api.worker("DELETE", "/api/worker/registrations/w1")
    assert gone.status_code == 200, gone.text
    again = await api.worker("POST", "/api/worker/register", json=body)
    assert again.status_code == 201, again.text


async def _blocked_activities(api: Api) -> int:
    response = await api.control("GET", f"/api/task-queues/{QUEUE}")
    assert response.status_code == 200, response.text
    kinds = response.json()["backlog"]["by_kind"]
    return sum(int(k["compatibility_blocked"]) for k in kinds if k["kind"] == "activity")


async def _poll_activity_now(api: Api, worker_id: str) -> dict[str, Any] | None:
    body = {"worker_id": worker_id, "task_queue": QUEUE, "timeout_seconds": 0}
    response = await api.worker("POST", "/api/worker/activity-tasks/poll", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] | None = response.json()["task"]
    return task


async def test_s8_m7_a_pinned_runs_activity_goes_only_to_a_worker_of_its_build(api: Api) -> None:
    """S8, M7 (PROTOCOL.md 16): the activity a pinned run schedules inherits its build. A worker
    of another build (or of none) is given nothing; while no live worker of the build declares
    the activity it counts as compatibility-blocked; a worker of the build then gets it."""
    await api.register("w-v2", build_id="v2", supported_activity_types=[])
    started = await _start(api, "wf-pinned-act", build_id="v2")
    task = await api.poll_workflow("w-v2")
    body = fence(task, commands=[GREET])
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{task['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text
    await api.register("w-v1", build_id="v1")
    await api.register("w-none")

    assert await _poll_activity_now(api, "w-v1") is None
    assert await _poll_activity_now(api, "w-none") is None
    assert await _blocked_activities(api) == 1

    await api.register("w-v2-act", build_id="v2")
    assert await _blocked_activities(api) == 0
    activity = await _poll_activity_now(api, "w-v2-act")
    assert activity is not None
    assert activity["run_id"] == started["run_id"]
