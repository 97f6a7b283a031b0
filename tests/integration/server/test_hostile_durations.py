"""Hostile durations over HTTP get a 4xx with a reason and write nothing (issue 25 items 1, 6, 8).

Timeouts, intervals, timers and session leases past the documented maximum (or below zero)
used to reach the store and fail there with a 500, or be written and break the repair pass.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burrow.protocol.shapes import MAX_DURATION_SECONDS, MAX_SESSION_SECONDS
from tests.integration.server.conftest import GREET, WORKER, Api, fence
from tests.integration.server.test_worker_plane import history_types

SESSIONS = "/api/worker/sessions"


async def post(api: Api, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST `body` as JSON that may hold NaN and Infinity, as JavaScript and Python write them."""
    headers = {**WORKER, "Content-Type": "application/json"}
    return await api.http.post(path, content=json.dumps(body), headers=headers)


async def complete(api: Api, task: dict[str, Any], command: dict[str, Any]) -> httpx.Response:
    path = f"/api/worker/workflow-tasks/{task['task_id']}/complete"
    return await post(api, path, fence(task, commands=[command]))


HOSTILE = {
    "timer-1e308": {"type": "start_timer", "delay_seconds": 1e308},
    "timer-negative": {"type": "start_timer", "delay_seconds": -5},
    "timer-infinite": {"type": "start_timer", "delay_seconds": math.inf},
    "schedule-to-close-1e12": {**GREET, "schedule_to_close_timeout": 1e12},
    "start-to-close-1e14": {**GREET, "start_to_close_timeout": 1e14, "heartbeat_timeout": 1},
    "intervals-1e12": {
        **GREET,
        "retry_policy": {"initial_interval_seconds": 1e12, "maximum_interval_seconds": 1e12},
    },
    "session-lease-10**30": {
        **GREET,
        "worker_session": {"session_id": "s", "lease_seconds": 10**30},
    },
}


@pytest.mark.parametrize("command", list(HOSTILE.values()), ids=list(HOSTILE))
async def test_a_completion_with_a_hostile_duration_is_refused_and_writes_nothing(
    api: Api, command: dict[str, Any]
) -> None:
    """Issue 25 items 1, 6 and 8: 409 `invalid_commands` naming the field, not a 500.

    A negative timer delay used to write TimerScheduled; the task stays leased, unchanged.
    """
    await api.register()
    started = await api.start("wf-hostile")
    before = await history_types(api, started["run_id"])
    task = await api.poll_workflow()
    refused = await complete(api, task, command)
    assert refused.status_code == 409, refused.text
    assert refused.json()["reason"] == "invalid_commands"
    assert "must be" in refused.json()["message"] or "less than" in refused.json()["message"]
    assert await history_types(api, started["run_id"]) == before
    lease = await api.state.store.workflow_task_lease(task_id=task["task_id"])
    assert lease is not None and lease.attempt == task["workflow_task_attempt"]


async def test_a_session_heartbeat_past_the_session_maximum_is_a_422(api: Api) -> None:
    """Issue 25 item 1: a lease the store cannot keep (32-bit seconds) is refused by the schema."""
    await api.register()
    created = await api.worker("POST", SESSIONS, json={"worker_id": "w1", "session_id": "s1"})
    assert created.status_code == 201, created.text
    beat = await api.worker(
        "POST",
        f"{SESSIONS}/s1/heartbeat",
        json={"worker_id": "w1", "lease_seconds": MAX_SESSION_SECONDS + 1},
    )
    assert (beat.status_code, beat.json()["reason"]) == (422, "validation_failed")
    huge = await api.worker(
        "POST", SESSIONS, json={"worker_id": "w1", "session_id": "s2", "ttl_seconds": 10**12}
    )
    assert (huge.status_code, huge.json()["reason"]) == (422, "invalid_worker_session")


# -- the property: any duration, any carrier, never a 500 --------------------------------------

DURATIONS = st.one_of(
    st.floats(),
    st.floats(min_value=MAX_DURATION_SECONDS - 1, max_value=MAX_DURATION_SECONDS + 1),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.text(max_size=8),
    st.sampled_from(["nan", "-inf", "1e308", "1e400", "3153600000", " 7 "]),
)
CARRIERS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "start_timer": lambda v: {"type": "start_timer", "delay_seconds": v},
    "start_to_close": lambda v: {**GREET, "start_to_close_timeout": v},
    "schedule_to_close": lambda v: {**GREET, "schedule_to_close_timeout": v},
    "heartbeat": lambda v: {**GREET, "heartbeat_timeout": v},
    "intervals": lambda v: {
        **GREET,
        "retry_policy": {"initial_interval_seconds": v, "maximum_interval_seconds": v},
    },
    "backoff": lambda v: {**GREET, "retry_policy": {"backoff_seconds": [v]}},
    "session_lease": lambda v: {
        **GREET,
        "worker_session": {"session_id": "s", "lease_seconds": v, "ttl_seconds": v},
    },
}


class Leased:
    """The workflow task the next completion uses: a fresh run after each accepted one.

    A refused completion writes nothing, so its task is still leased for the next example.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self.runs = itertools.count(1)
        self.task: dict[str, Any] | None = None

    async def current(self) -> dict[str, Any]:
        if self.task is None:
            await self.api.start(f"wf-prop-{next(self.runs)}")
            self.task = await self.api.poll_workflow()
        return self.task


@pytest.fixture
async def leased(api: Api) -> Leased:
    """A registered worker holding session `h`, shared by every example of the property."""
    await api.register(capabilities=["worker_sessions"], max_concurrent_worker_sessions=100)
    created = await api.worker("POST", SESSIONS, json={"worker_id": "w1", "session_id": "h"})
    assert created.status_code == 201, created.text
    return Leased(api)


def assert_answered(response: httpx.Response) -> None:
    """2xx, or 4xx with a machine-readable reason; never a 500."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["reason"], response.text


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(carrier=st.sampled_from(sorted(CARRIERS)), value=DURATIONS)
async def test_any_duration_in_a_completion_or_session_call_is_never_a_500(
    leased: Leased, carrier: str, value: Any
) -> None:
    """Issue 25 items 1 and 8 (done-when): one app and database across every example.

    Each value goes into a workflow-task completion and into the session create and heartbeat
    calls; afterwards a repair pass still runs over whatever was accepted.
    """
    api = leased.api
    done = await complete(api, await leased.current(), CARRIERS[carrier](value))
    assert_answered(done)
    if done.status_code < 400:
        leased.task = None
    beat = await post(api, f"{SESSIONS}/h/heartbeat", {"worker_id": "w1", "lease_seconds": value})
    assert_answered(beat)
    body = {"worker_id": "w1", "session_id": "p", "lease_seconds": value, "ttl_seconds": value}
    created = await post(api, SESSIONS, body)
    assert_answered(created)
    if created.status_code < 400:
        closed = await api.worker("DELETE", f"{SESSIONS}/p", json={"worker_id": "w1"})
        assert closed.status_code == 200, closed.text
    await api.state.store.sweep()
