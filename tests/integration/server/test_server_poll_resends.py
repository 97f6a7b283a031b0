"""A resent poll is answered from the store; no leased task's payload stays in memory
(issue 25 item 4; PROTOCOL.md 2.5).

The poll registry used to keep every answer whole, history and arguments included: 400 leases
of a 1.3 MB input held 500 MB until the entries aged out. It now keeps the answer less its
payloads, and a resend reads those again, cut where the first answer's history ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from burrow import codec
from tests.integration.server.conftest import GREET, QUEUE, Api, fence

QUERY_TASKS = "/api/worker/query-tasks"
BIG = {"codec": "avro", "blob": "B" * 200_000}


def key(kind: str, poll_request_id: str) -> tuple[str, str, str, str, str]:
    return (kind, "default", QUEUE, "w1", poll_request_id)


async def signal(api: Api, workflow_id: str) -> None:
    path = f"/api/workflows/{workflow_id}/signal/nudge"
    response = await api.control("POST", path, json={"input": dict(codec.encode([1]))})
    assert response.status_code in (200, 202), response.text


async def start_big(api: Api, workflow_id: str) -> None:
    body = {"workflow_id": workflow_id, "workflow_type": "greeter", "task_queue": QUEUE}
    started = await api.control("POST", "/api/workflows", json={**body, "input": BIG})
    assert started.status_code == 201, started.text


async def test_a_resent_workflow_poll_gets_the_same_task_read_again_from_the_store(
    api: Api,
) -> None:
    """Issue 25 item 4: the same arguments, first history page and page token."""
    await api.register()
    await start_big(api, "wf-resend")
    await signal(api, "wf-resend")
    await signal(api, "wf-resend")
    first = await api.poll_workflow(poll_request_id="wf-poll-1", history_page_size=2)
    assert first["next_history_page_token"] is not None
    kept = api.state.polls.leased(key("workflow", "wf-poll-1"))
    assert kept is not None
    assert {"arguments", "history_events", "next_history_page_token"}.isdisjoint(kept.answer)
    again = await api.poll_workflow(poll_request_id="wf-poll-1", history_page_size=2)
    assert again == first
    assert again["arguments"] == BIG["blob"]
    assert [e["sequence"] for e in again["history_events"]] == [1, 2]


async def test_a_resent_activity_poll_gets_the_same_attempt_with_its_arguments(
    api: Api,
) -> None:
    """Issue 25 item 4: the arguments are read again from the activity task."""
    await api.register()
    await api.start("wf-act")
    task = await api.poll_workflow()
    command = {**GREET, "arguments": BIG}
    path = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    done = await api.worker("POST", path, json=fence(task, commands=[command]))
    assert done.status_code == 200, done.text
    first = await api.poll_activity(poll_request_id="activity-poll-1")
    kept = api.state.polls.leased(key("activity", "activity-poll-1"))
    assert kept is not None and "arguments" not in kept.answer
    again = await api.poll_activity(poll_request_id="activity-poll-1")
    assert again == first
    assert again["arguments"] == BIG


async def test_a_resent_query_poll_gets_the_same_query_task_with_its_payloads(api: Api) -> None:
    """Issue 25 item 4: workflow and query arguments and the history are read again."""
    await api.register()
    await start_big(api, "wf-q")
    asking = asyncio.create_task(
        api.control("POST", "/api/workflows/wf-q/query/status", json={"input": BIG})
    )
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 5}
    polled = [
        await api.worker("POST", f"{QUERY_TASKS}/poll", json={**body, "poll_request_id": "q-1"})
        for _ in range(2)
    ]
    first, again = (response.json()["task"] for response in polled)
    kept = api.state.polls.leased(key("query", "q-1"))
    assert kept is not None
    assert {"workflow_arguments", "query_arguments", "history_events"}.isdisjoint(kept.answer)
    # The server's time is read again: the SDK measures the query's budget from it.
    assert again.pop("server_time") >= first.pop("server_time")
    assert again == first
    assert (again["workflow_arguments"], again["query_arguments"]) == (BIG, BIG)
    answer = {
        "lease_owner": first["lease_owner"],
        "query_task_attempt": first["query_task_attempt"],
        "result_envelope": dict(codec.encode("ok")),
    }
    done = await api.worker("POST", f"{QUERY_TASKS}/{first['query_task_id']}/complete", json=answer)
    assert done.status_code == 200, done.text
    assert (await asking).status_code == 200


async def test_a_resend_after_the_lease_ended_leases_anew_and_forgets_the_entry(
    api: Api,
) -> None:
    """Issue 25 item 4: a completed task's entry goes at the next resend, which polls afresh."""
    await api.register()
    await api.start("wf-done")
    task = await api.poll_workflow(poll_request_id="wf-poll-9")
    path = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    complete: dict[str, Any] = {"type": "complete_workflow", "result": BIG}
    done = await api.worker("POST", path, json=fence(task, commands=[complete]))
    assert done.status_code == 200, done.text
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 0}
    again = await api.worker(
        "POST",
        "/api/worker/workflow-tasks/poll",
        json={**body, "poll_request_id": "wf-poll-9"},
    )
    assert again.json()["task"] is None
    assert api.state.polls.leased(key("workflow", "wf-poll-9")) is None
