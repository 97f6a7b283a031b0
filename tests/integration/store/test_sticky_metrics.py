"""Sticky execution operator metrics (S11) over a scripted state: every figure, exactly.

The bindings (S4) and replay modes (S7) are written with plain UPDATEs: what the metrics read is
the stored columns, whichever code sets them.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from burrow.store import Store, metrics
from burrow.store.metrics import StickyWorkerMetrics
from burrow.store.models import StickyCacheReport, WorkerState
from tests.support.store import NS, QUEUE, execute, start

OTHER_NS = "elsewhere"
BOUND = "now() + interval '5 minutes'"
EXPIRED = "now() - interval '1 minute'"


async def bind(store: Store, run_id: str, worker_id: str, until: str = BOUND) -> None:
    """Bind the run and its open workflow task to `worker_id` until `until` (SQL)."""
    for table in ("runs", "workflow_tasks"):
        await execute(
            store,
            f"UPDATE {table} SET sticky_worker_id = :worker_id, sticky_until = {until}"
            " WHERE run_id = :run_id",
            worker_id=worker_id,
            run_id=run_id,
        )


async def lease(store: Store, run_id: str, worker_id: str) -> None:
    await execute(
        store,
        "UPDATE workflow_tasks SET state = 'leased', lease_owner = :worker_id,"
        " lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds'"
        " WHERE run_id = :run_id",
        worker_id=worker_id,
        run_id=run_id,
    )


async def claimed(store: Store, run_id: str, mode: str, ago: float) -> None:
    """Close the run's workflow task as claimed `ago` seconds back, with replay mode `mode`."""
    await execute(
        store,
        "UPDATE workflow_tasks SET state = 'completed', sticky_replay_mode = :mode,"
        " sticky_claimed_at = now() - make_interval(secs => :ago) WHERE run_id = :run_id",
        mode=mode,
        ago=ago,
        run_id=run_id,
    )


async def register(
    store: Store, worker_id: str, namespace: str = NS, cache: StickyCacheReport | None = None
) -> None:
    await store.register_worker(
        worker_id=worker_id,
        namespace=namespace,
        task_queue=QUEUE,
        workflow_types=["Flow"],
        activity_types=[],
        concurrency=4,
        sticky_cache=cache,
    )


def cache(capacity: int, size: int, **counts: int) -> StickyCacheReport:
    return StickyCacheReport(enabled=capacity > 0, capacity=capacity, size=size, **counts)


async def script_workers(store: Store) -> None:
    """Workers with and without caches, under and over pressure, live, stale, draining, stopped."""
    hot = cache(10, 9, hit_count=5, miss_count=2, forced_cold_replay_count=1, eviction_count=3)
    await register(store, "w-hot", cache=hot)  # 9 >= 0.9 * 10: under pressure
    await register(store, "w-cool", cache=cache(10, 1))
    # The heartbeat's figures replace the registration's; then the worker falls silent.
    await store.heartbeat_worker(worker_id="w-cool", sticky_cache=cache(10, 8, hit_count=3))
    await execute(
        store,
        "UPDATE worker_registrations SET heartbeat_at = now() - interval '2 minutes'"
        " WHERE worker_id = 'w-cool'",
    )
    await register(store, "w-drain", cache=cache(4, 4, eviction_count=1))
    await store.drain_worker(worker_id="w-drain")
    await register(store, "w-zero", cache=cache(0, 0))  # cache off: never under pressure
    await register(store, "w-stopped", cache=cache(1, 1))
    await store.deregister_worker(worker_id="w-stopped")
    await register(store, "w-nocache")
    await register(store, "w-other", namespace=OTHER_NS, cache=cache(2, 2))


async def script_runs(store: Store) -> None:
    """Runs and workflow tasks in every binding state, plus one minute of claims."""
    hot = await start(store, "hot")  # ready, bound to a worker under pressure
    await bind(store, hot, "w-hot")
    cool = await start(store, "cool")  # ready, bound to a worker with room
    await bind(store, cool, "w-cool")
    expired = await start(store, "expired")  # binding over: neither active nor ready sticky
    await bind(store, expired, "w-hot", EXPIRED)
    draining = await start(store, "draining")  # ready, bound to a draining worker under pressure
    await bind(store, draining, "w-drain")
    orphan = await start(store, "orphan")  # ready, bound to a stopped worker: no pressure
    await bind(store, orphan, "w-stopped")
    leased = await start(store, "leased")  # leased by its sticky owner
    await bind(store, leased, "w-drain")
    await lease(store, leased, "w-drain")
    # A leased task counts while it carries a binding, expired or not (as the reference does).
    leased_expired = await start(store, "leased-expired")
    await bind(store, leased_expired, "w-hot", EXPIRED)
    await lease(store, leased_expired, "w-hot")
    unbound = await start(store, "unbound")  # leased without any binding
    await lease(store, unbound, "w-cool")
    closed = await start(store, "closed")  # a closed run's binding is not an active one
    await bind(store, closed, "w-hot")
    await execute(store, "UPDATE runs SET status = 'completed' WHERE run_id = :r", r=closed)
    await claimed(store, closed, "sticky_hit_expected", 10)

    for i, (mode, ago) in enumerate(
        [
            ("sticky_hit_expected", 5),
            ("sticky_hit_expected", 50),
            ("sticky_hit_expected", 70),  # before the window
            ("forced_cold_replay", 30),
            ("forced_cold_replay", 120),  # before the window
            ("cold_replay", 1),
            ("cold_replay", 40),
        ]
    ):
        await claimed(store, await start(store, f"mode-{i}"), mode, ago)

    elsewhere = await start(store, "hot", namespace=OTHER_NS)
    await bind(store, elsewhere, "w-other")
    elsewhere_claimed = await start(store, "claimed", namespace=OTHER_NS)
    await bind(store, elsewhere_claimed, "w-other")
    await claimed(store, elsewhere_claimed, "forced_cold_replay", 5)


def worker(worker_id: str, **fields: Any) -> StickyWorkerMetrics:
    defaults: dict[str, Any] = {
        "task_queue": QUEUE,
        "state": WorkerState.ACTIVE,
        "live": True,
        "hit_count": 0,
        "miss_count": 0,
        "forced_cold_replay_count": 0,
        "eviction_count": 0,
        "capacity_pressure": False,
    }
    return StickyWorkerMetrics(worker_id=worker_id, **{**defaults, **fields})


async def test_s11_sticky_metrics_count_bindings_modes_and_cache_pressure(store: Store) -> None:
    await script_workers(store)
    await script_runs(store)

    snapshot = await store.operator_metrics(
        namespace=NS, sticky_enabled=True, sticky_ttl_seconds=120.0
    )

    sticky = snapshot.sticky_execution
    assert sticky.model_dump() == {
        "enabled": True,
        "ttl_seconds": 120.0,
        "active_sticky_runs": 5,  # hot, cool, draining, orphan, leased
        "ready_sticky_tasks": 4,  # hot, cool, draining, orphan
        "leased_sticky_tasks": 2,  # leased, leased-expired
        "hit_expected_last_minute": 3,  # closed, 5 s and 50 s ago
        "hit_last_minute": 3,  # what w-cool's heartbeat raised its hit count by
        "miss_last_minute": 1,
        "forced_cold_replay_last_minute": 1,
        "cold_replay_last_minute": 2,  # 1 s and 40 s ago
        "hit_rate_last_minute": 0.75,  # 3 real hits of 4 claims that found a binding
        "miss_rate_last_minute": 0.25,
        "capacity_pressure_tasks": 2,  # hot, draining
        "capacity_pressure_workers": 2,  # w-hot, w-drain
    }
    assert snapshot.sticky_execution_workers == (
        worker("w-cool", live=False, capacity=10, size=8, hit_count=3),
        worker(
            "w-drain",
            state=WorkerState.DRAINING,
            capacity=4,
            size=4,
            eviction_count=1,
            capacity_pressure=True,
        ),
        worker(
            "w-hot",
            capacity=10,
            size=9,
            hit_count=5,
            miss_count=2,
            forced_cold_replay_count=1,
            eviction_count=3,
            capacity_pressure=True,
        ),
        worker("w-zero", capacity=0, size=0),
    )
    assert snapshot.generated_at.tzinfo is not None


async def test_s7_last_minute_window_holds_its_edge_and_not_a_microsecond_more(
    store: Store,
) -> None:
    edge, past, cold = [await start(store, f"wf-{name}") for name in ("edge", "past", "cold")]
    claims = [
        (edge, "sticky_hit_expected", "now() - interval '1 minute'"),
        (past, "forced_cold_replay", "now() - interval '1 minute 1 microsecond'"),
        (cold, "cold_replay", "now()"),
    ]
    # One transaction: its now() is the instant the metrics measure from, to the microsecond.
    async with store.engine.begin() as conn:
        for run_id, mode, at in claims:
            await conn.execute(
                sa.text(
                    "UPDATE workflow_tasks SET state = 'completed', sticky_replay_mode = :mode,"
                    f" sticky_claimed_at = {at} WHERE run_id = :run_id"
                ),
                {"mode": mode, "run_id": run_id},
            )
        sticky = await metrics.sticky_metrics(conn, namespace=NS, enabled=False, ttl_seconds=300)

    assert (sticky.hit_expected_last_minute, sticky.forced_cold_replay_last_minute) == (1, 0)
    assert (sticky.miss_last_minute, sticky.cold_replay_last_minute) == (0, 1)
    # S11: the hit rate counts real hits, and no worker reported one.
    assert (sticky.hit_rate_last_minute, sticky.miss_rate_last_minute) == (0.0, 0.0)
    assert (sticky.enabled, sticky.ttl_seconds) == (False, 300.0)


async def test_s11_rates_are_zero_without_claims_that_found_a_binding(store: Store) -> None:
    await claimed(store, await start(store), "cold_replay", 1)

    snapshot = await store.operator_metrics(namespace=NS, sticky_enabled=True, sticky_ttl_seconds=1)
    empty = await store.operator_metrics(
        namespace="nobody", sticky_enabled=True, sticky_ttl_seconds=1
    )

    sticky = snapshot.sticky_execution
    assert sticky.cold_replay_last_minute == 1
    assert (sticky.hit_rate_last_minute, sticky.miss_rate_last_minute) == (0.0, 0.0)
    assert empty.sticky_execution.model_dump() == {
        **{key: 0 for key in sticky.model_dump()},
        "enabled": True,
        "ttl_seconds": 1.0,
        "hit_rate_last_minute": 0.0,
        "miss_rate_last_minute": 0.0,
    }
    assert empty.sticky_execution_workers == ()


@pytest.mark.parametrize(("ratio", "pressure"), [(0.9, False), (0.8, True)])
async def test_s11_capacity_pressure_follows_the_ratio(
    store: Store, ratio: float, pressure: bool
) -> None:
    await register(store, "w-1", cache=cache(10, 8))
    await bind(store, await start(store), "w-1")

    snapshot = await store.operator_metrics(
        namespace=NS, sticky_enabled=True, sticky_ttl_seconds=300, pressure_ratio=ratio
    )

    [entry] = snapshot.sticky_execution_workers
    assert entry.capacity_pressure is pressure
    assert snapshot.sticky_execution.capacity_pressure_workers == int(pressure)
    assert snapshot.sticky_execution.capacity_pressure_tasks == int(pressure)
    assert snapshot.sticky_execution.ready_sticky_tasks == 1


async def test_s11_document_keeps_workers_beside_the_sticky_section(store: Store) -> None:
    await register(store, "w-1", cache=cache(10, 1))

    snapshot = await store.operator_metrics(namespace=NS, sticky_enabled=True, sticky_ttl_seconds=5)

    document = snapshot.model_dump(mode="json")
    assert list(document) == [
        "generated_at",
        "backlog",
        "repair",
        "workers",
        "sticky_execution",
        "sticky_execution_workers",
        "worker_sessions",
    ]
    assert "workers" not in document["sticky_execution"]
    assert document["sticky_execution_workers"][0]["worker_id"] == "w-1"
    assert document["generated_at"].endswith("Z")
