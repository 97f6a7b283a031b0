"""Sticky execution over HTTP: bindings from `sticky_cache` completions, claim rules and replay
modes on polled tasks (PROTOCOL.md 11; SPEC S3-S7, S10).
"""

from __future__ import annotations

from typing import Any

from burrow import codec
from tests.integration.server.conftest import QUEUE, Api

STICKY = ["sticky_execution"]
GREET = {
    "type": "schedule_activity",
    "activity_type": "greet",
    "queue": QUEUE,
    "arguments": {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgp3b3JsZAA="},
}


def completion(task: dict[str, Any], **sticky: Any) -> dict[str, Any]:
    claim = {
        "worker_id": task["lease_owner"],
        "workflow_id": task["workflow_id"],
        "run_id": task["run_id"],
        "ttl_seconds": 60,
        "metrics": {"hit": 0, "miss": 1, "eviction": 0, "forced_cold_replay": 0},
        **sticky,
    }
    return {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        "commands": [GREET],
        "sticky_cache": claim,
    }


async def run_activity(api: Api, worker_id: str) -> None:
    activity = await api.poll_activity(worker_id, timeout_seconds=0)
    body = {
        "activity_attempt_id": activity["activity_attempt_id"],
        "lease_owner": worker_id,
        "result": dict(codec.encode("hello")),
    }
    done = await api.worker(
        "POST", f"/api/worker/activity-tasks/{activity['task_id']}/complete", json=body
    )
    assert done.status_code == 200, done.text


async def test_a_sticky_completion_binds_the_run_to_its_worker_s4_s5_s7(api: Api) -> None:
    """S4, S5, S7: a completion with `sticky_cache` binds the run; its next task goes to the
    owner (`sticky_hit_expected`), not to another live worker, with history from sequence 1."""
    await api.register("w1", capabilities=STICKY)
    await api.register("w2", capabilities=STICKY)
    await api.start("wf-sticky")
    first = await api.poll_workflow("w1")
    assert (first["sticky_replay_mode"], first["sticky_worker_id"]) == ("cold_replay", None)
    done = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{first['task_id']}/complete", json=completion(first)
    )
    assert done.status_code == 200, done.text
    await run_activity(api, "w2")
    assert await api.poll_workflow("w2", timeout_seconds=0) is None  # held for its owner (S5c)
    second = await api.poll_workflow("w1", timeout_seconds=0)
    assert second["run_id"] == first["run_id"]
    assert (second["sticky_replay_mode"], second["sticky_worker_id"]) == (
        "sticky_hit_expected",
        "w1",
    )
    sticky = second["sticky_execution"]
    # S10: the poll's task.sticky_execution carries all four fields.
    assert set(sticky) >= {"sticky_worker_id", "sticky_until", "replay_mode", "cache_directive"}
    assert (sticky["sticky_worker_id"], sticky["replay_mode"]) == ("w1", "sticky_hit_expected")
    assert sticky["sticky_until"] is not None
    assert sticky["cache_directive"] == "resume_if_present"
    assert second["history_events"][0]["sequence"] == 1  # a cold replay stays possible (S6)


async def test_a_departed_owner_leaves_a_forced_cold_replay_s5_s7(api: Api) -> None:
    """S5c, S7: once the owner deregisters its bound task goes to another worker, marked
    `forced_cold_replay`."""
    await api.register("w1", capabilities=STICKY)
    await api.register("w2")
    await api.start("wf-gone")
    first = await api.poll_workflow("w1")
    await api.worker(
        "POST", f"/api/worker/workflow-tasks/{first['task_id']}/complete", json=completion(first)
    )
    await run_activity(api, "w2")
    gone = await api.worker("DELETE", "/api/worker/registrations/w1")
    assert gone.status_code == 200
    task = await api.poll_workflow("w2", timeout_seconds=0)
    assert task["run_id"] == first["run_id"]
    assert task["sticky_replay_mode"] == "forced_cold_replay"
    assert task["sticky_execution"]["cache_directive"] == "cold_replay"


async def test_a_sticky_claim_must_match_the_lease_s10(api: Api) -> None:
    """PROTOCOL 11: a `sticky_cache` naming another run or worker is 409
    `sticky_cache_identity_mismatch`; from a worker without a cache 409
    `worker_capability_not_supported`; the task stays leased, nothing is written."""
    await api.register("w1", capabilities=STICKY)
    await api.register("plain")
    await api.start("wf-id")
    task = await api.poll_workflow("w1")
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    for wrong in ({"run_id": "00000000-0000-0000-0000-000000000000"}, {"worker_id": "w2"}):
        refused = await api.worker("POST", url, json=completion(task, **wrong))
        assert (refused.status_code, refused.json()["reason"]) == (
            409,
            "sticky_cache_identity_mismatch",
        )
    await api.start("wf-plain")
    plain = await api.poll_workflow("plain")
    refused = await api.worker(
        "POST", f"/api/worker/workflow-tasks/{plain['task_id']}/complete", json=completion(plain)
    )
    assert (refused.status_code, refused.json()["reason"]) == (
        409,
        "worker_capability_not_supported",
    )
    for leased in (task, plain):
        lease = await api.state.store.workflow_task_lease(task_id=leased["task_id"])
        assert lease is not None and lease.state == "leased"
        events = await api.state.store.read_history(run_id=leased["run_id"])
        assert [e.event_type for e in events] == ["WorkflowStarted"]
