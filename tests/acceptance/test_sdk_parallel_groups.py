"""Parallel groups of the real `durable-workflow` 2.12.0 SDK through `burrow server`.

An SDK workflow that yields a list sends its members as one batch carrying `parallel_group_*`
metadata; the server checks it, gives each member the step `base + index` names, and shows the
group again on the members' history events (PROTOCOL.md 7, 8.3), so the SDK puts results that
arrive out of order back in yielded order. Each scenario runs warm (the SDK worker keeps a
sticky cache) and cold (none: every task replays the whole history, groups included), S12;
then the SDK's own `replay()` of the recorded history must give back the run's result.

Covered elsewhere, not repeated here: a group of three children and a mixed group of a child,
an activity and a timer in yielded order (`test_sdk_children.py`), the server's refusals of
broken groups (`tests/integration/server/test_server_children.py`,
`test_server_parallel_groups.py`). SDK 2.12.0 runs a local activity inside a list only through
its prepared local activity admission (capabilities `prepared_local_activities` and
`prepared_local_activity_groups`, operations under `/worker/workflow-tasks/{id}/local-activities/`):
the last scenario runs one alone and then a group of two, one failing once and retried, on a
worker that negotiated both (the operations' receipts are
`tests/integration/server/test_server_prepared_local_activities.py`).

One `burrow server` process serves the whole module, on a database of its own.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from durable_workflow import Client, Worker, history_bundle_verify
from durable_workflow.replay_verify import verify_replay
from durable_workflow.workflow import CompleteWorkflow, replay

from burrow.testing.pytest_plugin import TemplateClones, _url_for
from tests.acceptance import test_sdk_against_server as sdk
from tests.acceptance.test_sdk_against_server import TOKEN, running_server
from tests.apps.sdk_flows import SdkFanOutWorkflow
from tests.apps.sdk_parallel_flows import (
    PARALLEL_ACTIVITIES,
    PARALLEL_QUEUE,
    PARALLEL_WORKFLOWS,
    SdkFanOutActivitiesWorkflow,
    SdkParallelTimersWorkflow,
    SdkReversedMixedGroupWorkflow,
)
from tests.apps.sdk_prepared_local_flows import (
    PREPARED_ACTIVITIES,
    PREPARED_CAPABILITIES,
    PREPARED_QUEUE,
    PREPARED_WORKFLOWS,
    SdkPreparedLocalsWorkflow,
)

pytestmark = [pytest.mark.slow]
client = sdk.client  # the SDK's Client on this module's server (fixture)

_KEPT = {"BURROW_TEST_DATABASE_URL", "BURROW_TEST_AMQP_URL", "BURROW_TEST_USE_CONTAINERS"}


@pytest.fixture(scope="module")
def server_url(
    burrow_postgres_url: str,
    _burrow_template_clones: TemplateClones,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """One `burrow server` process for the module, on a fresh database and AMQP names of its
    own (the environment cleaned as `tests/conftest.py` cleans each test's)."""
    name = _burrow_template_clones.take()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("BURROW_", "DW_")) or k in _KEPT
    }
    env |= {
        "BURROW_DATABASE_URL": _url_for(burrow_postgres_url, name),
        "BURROW_AUTH_TOKEN": TOKEN,
        "BURROW_AMQP_PREFIX": f"test-{uuid.uuid4().hex[:10]}",
    }
    if "BURROW_TEST_AMQP_URL" in os.environ:
        env["BURROW_AMQP_URL"] = os.environ["BURROW_TEST_AMQP_URL"]
    try:
        with running_server(env, tmp_path_factory.mktemp("server") / "server.log") as url:
            yield url
    finally:
        _burrow_template_clones.release(name)


async def full_history(client: Client, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every event of the run, all pages."""
    events: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = await client.get_history(workflow_id, run_id, page_size=1000, next_page_token=token)
        events.extend(page["events"])
        token = page.get("next_page_token")
        if not token:
            return events


async def run_to_the_end(
    client: Client, workflow_cls: type, start: list[Any], capacity: int
) -> tuple[Any, list[dict[str, Any]]]:
    """Run one workflow on an SDK worker with `capacity` sticky cache entries to its end: its
    result and history. The SDK's `replay()` of that history must complete it with the same
    result; a warm worker must have resumed from its cache at least once."""
    workflow_type = getattr(workflow_cls, "__workflow_name__", None) or workflow_cls.__name__
    workflow_id = f"{workflow_type}-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        workflow_type=workflow_type, workflow_id=workflow_id, task_queue=PARALLEL_QUEUE, input=start
    )
    worker = Worker(
        client,
        task_queue=PARALLEL_QUEUE,
        workflows=PARALLEL_WORKFLOWS,
        activities=PARALLEL_ACTIVITIES,
        poll_timeout=1,
        sticky_cache_capacity=capacity,
    )
    running = asyncio.create_task(worker.run())  # its pollers run side by side
    try:
        result = await client.get_result(handle, poll_interval=0.1, timeout=60.0)
    finally:
        await worker.stop()
        await running
    run_id = handle.run_id or ""
    events = await full_history(client, workflow_id, run_id)
    replayed = replay(workflow_cls, events, start, workflow_id=workflow_id, run_id=run_id)
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow), replayed.commands
    assert completion.result == result
    report = verify_replay(workflow_cls, events, start_input=start)
    assert report.status == "replayed", report.to_dict()
    if capacity:
        metrics = worker.sticky_cache_metrics()
        assert (metrics["hit"] >= 1, metrics["forced_cold_replay"]) == (True, 0), metrics
    return result, events


def capacity_of(sticky_mode: str) -> int:
    """S12: warm is an SDK worker with a sticky cache, cold one without."""
    return 10 if sticky_mode == "warm" else 0


def steps(events: list[dict[str, Any]], event_type: str) -> list[int]:
    return [e["payload"]["sequence"] for e in events if e["event_type"] == event_type]


def group_of(events: list[dict[str, Any]], event_type: str) -> list[tuple[str, int, int, int]]:
    """(group id, base, size, index) on each event of the type, in history order."""
    return [
        (
            e["payload"]["parallel_group_id"],
            e["payload"]["parallel_group_base_sequence"],
            e["payload"]["parallel_group_size"],
            e["payload"]["parallel_group_index"],
        )
        for e in events
        if e["event_type"] == event_type
    ]


async def test_sdk_fans_out_fifty_activities_in_one_group(client: Client, sticky_mode: str) -> None:
    """PROTOCOL 7, 8.3: 50 activities yielded as one list take steps 1-50 in one task, each
    shown as `parallel-activities:1:50` at its index; the first naps, so results arrive out of
    yielded order, and the workflow gets them in yielded order, as replay does."""
    count = 50
    result, events = await run_to_the_end(
        client, SdkFanOutActivitiesWorkflow, [count], capacity_of(sticky_mode)
    )
    assert result == [f"hello, guest {i}" for i in range(count)]
    assert steps(events, "ActivityScheduled") == list(range(1, count + 1))
    assert group_of(events, "ActivityScheduled") == [
        ("parallel-activities:1:50", 1, count, i) for i in range(count)
    ]
    completed = group_of(events, "ActivityCompleted")
    assert sorted(index for *_, index in completed) == list(range(count))


async def test_sdk_parallel_timers_and_a_group_of_one(client: Client, sticky_mode: str) -> None:
    """PROTOCOL 7, 8.3: three timers yielded as one list (`parallel-timers:1:3`) fire in
    another order (the 0 s one first) and the workflow goes on once all have; then a list of
    one activity is a group of one (step 4), which the history shows as a lone step."""
    result, events = await run_to_the_end(
        client, SdkParallelTimersWorkflow, ["ada"], capacity_of(sticky_mode)
    )
    assert result == {"fired": [None, None, None], "then": "hello, ada"}
    assert steps(events, "TimerScheduled") == [1, 2, 3]
    assert group_of(events, "TimerScheduled") == [
        ("parallel-timers:1:3", 1, 3, i) for i in range(3)
    ]
    assert sorted(steps(events, "TimerFired")) == [1, 2, 3]
    assert steps(events, "ActivityScheduled") == [4]


async def test_sdk_mixed_group_after_a_side_effect_resolves_in_reverse(
    client: Client, sticky_mode: str
) -> None:
    """PROTOCOL 7, 8.3: a side effect (step 1) and then a timer, a child and an activity
    yielded as one `parallel-calls` group in the same task: the group's base is 2, the
    members take steps 2-4, resolve activity first and timer last, and the workflow gets
    them in yielded order."""
    result, events = await run_to_the_end(
        client, SdkReversedMixedGroupWorkflow, ["bo"], capacity_of(sticky_mode)
    )
    assert result == [None, "hello, bo jr", "hello, bo"]
    assert steps(events, "SideEffectRecorded") == [1]
    opened = [
        (e["event_type"], e["payload"]["sequence"], e["payload"]["parallel_group_id"])
        for e in events
        if e["event_type"] in ("TimerScheduled", "ChildWorkflowScheduled", "ActivityScheduled")
    ]
    assert opened == [
        ("TimerScheduled", 2, "parallel-calls:2:3"),
        ("ChildWorkflowScheduled", 3, "parallel-calls:2:3"),
        ("ActivityScheduled", 4, "parallel-calls:2:3"),
    ]


@pytest.mark.sticky_cache_set_by_test
async def test_sdk_children_group_resumes_warm(client: Client) -> None:
    """PROTOCOL 7, 8.3, S4-S6: the three-children group of `test_sdk_children.py` (which runs
    it cold) on a worker with a sticky cache: the parent resumes from its cache as its
    children close, and gets their answers in yielded order."""
    names = ["a", "b", "c"]
    result, events = await run_to_the_end(client, SdkFanOutWorkflow, [names], capacity=10)
    assert result == [f"hello, {n}" for n in names]
    closed = group_of(events, "ChildRunCompleted")
    assert sorted(closed) == [("parallel-children:1:3", 1, 3, i) for i in range(3)]


async def test_sdk_prepared_local_activities_alone_and_as_a_group(
    client: Client, server_url: str, sticky_mode: str
) -> None:
    """PROTOCOL 5.6, 7, 1.20, A3, S12: a worker that negotiated prepared locals (and groups) runs a
    local call alone (step 1: prepared, started, completed), then a group of two (steps 2-3,
    opened at once as `parallel-activities:2:2`); the member failing its first attempt is
    retried on a new claim (ActivityRetryScheduled, then attempt 2 completes), and the
    workflow gets the group's results in yielded order; then a group of a local call and a
    queued activity (steps 4-5, opened together). The SDK's `replay()` of the history
    completes the run with the same result, and its export passes the SDK's checker."""
    workflow_id = f"sdk-prepared-locals-{uuid.uuid4().hex}"
    start = ["ada", {"url": server_url, "token": TOKEN}]
    handle = await client.start_workflow(
        workflow_type="sdk-prepared-locals",
        workflow_id=workflow_id,
        task_queue=PREPARED_QUEUE,
        input=start,
    )
    worker = Worker(
        client,
        task_queue=PREPARED_QUEUE,
        workflows=PREPARED_WORKFLOWS,
        activities=PREPARED_ACTIVITIES,
        poll_timeout=1,
        sticky_cache_capacity=capacity_of(sticky_mode),
        capabilities=PREPARED_CAPABILITIES,
    )
    running = asyncio.create_task(worker.run())
    try:
        result = await client.get_result(handle, poll_interval=0.1, timeout=60.0)
    finally:
        await worker.stop()
        await running
    assert result == {
        "single": "ADA",
        "pair": ["ADA JR", "ada on attempt 2"],
        "mixed": ["ADA III", "REMOTE"],
    }
    run_id = handle.run_id or ""
    events = await full_history(client, workflow_id, run_id)
    local = [
        (e["event_type"], e["payload"]["sequence"])
        for e in events
        if e["event_type"].startswith("Activity")
    ]
    assert local[:3] == [("ActivityScheduled", 1), ("ActivityStarted", 1), ("ActivityCompleted", 1)]
    grouped = [e for e in events if e["payload"].get("sequence") in (2, 3)]
    assert group_of(grouped, "ActivityScheduled") == [
        ("parallel-activities:2:2", 2, 2, i) for i in range(2)
    ]
    mixed = [e for e in events if e["payload"].get("sequence") in (4, 5)]
    assert group_of(mixed, "ActivityScheduled") == [
        ("parallel-activities:4:2", 4, 2, i) for i in range(2)
    ]
    flaky = [kind for kind, step in local if step == 3]
    assert flaky == [
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityRetryScheduled",
        "ActivityStarted",
        "ActivityCompleted",
    ]
    replayed = replay(
        SdkPreparedLocalsWorkflow,
        events,
        start,
        workflow_id=workflow_id,
        run_id=run_id,
        prepare_local_activities=True,
        prepare_local_activity_groups=True,
    )
    completion = replayed.commands[-1]
    assert isinstance(completion, CompleteWorkflow), replayed.commands
    assert completion.result == result
    bundle = await client.export_history(workflow_id, run_id)  # PROTOCOL 17: the same catalogue
    assert history_bundle_verify.verify_bundle(bundle)["status"] == "ok"
