"""A long poll is answered at its deadline, not seconds after it (issue 25 item 9; PROTOCOL 2.5).

500 polls of 5 s used to answer at p50 8.6 s, max 12.8 s: the deadline started when the
handler ran, one more claim ran after it, and claims queued for a pool connection past it.
The deadline now runs from the request's arrival, no claim starts after it, and a claim waits
for a claim slot no longer than the time left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from burrow.server import longpoll
from burrow.server.gate import ARRIVED_AT, RequestGate
from burrow.server.polls import CLAIMS_AT_ONCE
from tests.integration.server.conftest import QUEUE, Api


async def connected() -> Message:
    """A caller that stays: nothing to receive, ever."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def request(arrived_at: float | None = None) -> Request:
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/", "headers": []}
    if arrived_at is not None:
        scope[ARRIVED_AT] = arrived_at
    return Request(scope, receive=connected)


class Claims:
    """A claim that finds nothing, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> str | None:
        self.calls += 1
        return None


@contextlib.asynccontextmanager
async def busy_slots(api: Api) -> AsyncIterator[None]:
    """Every claim slot taken, as by claims queued under load."""
    slots = api.state.held.claim_slots
    for _ in range(CLAIMS_AT_ONCE):
        await slots.acquire()
    try:
        yield
    finally:
        for _ in range(CLAIMS_AT_ONCE):
            slots.release()


async def test_a_poll_with_no_claim_slot_before_its_deadline_answers_empty_leasing_nothing(
    api: Api,
) -> None:
    """Issue 25 item 9: the claim waits for a slot only for the time left; the task stays
    ready, so the next poll leases it at its first attempt."""
    await api.register()
    await api.start("wf-busy")
    body = {"worker_id": "w1", "task_queue": QUEUE, "timeout_seconds": 1}
    async with busy_slots(api):
        polled = await api.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
    assert polled.status_code == 200, polled.text
    assert (polled.json()["task"], polled.json()["poll_status"]) == (None, "empty")
    task = await api.poll_workflow()
    assert (task["workflow_id"], task["workflow_task_attempt"]) == ("wf-busy", 1)


async def test_no_claim_starts_once_the_deadline_passed(api: Api) -> None:
    """Issue 25 item 9: one claim, a wait up to the deadline, then the empty answer (no second
    claim at the deadline)."""
    claims = Claims()
    deadline = asyncio.get_running_loop().time() + 0.05
    found = await longpoll.hold(
        api.state,
        request(),
        kind="workflow",
        namespace="default",
        task_queue=QUEUE,
        deadline=deadline,
        claim=claims,
    )
    assert (found, claims.calls) == (None, 1)


async def test_a_poll_whose_deadline_passed_before_its_handler_ran_claims_once(api: Api) -> None:
    """Issue 25 item 9: a timeout of 0, or one spent before the handler ran, is one probe."""
    claims = Claims()
    deadline = asyncio.get_running_loop().time() - 1
    found = await longpoll.hold(
        api.state,
        request(),
        kind="workflow",
        namespace="default",
        task_queue=QUEUE,
        deadline=deadline,
        claim=claims,
    )
    assert (found, claims.calls) == (None, 1)


async def test_the_deadline_runs_from_the_requests_arrival() -> None:
    """Issue 25 item 9: the gate's stamp, else now."""
    assert longpoll.deadline_of(request(arrived_at=100.0), 5) == 105.0
    now = asyncio.get_running_loop().time()
    assert longpoll.deadline_of(request(), 5) >= now + 5


async def test_the_gate_stamps_each_requests_arrival(api: Api) -> None:
    """Issue 25 item 9: the stamp is taken before the body is read or any handler runs."""
    seen: list[float] = []
    before = asyncio.get_running_loop().time()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope[ARRIVED_AT])

    async def no_body() -> Message:
        raise AssertionError("the gate read the body")

    async def discard(message: Message) -> None:
        pass

    gate = RequestGate(app, settings=api.state.settings, max_request_bytes=1024)
    await gate({"type": "http", "path": "/api/health", "headers": []}, no_body, discard)
    assert len(seen) == 1
    assert before <= seen[0] <= asyncio.get_running_loop().time()
