"""`burrow system operator-metrics` (S11) and `burrow workflow describe` (S4, S7) on sticky state.

The binding is written with plain SQL: these tests check what the commands read and print.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from burrow.store import Store
from burrow.store.models import StickyCacheReport
from tests.support import spawn

pytestmark = pytest.mark.slow


@pytest.fixture
async def bound_run(database_url: str) -> AsyncIterator[str]:
    """A run bound to a live worker whose cache is under pressure; yields its run id."""
    store = Store.connect(database_url, pool_size=1)
    try:
        await store.register_worker(
            worker_id="w-1",
            namespace="default",
            task_queue="q",
            workflow_types=["Flow"],
            activity_types=[],
            concurrency=1,
            sticky_cache=StickyCacheReport(enabled=True, capacity=10, size=10, hit_count=4),
        )
        # S11: one real hit reported since the registration (the hit rate counts real hits).
        await store.heartbeat_worker(
            worker_id="w-1",
            sticky_cache=StickyCacheReport(enabled=True, capacity=10, size=10, hit_count=5),
        )
        run = await store.start_workflow(
            namespace="default", workflow_id="wf-1", workflow_type="Flow", task_queue="q", input={}
        )
        async with store.engine.begin() as conn:
            for table in ("runs", "workflow_tasks"):
                await conn.execute(
                    sa.text(
                        f"UPDATE {table} SET sticky_worker_id = 'w-1',"
                        " sticky_until = now() + interval '5 minutes' WHERE run_id = :run_id"
                    ),
                    {"run_id": run.run_id},
                )
            await conn.execute(
                sa.text(
                    "UPDATE workflow_tasks SET state = 'leased',"
                    " sticky_replay_mode = 'sticky_hit_expected', sticky_claimed_at = now()"
                    " WHERE run_id = :run_id"
                ),
                {"run_id": run.run_id},
            )
    finally:
        await store.close()
    yield run.run_id


async def burrow(database_url: str, *args: str, **env: str) -> str:
    done = await asyncio.to_thread(
        spawn.run,
        [sys.executable, "-m", "burrow", *args],
        env={**os.environ, "BURROW_DATABASE_URL": database_url, "COLUMNS": "200", **env},
        timeout=60,
        check=True,
    )
    return done.stdout


async def test_s11_operator_metrics_serves_the_operator_api_document(
    database_url: str, bound_run: str
) -> None:
    out = await burrow(
        database_url, "system", "operator-metrics", "--json", BURROW_STICKY_TTL_SECONDS="120"
    )

    document: dict[str, Any] = json.loads(out)
    assert list(document) == ["namespace", "operator_metrics"]
    assert document["namespace"] == "default"
    metrics = document["operator_metrics"]
    assert list(metrics) == [
        "generated_at",
        "backlog",
        "repair",
        "workers",
        "sticky_execution",
        "sticky_execution_workers",
        "worker_sessions",
        "matching_role",
    ]
    sticky = metrics["sticky_execution"]
    assert (sticky["enabled"], sticky["ttl_seconds"]) == (True, 120.0)
    assert (sticky["active_sticky_runs"], sticky["leased_sticky_tasks"]) == (1, 1)
    assert (sticky["hit_expected_last_minute"], sticky["hit_rate_last_minute"]) == (1, 1.0)
    assert sticky["capacity_pressure_workers"] == 1
    [worker] = metrics["sticky_execution_workers"]
    assert worker["worker_id"] == "w-1"
    assert (worker["size"], worker["capacity"], worker["hit_count"]) == (10, 10, 5)
    assert worker["capacity_pressure"] is True and worker["live"] is True

    other = json.loads(
        await burrow(database_url, "system", "operator-metrics", "--json", "--namespace", "other")
    )
    assert other["namespace"] == "other"
    assert other["operator_metrics"]["sticky_execution"]["active_sticky_runs"] == 0
    assert other["operator_metrics"]["sticky_execution_workers"] == []

    table = await burrow(database_url, "system", "operator-metrics")
    assert "hit_rate_last_minute" in table and "100%" in table
    assert "w-1" in table and "10/10 pressure" in table
    assert "worker sessions" in table and "orphaned" in table  # W9: sessions per state


async def test_s4_s7_describe_shows_the_binding_and_replay_mode(
    database_url: str, bound_run: str
) -> None:
    described = json.loads(await burrow(database_url, "workflow", "describe", "wf-1", "--json"))

    assert described["run_id"] == bound_run
    assert described["sticky_worker_id"] == "w-1"
    assert described["sticky_until"].startswith("20")
    assert described["sticky_replay_mode"] == "sticky_hit_expected"
    assert described["sticky_claimed_at"].startswith("20")

    table = await burrow(database_url, "workflow", "describe", "wf-1")
    assert "sticky_worker_id" in table and "w-1" in table
    assert "sticky_hit_expected" in table
    assert "(expired)" not in table
