"""Query claim observation (`GET /api/worker/query-tasks/{queryTaskId}/status`), through the
SDK 2.12.0 `Client.query_task_status` on the in-process app (protocol 1.20 query authority:
discovery `worker_protocol.server_capabilities.query_task_authority`; PROTOCOL.md 6.3)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from durable_workflow import Client, Worker, workflow
from durable_workflow.errors import ServerError

from burrow import codec
from tests.integration.server.conftest import QUEUE, Api, InProcessClient, sdk_on_app

QUERY_TASKS = "/api/worker/query-tasks"
UTC6 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
TIMING = ("lease_expires_at", "query_admitted_at", "query_deadline_at")


async def _leased_query(
    api: Api, workflow_id: str
) -> tuple[dict[str, Any], asyncio.Task[httpx.Response]]:
    """A query task leased to `w1`, and the control-plane query waiting on its answer."""
    await api.register()
    await api.start(workflow_id)
    url = f"/api/workflows/{workflow_id}/query/status"
    asking = asyncio.create_task(api.control("POST", url, json={"input": dict(codec.encode([1]))}))
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
    response = await api.worker("POST", f"{QUERY_TASKS}/poll", json=body)
    assert response.status_code == 200, response.text
    task: dict[str, Any] = response.json()["task"]
    return task, asking


async def _query_row(api: Api, task_id: str) -> sa.Row[Any]:
    query = sa.text(
        "SELECT state, attempt, lease_owner, lease_expires_at FROM query_tasks"
        " WHERE task_id = :task_id"
    )
    async with api.state.store.engine.connect() as conn:
        return (await conn.execute(query, {"task_id": task_id})).one()


async def _history(api: Api, run_id: str) -> list[str]:
    return [e.event_type for e in await api.state.store.read_history(run_id=run_id)]


async def _answer(api: Api, task: dict[str, Any], asking: asyncio.Task[httpx.Response]) -> None:
    answer = {
        "lease_owner": "w1",
        "query_task_attempt": task["query_task_attempt"],
        "result_envelope": dict(codec.encode("ok")),
    }
    done = await api.worker("POST", f"{QUERY_TASKS}/{task['query_task_id']}/complete", json=answer)
    assert done.status_code == 200, done.text
    assert (await asking).status_code == 200


async def test_the_holder_observes_its_query_claim_unrenewed(api: Api, client: Client) -> None:
    """Protocol 1.20 query authority: the poll carries the original timing (UTC, six
    fractional digits; the lease ends by the deadline) and `server_time`; the SDK's
    observation repeats it, `leased`, `can_continue`; the lease is not renewed, no history."""
    info = await client.get_cluster_info()
    assert info["worker_protocol"]["server_capabilities"]["query_task_authority"] is True
    task, asking = await _leased_query(api, "qs-ok")
    assert all(UTC6.fullmatch(task[key]) for key in (*TIMING, "server_time"))
    assert task["query_admitted_at"] <= task["lease_expires_at"] <= task["query_deadline_at"]
    before = await _query_row(api, task["query_task_id"])
    history = await _history(api, task["run_id"])
    reply = await client.query_task_status(
        query_task_id=task["query_task_id"], lease_owner="w1", query_task_attempt=1
    )
    assert {key: reply[key] for key in ("query_task_id", "query_task_attempt", *TIMING)} == {
        key: task[key] for key in ("query_task_id", "query_task_attempt", *TIMING)
    }
    assert (reply["lease_owner"], reply["query_task_status"]) == ("w1", "leased")
    assert (reply["can_continue"], reply["reason"]) == (True, None)
    assert UTC6.fullmatch(reply["server_time"]) and reply["server_time"] >= task["server_time"]
    assert await _query_row(api, task["query_task_id"]) == before
    assert await _history(api, task["run_id"]) == history
    await _answer(api, task, asking)


@pytest.mark.parametrize(
    ("owner", "attempt", "unknown", "status", "reason"),
    [
        ("w2", 1, False, 409, "lease_owner_mismatch"),
        ("w1", 2, False, 409, "query_task_attempt_mismatch"),
        ("w1", 1, True, 404, "query_task_not_found"),
    ],
)
async def test_a_foreign_or_stale_observation_is_refused_as_an_answer_is(
    api: Api, client: Client, owner: str, attempt: int, unknown: bool, status: int, reason: str
) -> None:
    """PROTOCOL 6.3: another owner, another attempt or an unknown task is refused with the
    status and code an answer would get; the claim and the history stay as they were."""
    task, asking = await _leased_query(api, f"qs-{reason}")
    task_id = "00000000-0000-0000-0000-000000000000" if unknown else task["query_task_id"]
    before = await _query_row(api, task["query_task_id"])
    with pytest.raises(ServerError) as refused:
        await client.query_task_status(
            query_task_id=task_id, lease_owner=owner, query_task_attempt=attempt
        )
    assert (refused.value.status, refused.value.reason()) == (status, reason)
    answer = {
        "lease_owner": owner,
        "query_task_attempt": attempt,
        "result_envelope": dict(codec.encode("ok")),
    }
    as_answer = await api.worker("POST", f"{QUERY_TASKS}/{task_id}/complete", json=answer)
    assert (as_answer.status_code, as_answer.json()["reason"]) == (status, reason)
    assert await _query_row(api, task["query_task_id"]) == before
    await _answer(api, task, asking)


async def test_an_expired_or_answered_claim_is_refused(api: Api, client: Client) -> None:
    """PROTOCOL 6.3: an expired claim and an answered one are 409 `query_task_not_leased`,
    as an answer would be: observing never revives a claim."""
    task, asking = await _leased_query(api, "qs-expired")
    task_id = task["query_task_id"]
    await _set_lease(api, task_id, "now() - interval '1 second'")
    expired = await _query_row(api, task_id)
    with pytest.raises(ServerError) as refused:
        await client.query_task_status(
            query_task_id=task_id, lease_owner="w1", query_task_attempt=1
        )
    assert (refused.value.status, refused.value.reason()) == (409, "query_task_not_leased")
    assert await _query_row(api, task_id) == expired
    await _set_lease(api, task_id, "now() + interval '30 seconds'")
    await _answer(api, task, asking)
    answered = await _query_row(api, task_id)
    with pytest.raises(ServerError) as refused:
        await client.query_task_status(
            query_task_id=task_id, lease_owner="w1", query_task_attempt=1
        )
    assert (refused.value.status, refused.value.reason()) == (409, "query_task_not_leased")
    assert await _query_row(api, task_id) == answered


async def _set_lease(api: Api, task_id: str, expires: str) -> None:
    async with api.state.store.engine.begin() as conn:
        await conn.execute(
            sa.text(
                f"UPDATE query_tasks SET lease_expires_at = {expires} WHERE task_id = :task_id"
            ),
            {"task_id": task_id},
        )


@workflow.defn(name="observed-query")
class Observed:
    @workflow.query("stage")
    def stage(self) -> str:
        return "waiting"

    def run(self, ctx: Any) -> Generator[Any, Any, Any]:
        yield ctx.start_timer(3600)
        return None


async def test_an_sdk_worker_answers_a_query_under_observed_authority(
    api: Api, client: Client
) -> None:
    """SDK 2.12.0 worker with `query_task_authority`: it observes its claim before and after
    the handler runs (the status route), then answers; no query history."""
    paths: list[str] = []

    async def seen(request: httpx.Request) -> None:
        paths.append(request.url.path)

    api.http.event_hooks["request"].append(seen)
    handle = await client.start_workflow(
        workflow_type="observed-query", workflow_id="qs-sdk", task_queue=QUEUE, input=[]
    )
    # A Client subclass keeps the worker's query poller on this loop (and on the app's
    # transport) instead of a thread with a cloned client.
    on_app = await sdk_on_app(api, InProcessClient)
    runner = Worker(on_app, task_queue=QUEUE, workflows=[Observed], poll_timeout=2)
    running = asyncio.create_task(runner.run_until(workflow_id="qs-sdk", timeout=30))
    try:
        answer = await asyncio.wait_for(client.query_workflow("qs-sdk", "stage"), 20)
        assert answer["result"] == "waiting"
        assert any(p.startswith(QUERY_TASKS) and p.endswith("/status") for p in paths)
    finally:
        await client.terminate_workflow("qs-sdk", reason="done")
        await running
    assert not any("Query" in e for e in await _history(api, handle.run_id or ""))
