"""Activity lease renewal (`POST /api/worker/activity-tasks/{taskId}/renew-lease`), through the
SDK 2.12.0 `Client.renew_activity_task_lease` on the in-process app (PROTOCOL.md 6.2, 18.3;
discovery `worker_protocol.server_capabilities.activity_lease_renewal`)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa
from durable_workflow import Client, Worker, activity, workflow
from durable_workflow.errors import ServerError

from tests.integration.server.conftest import (
    GREET,
    QUEUE,
    Api,
    fence,
)

UTC6 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")


async def _leased_attempt(api: Api, workflow_id: str) -> dict[str, Any]:
    await api.register()
    await api.start(workflow_id)
    task = await api.poll_workflow()
    url = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", url, json=fence(task, commands=[GREET]))
    assert done.status_code == 200, done.text
    return await api.poll_activity()


async def _attempt_row(api: Api, task_id: str) -> sa.Row[Any]:
    query = sa.text(
        "SELECT lease_expires_at, heartbeat_at, heartbeat_details, started_at"
        " FROM activity_tasks WHERE task_id = :task_id"
    )
    async with api.state.store.engine.connect() as conn:
        return (await conn.execute(query, {"task_id": task_id})).one()


async def _history(api: Api, run_id: str) -> list[str]:
    return [e.event_type for e in await api.state.store.read_history(run_id=run_id)]


async def test_renewal_extends_the_lease_without_recording_progress(
    api: Api, client: Client
) -> None:
    """PROTOCOL 6.2: discovery advertises `activity_lease_renewal`; the SDK's renewal answers
    the original claim's identity and a grant measured from `server_time` (UTC, six fractional
    digits); no heartbeat time or details, no history, business deadlines untouched."""
    info = await client.get_cluster_info()
    assert info["worker_protocol"]["server_capabilities"]["activity_lease_renewal"] is True
    attempt = await _leased_attempt(api, "renew-ok")
    assert UTC6.fullmatch(attempt["lease_expires_at"])
    before = await _attempt_row(api, attempt["task_id"])
    history = await _history(api, attempt["run_id"])
    reply = await client.renew_activity_task_lease(
        task_id=attempt["task_id"],
        activity_attempt_id=attempt["activity_attempt_id"],
        lease_owner="w1",
    )
    identity = {
        "workflow_task_id": attempt["task_id"],
        "workflow_instance_id": attempt["workflow_id"],
        "workflow_run_id": attempt["run_id"],
        "activity_execution_id": attempt["activity_execution_id"],
        "activity_attempt_id": attempt["activity_attempt_id"],
        "attempt_number": 1,
        "lease_owner": "w1",
    }
    assert {key: reply[key] for key in identity} == identity
    assert (reply["lease_renewed"], reply["heartbeat_recorded"]) == (True, False)
    assert (reply["can_continue"], reply["cancel_requested"], reply["reason"]) == (
        True,
        False,
        None,
    )
    assert UTC6.fullmatch(reply["server_time"]) and UTC6.fullmatch(reply["lease_expires_at"])
    grant = _at(reply["lease_expires_at"]) - _at(reply["server_time"])
    assert grant.total_seconds() == api.state.settings.activity_task_lease_seconds
    assert reply["last_heartbeat_at"] is None
    after = await _attempt_row(api, attempt["task_id"])
    assert after.lease_expires_at > before.lease_expires_at
    assert (after.heartbeat_at, after.heartbeat_details, after.started_at) == (
        before.heartbeat_at,
        before.heartbeat_details,
        before.started_at,
    )
    assert await _history(api, attempt["run_id"]) == history


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize(
    ("change", "status", "reason"),
    [
        ({"lease_owner": "w2"}, 409, "lease_owner_mismatch"),
        ({"activity_attempt_id": "00000000-0000-0000-0000-000000000000"}, 409, "stale_attempt"),
        ({"task_id": "00000000-0000-0000-0000-000000000000"}, 404, "task_not_found"),
    ],
)
async def test_renewal_refuses_a_foreign_or_stale_claim_as_a_heartbeat_does(
    api: Api, client: Client, change: dict[str, str], status: int, reason: str
) -> None:
    """PROTOCOL 18.3: a foreign owner, a superseded attempt or an unknown task is refused with
    the heartbeat's status and code; the lease and the history stay as they were."""
    attempt = await _leased_attempt(api, "renew-foreign")
    before = await _attempt_row(api, attempt["task_id"])
    history = await _history(api, attempt["run_id"])
    named = {
        "task_id": attempt["task_id"],
        "activity_attempt_id": attempt["activity_attempt_id"],
        "lease_owner": "w1",
        **change,
    }
    beat = await api.worker(
        "POST",
        f"/api/worker/activity-tasks/{named['task_id']}/heartbeat",
        json={k: v for k, v in named.items() if k != "task_id"},
    )
    with pytest.raises(ServerError) as refused:
        await client.renew_activity_task_lease(**named)
    assert (refused.value.status, refused.value.reason()) == (status, reason)
    assert (beat.status_code, beat.json()["reason"]) == (status, reason)
    assert await _attempt_row(api, attempt["task_id"]) == before
    assert await _history(api, attempt["run_id"]) == history


async def test_renewal_never_revives_an_expired_lease(api: Api, client: Client) -> None:
    """PROTOCOL 6.2, 18.3: once the lease ran out the claim is gone: renewal is refused as
    the heartbeat is, and the expired lease stays expired."""
    attempt = await _leased_attempt(api, "renew-expired")
    async with api.state.store.engine.begin() as conn:
        await conn.execute(
            sa.text(
                "UPDATE activity_tasks SET lease_expires_at = now() - interval '1 second'"
                " WHERE task_id = :task_id"
            ),
            {"task_id": attempt["task_id"]},
        )
    before = await _attempt_row(api, attempt["task_id"])
    own = {"activity_attempt_id": attempt["activity_attempt_id"], "lease_owner": "w1"}
    beat = await api.worker(
        "POST", f"/api/worker/activity-tasks/{attempt['task_id']}/heartbeat", json=own
    )
    with pytest.raises(ServerError) as refused:
        await client.renew_activity_task_lease(task_id=attempt["task_id"], **own)
    assert (refused.value.status, refused.value.reason()) == (
        beat.status_code,
        beat.json()["reason"],
    )
    assert (beat.status_code, beat.json()["reason"]) == (409, "lease_expired")
    assert await _attempt_row(api, attempt["task_id"]) == before


@activity.defn(name="lease-renewed-greet")
async def greet(name: str) -> str:
    await activity.context().heartbeat({"step": 1})
    return f"hello, {name}"


@workflow.defn(name="lease-renewed")
class Greeting:
    def run(self, ctx: Any, name: str) -> Any:
        return (yield ctx.schedule_activity("lease-renewed-greet", [name]))


async def test_an_sdk_worker_confirms_each_delivery_by_renewal(api: Api, client: Client) -> None:
    """SDK 2.12.0 worker with `activity_lease_renewal`: each leased activity is confirmed by a
    renewal before it runs (poll `server_time`, canonical times), its heartbeat is acknowledged
    (`last_heartbeat_at`), and the run completes."""
    paths: list[str] = []

    async def seen(request: Any) -> None:
        paths.append(request.url.path)

    api.http.event_hooks["request"].append(seen)
    await client.start_workflow(
        workflow_type="lease-renewed", workflow_id="renew-sdk", task_queue=QUEUE, input=["A"]
    )
    runner = Worker(
        client, task_queue=QUEUE, workflows=[Greeting], activities=[greet], poll_timeout=2
    )
    done = await runner.run_until(workflow_id="renew-sdk", timeout=30)
    assert (done.status, done.output) == ("completed", "hello, A")
    assert any(p.endswith("/renew-lease") for p in paths)
    assert any(p.endswith("/heartbeat") and "/activity-tasks/" in p for p in paths)
