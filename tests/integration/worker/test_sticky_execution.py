"""Sticky execution in running workers against real Postgres and RabbitMQ (S1-S8, S12).

Runs are driven one step at a time (a signal, then its activity), so every step is one workflow
task whose claim, replay mode and cache use can be checked.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import pytest

from burrow import App, Client, Settings, Worker
from burrow.config import StickySettings
from burrow.handle import WorkflowHandle
from burrow.store import Store
from burrow.store import schema as s
from burrow.store.models import HistoryEvent
from burrow.testing import assert_eventually
from burrow.worker import workflow_tasks
from tests.acceptance.conftest import fast_settings
from tests.apps import sticky_flows
from tests.apps.sticky_flows import StepFlow
from tests.support.store import execute, rows

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STEPS = [3, 5, 7]
EXPECTED = [6, 10, 14, 7]


def _settings(
    database_url: str, *, capacity: int = 100, max_bytes: int = 64 * 1024 * 1024
) -> Settings:
    """Short leases and intervals; owners count as gone after 2 s of silence (S5c)."""
    base = fast_settings(database_url)
    worker = base.worker.model_copy(
        update={
            "heartbeat_interval_seconds": 0.5,
            "sticky_cache_capacity": capacity,
            "sticky_cache_max_bytes": max_bytes,
        }
    )
    return base.model_copy(
        update={"worker": worker, "sticky": StickySettings(owner_stale_seconds=2)}
    )


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    instance = await Client.connect(settings=_settings(database_url))
    yield instance
    await instance.close()


async def _start(client: Client, name: str) -> WorkflowHandle[list[int]]:
    workflow_id = f"{name}-{uuid.uuid4().hex[:6]}"
    return await client.start_workflow(
        StepFlow, len(STEPS), id=workflow_id, task_queue=sticky_flows.TASK_QUEUE
    )


async def _completed_steps(handle: WorkflowHandle[list[int]]) -> int:
    return sum(e.event_type == "ActivityCompleted" for e in await handle.history())


async def _waiting(handle: WorkflowHandle[list[int]]) -> None:
    """Until the run's first workflow task completed and it waits for a signal."""

    async def recorded_side_effect() -> bool:
        return any(e.event_type == "SideEffectRecorded" for e in await handle.history())

    await assert_eventually(recorded_side_effect, message="first workflow task completed")


async def _step(handle: WorkflowHandle[list[int]], index: int) -> None:
    """Send step `index` and wait until its activity result is in history."""
    assert await handle.signal("step", STEPS[index])

    async def done() -> bool:
        return await _completed_steps(handle) == index + 1

    await assert_eventually(done, message=f"step {index} completed")


async def _drive(handle: WorkflowHandle[list[int]]) -> list[int]:
    await _waiting(handle)
    for index in range(len(STEPS)):
        await _step(handle, index)
    return await handle.result(timeout=30)


async def _tasks(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The run's workflow tasks in claim order."""
    tasks = await rows(store, s.workflow_tasks, run_id)
    return sorted(tasks, key=lambda t: t["claimed_at"] or datetime.max.astimezone())


def _normalised(history: list[HistoryEvent]) -> list[tuple[int, str, Any]]:
    """History without what differs between any two runs (ids, times)."""
    return [(e.sequence, e.event_type, _stable(e.payload)) for e in history]


# Differ between any two runs: an instance id, and how long a local attempt took (0 or 1 ms
# apart on a loaded machine). `workflow_time` is only in a result written warm, with the task it
# woke (the time its code ran with, S12); a claimed task's code gets the result's recorded_at.
_VARYING = {"workflow_instance_id", "duration_ms", "workflow_time"}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return _UUID.sub("<id>", value)
        return "<time>"
    return value


async def test_warm_and_forced_cold_workers_record_identical_histories(
    database_url: str, client: Client, store: Store
) -> None:
    """S12, S1, S7: the same run, warm and with the cache off: same history, same result."""
    warm = Worker(sticky_flows.app, settings=_settings(database_url))
    async with warm:
        warm_handle = await _start(client, "warm")
        assert await _drive(warm_handle) == EXPECTED
    cold = Worker(sticky_flows.app, settings=_settings(database_url, capacity=0))
    async with cold:
        cold_handle = await _start(client, "cold")
        assert await _drive(cold_handle) == EXPECTED

    warm_history, cold_history = await warm_handle.history(), await cold_handle.history()
    assert _normalised(warm_history) == _normalised(cold_history)
    for history in (warm_history, cold_history):  # D3: the database's clock, never backwards
        stamps = [e.recorded_at for e in history]
        assert stamps == sorted(stamps), [
            (e.sequence, e.event_type, e.recorded_at) for e in history
        ]
    assert warm.sticky_cache.hits == len(STEPS) * 2  # a signal task and an activity-result task
    assert cold.sticky_cache.hits == 0
    warm_run = (await warm_handle.describe()).run.run_id
    cold_run = (await cold_handle.describe()).run.run_id
    warm_modes = [t["sticky_replay_mode"] for t in await _tasks(store, warm_run)]
    cold_modes = [t["sticky_replay_mode"] for t in await _tasks(store, cold_run)]
    assert warm_modes == ["cold_replay"] + ["sticky_hit_expected"] * (len(warm_modes) - 1)
    assert set(cold_modes) == {"cold_replay"}
    # Warm, each activity's result was written with the task it woke, which no claim leased
    # (worker/completion.py); cold, every task was claimed. The task counts agree.
    assert len(warm_modes) == len(cold_modes)
    warm_written_with_result = [
        t for t in await _tasks(store, warm_run) if not t["lease_expires_at"]
    ]
    assert len(warm_written_with_result) == len(STEPS)
    assert all(t["lease_expires_at"] for t in await _tasks(store, cold_run))


async def test_a_local_step_after_a_queued_result_is_written_with_it_warm_and_replays_cold(
    database_url: str, client: Client, store: Store
) -> None:
    """A3, S12, S1: warm, the code's local activity after a queued result runs in the attempt's
    job and is written with the result; cold, the follow-up task runs it. Same history."""
    histories, unclaimed = {}, {}
    for mode, capacity in (("warm", 100), ("cold", 0)):
        async with Worker(sticky_flows.app, settings=_settings(database_url, capacity=capacity)):
            handle = await client.start_workflow(
                sticky_flows.QueuedThenLocal.run,
                [1, 2, 3],
                id=f"queued-then-local-{mode}",
                task_queue=sticky_flows.TASK_QUEUE,
            )
            assert await handle.result(timeout=30) == [-2, -4, -6]
        history = await handle.history()
        histories[mode] = _normalised(history)
        run_id = (await handle.describe()).run.run_id
        unclaimed[mode] = [t for t in await _tasks(store, run_id) if not t["lease_expires_at"]]
        local = [e for e in history if e.payload.get("execution_mode") == "local"]
        assert [e.event_type for e in local] == [
            "ActivityScheduled",
            "ActivityStarted",
            "ActivityCompleted",
        ] * 3

    assert histories["warm"] == histories["cold"]
    # Warm, each queued result and the local step after it were written by one statement that
    # no claim leased; cold, every follow-up task was claimed and ran the local step itself.
    assert len(unclaimed["warm"]) == 3
    assert unclaimed["cold"] == []


async def test_a_local_step_too_long_to_run_with_the_result_is_stopped_and_run_again(
    database_url: str, client: Client, store: Store
) -> None:
    """A3, D2: run on after a queued result, a local activity gets half the attempt's lease left
    (about 1 s of a 2 s lease); one that needs 1.5 s is stopped, nothing is written with the
    result, and the follow-up task runs it again (at least once) and records it once."""
    sticky_flows.SLOW_RUNS.clear()
    async with Worker(sticky_flows.app, settings=_settings(database_url)):
        handle = await client.start_workflow(
            sticky_flows.QueuedThenSlowLocal.run,
            4,
            1.5,
            id="queued-then-slow-local",
            task_queue=sticky_flows.TASK_QUEUE,
        )
        assert await handle.result(timeout=30) == -8
    assert sticky_flows.SLOW_RUNS == [8, 8]
    history = await handle.history()
    local = [e for e in history if e.payload.get("execution_mode") == "local"]
    assert [e.event_type for e in local] == [
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityCompleted",
    ]
    run_id = (await handle.describe()).run.run_id
    assert all(t["lease_expires_at"] for t in await _tasks(store, run_id))


async def test_bound_task_waits_for_its_live_owner(
    database_url: str, client: Client, store: Store
) -> None:
    """S5a, S5c, S7, S4: with two live workers, every task of a bound run goes to its owner."""
    first = Worker(sticky_flows.app, settings=_settings(database_url))
    second = Worker(sticky_flows.app, settings=_settings(database_url))
    async with first, second:
        handle = await _start(client, "owner")
        assert await _drive(handle) == EXPECTED
    run_id = (await handle.describe()).run.run_id
    tasks = await _tasks(store, run_id)
    owner = tasks[0]["lease_owner"]
    assert {t["lease_owner"] for t in tasks} == {owner}
    assert [t["sticky_replay_mode"] for t in tasks[1:]] == ["sticky_hit_expected"] * (
        len(tasks) - 1
    )
    assert all(t["sticky_worker_id"] == owner for t in tasks[1:])
    by_id = {first.worker_id: first, second.worker_id: second}
    assert by_id[owner].sticky_cache.hits == len(tasks) - 1
    assert by_id[owner].sticky_cache.misses == 0
    assert by_id[owner].sticky_cache.evictions == 1  # only when the run ended


async def test_capacity_eviction_then_cold_replay_gives_the_same_result(
    database_url: str, client: Client
) -> None:
    """S2, S6: with room for one run, interleaved runs evict each other and cold-replay."""
    worker = Worker(sticky_flows.app, settings=_settings(database_url, capacity=1))
    async with worker:
        handles = [await _start(client, f"evict-{n}") for n in range(2)]
        for handle in handles:
            await _waiting(handle)
        for index in range(len(STEPS)):
            for handle in handles:
                await _step(handle, index)
        results = [await handle.result(timeout=30) for handle in handles]
    assert results == [EXPECTED, EXPECTED]
    cache = worker.sticky_cache
    assert cache.evictions > 0
    assert cache.misses > 0  # bound here, evicted meanwhile: a cold replay
    assert len(cache) == 0  # both runs ended: nothing kept


async def test_byte_bound_refuses_runs_and_every_task_cold_replays(
    database_url: str, client: Client, store: Store
) -> None:
    """S2, S6: a history larger than the byte bound is never kept; results are unchanged."""
    worker = Worker(sticky_flows.app, settings=_settings(database_url, max_bytes=1))
    async with worker:
        handle = await _start(client, "bytes")
        assert await _drive(handle) == EXPECTED
    assert worker.sticky_cache.hits == 0
    assert worker.sticky_cache.evictions >= len(STEPS)
    assert worker.sticky_cache.approximate_bytes == 0


async def test_drain_releases_bindings_to_another_worker(
    database_url: str, client: Client, store: Store
) -> None:
    """S8, S5c, S7: a drained owner's bound task is claimed elsewhere as a forced cold replay."""
    owner = Worker(sticky_flows.app, settings=_settings(database_url))
    async with owner:
        handle = await _start(client, "drain")
        await _waiting(handle)
        await _step(handle, 0)
    other = Worker(sticky_flows.app, settings=_settings(database_url))
    async with other:
        for index in range(1, len(STEPS)):
            await _step(handle, index)
        assert await handle.result(timeout=30) == EXPECTED
        await _assert_metrics_of_the_takeover(store, other.worker_id)
    run_id = (await handle.describe()).run.run_id
    taken_over = [t for t in await _tasks(store, run_id) if t["lease_owner"] == other.worker_id]
    assert taken_over[0]["sticky_worker_id"] == owner.worker_id
    assert taken_over[0]["sticky_replay_mode"] == "forced_cold_replay"
    assert other.sticky_cache.forced_cold_replays == 1
    [registration] = [
        r for r in await rows(store, s.worker_registrations) if r["worker_id"] == owner.worker_id
    ]
    assert registration["state"] == "stopped"


async def _assert_metrics_of_the_takeover(store: Store, other: str) -> None:
    """S11: the operator figures of the scripted drain, exactly.

    Seven workflow tasks: the owner's first is a cold replay and its next two are expected hits;
    the other worker's first is a forced cold replay (the drained owner's binding) and its
    remaining three are expected hits, every one a real cache hit. The hit rate counts the hits
    the workers reported: the owner's two at its drain, the other's three by heartbeat.
    """

    async def reported() -> bool:
        snapshot = await store.operator_metrics(
            namespace="default", sticky_enabled=True, sticky_ttl_seconds=300
        )
        # The last task's hit and the eviction when its run ended are both reported.
        return any(
            w.worker_id == other and (w.hit_count, w.eviction_count) == (3, 1)
            for w in snapshot.sticky_execution_workers
        )

    await assert_eventually(reported, message="the other worker heartbeat its cache figures")
    snapshot = await store.operator_metrics(
        namespace="default", sticky_enabled=True, sticky_ttl_seconds=300
    )
    sticky = snapshot.sticky_execution
    assert (sticky.cold_replay_last_minute, sticky.hit_expected_last_minute) == (1, 5)
    assert (sticky.forced_cold_replay_last_minute, sticky.miss_last_minute) == (1, 1)
    assert sticky.hit_rate_last_minute == pytest.approx(5 / 6)
    assert sticky.miss_rate_last_minute == pytest.approx(1 / 6)
    assert (sticky.active_sticky_runs, sticky.ready_sticky_tasks, sticky.leased_sticky_tasks) == (
        0,
        0,
        0,
    )
    [worker] = [w for w in snapshot.sticky_execution_workers if w.worker_id == other]
    assert (worker.hit_count, worker.miss_count, worker.forced_cold_replay_count) == (3, 0, 1)
    assert (worker.size, worker.eviction_count) == (0, 1)  # the run ended: evicted, not kept


async def test_error_inside_a_warm_instance_evicts_it_and_the_retry_replays_cold(
    database_url: str, client: Client, store: Store
) -> None:
    """S2, S6: an exception in workflow code fails the task and evicts; the retry is cold."""
    worker = Worker(sticky_flows.app, settings=_settings(database_url))
    async with worker:
        handle = await _start(client, "broken")
        await _waiting(handle)
        sticky_flows.BROKEN["on"] = True
        try:
            assert await handle.signal("step", STEPS[0])
            run_id = (await handle.describe()).run.run_id

            async def failed_once() -> bool:
                return any(t["last_failure"] for t in await rows(store, s.workflow_tasks, run_id))

            await assert_eventually(failed_once, message="the broken activation failed its task")
            assert len(worker.sticky_cache) == 0
            evictions = worker.sticky_cache.evictions
            assert evictions >= 1
        finally:
            sticky_flows.BROKEN["on"] = False

        async def done() -> bool:
            return await _completed_steps(handle) == 1

        await assert_eventually(done, message="the retried task replayed cold and went on")
        for index in range(1, len(STEPS)):
            await _step(handle, index)
        assert await handle.result(timeout=30) == EXPECTED
    assert worker.sticky_cache.misses >= 1


@pytest.fixture
async def hand_driven(database_url: str, store: Store) -> AsyncIterator[Callable[[App], Worker]]:
    """Workers driven by hand (never started), so which one claims each task is certain.

    Their completions still start eager activity jobs; those are drained before the store closes.
    """
    made: list[Worker] = []

    def make(app: App) -> Worker:
        worker = Worker(app, settings=_settings(database_url), store=store)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        await worker.shutdown(drain_seconds=5)


async def _claim_and_process(worker: Worker) -> None:
    """One claim and one workflow task, by hand, with this worker's sticky settings.

    Then wait for what the task set going in the background: its eager activity jobs, and the
    workflow tasks their completions lease to this worker. So the next step of a test (a signal,
    another worker's claim) never races them.
    """
    [claimed] = await worker.store.claim_workflow_tasks(
        flt=worker.workflow_filter,
        worker_id=worker.worker_id,
        lease=worker.lease,
        limit=1,
        sticky=worker.sticky_claim,
    )
    await workflow_tasks.process(worker.env, claimed)
    run_id = claimed.run.run_id

    async def settled() -> bool:
        activities = await rows(worker.store, s.activity_tasks, run_id)
        tasks = await rows(worker.store, s.workflow_tasks, run_id)
        return all(a["state"] not in ("ready", "leased") for a in activities) and all(
            t["state"] != "leased" for t in tasks
        )

    await assert_eventually(settled, message="background work of the task did not settle")


async def _expire_bindings(store: Store, run_id: str) -> None:
    await execute(
        store,
        "UPDATE runs SET sticky_until = now() - interval '1 second' WHERE run_id = :run_id",
        run_id=run_id,
    )
    await execute(
        store,
        "UPDATE workflow_tasks SET sticky_until = now() - interval '1 second'"
        " WHERE run_id = :run_id",
        run_id=run_id,
    )


async def test_nondeterminism_found_by_a_warm_instance_evicts_it(
    client: Client, store: Store, hand_driven: Callable[[App], Worker]
) -> None:
    """S2, S6, S8: history written by other code meanwhile fails the warm instance and evicts it."""
    v1 = hand_driven(sticky_flows.app)
    v2 = hand_driven(sticky_flows.app_v2)
    for worker in (v1, v2):
        await store.register_worker(
            worker_id=worker.worker_id,
            namespace="default",
            task_queue=sticky_flows.TASK_QUEUE,
            workflow_types=["StepFlow"],
            activity_types=[],
            concurrency=1,
        )
    handle = await _start(client, "nondeterminism")
    run_id = (await handle.describe()).run.run_id
    await _claim_and_process(v1)  # first task: v1 keeps the run warm
    assert run_id in v1.sticky_cache
    assert await handle.signal("step", 1)
    await _expire_bindings(store, run_id)
    await _claim_and_process(v2)  # other code schedules `negate` at step 2
    assert await handle.signal("step", 2)
    await _expire_bindings(store, run_id)
    await _claim_and_process(v1)  # v1's warm instance meets `negate` where it runs `double`

    assert run_id not in v1.sticky_cache
    assert v1.sticky_cache.evictions == 1
    [failed] = [t for t in await rows(store, s.workflow_tasks, run_id) if t["last_failure"]]
    assert failed["last_failure"]["exception_type"] == "NondeterminismError"


async def test_build_change_forces_cold_replay(
    client: Client, store: Store, hand_driven: Callable[[App], Worker]
) -> None:
    """S2, S8: a warm entry made by another build is evicted, never resumed."""
    worker = hand_driven(sticky_flows.app)
    handle = await _start(client, "build")
    run_id = (await handle.describe()).run.run_id
    await _claim_and_process(worker)
    assert run_id in worker.sticky_cache
    assert await handle.signal("step", 1)
    rebuilt = dataclasses.replace(worker.env, build_id="build-2")
    [claimed] = await store.claim_workflow_tasks(
        flt=worker.workflow_filter,
        worker_id=worker.worker_id,
        lease=worker.lease,
        limit=1,
        sticky=worker.sticky_claim,
    )
    assert claimed.history_after > 0  # the claim expected the warm entry
    await workflow_tasks.process(rebuilt, claimed)
    assert worker.sticky_cache.hits == 0
    assert worker.sticky_cache.evictions == 1
    tasks = await rows(store, s.workflow_tasks, run_id)
    assert [t["state"] for t in tasks if t["task_id"] == claimed.lease.task_id] == ["completed"]
