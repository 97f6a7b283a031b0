"""Workers follow a Postgres failover: the primary killed under load, the standby promoted.

Real worker processes (`burrow worker bench.chaos_app:app`) and a client run on the failover URL
of a private primary and streaming standby (bench/pg_cluster.py); bench/pg_failover.py drives
the load, stops replication for a short window, SIGKILLs the primary and promotes the standby,
then the invariant checker (bench/invariants.py) reads the promoted server. Timings are
measured by the bench, never asserted here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from bench.pg_cluster import Mode, PgCluster
from bench.pg_failover import (
    FailoverOptions,
    FailoverReport,
    WorkerProcesses,
    run_failover,
    worker_env,
)
from burrow import Client, Settings
from tests.apps import build_flows
from tests.support.pg_cluster import started_pg_cluster

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

# Small on purpose (CI has two cores): 30 chains of three runs, the kill a second into the load.
OPTIONS = {"workflows": 30, "rate": 15.0, "kill_at": 1.0, "window": 0.5, "promote_after": 0.5}


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    """A started primary and standby in the mode the test names; removed afterwards."""
    with started_pg_cluster(request.param) as instance:
        yield instance


async def _fail_over(cluster: PgCluster, mode: Mode, tmp_path: Path) -> FailoverReport:
    report = await run_failover(cluster, FailoverOptions(mode=mode, **OPTIONS), tmp_path)
    print("\n".join(report.lines()))  # shown on failure
    assert report.all_closed, f"runs still open; worker logs in {tmp_path}"
    assert report.invariants is not None
    return report


@pytest.mark.parametrize("cluster", ["sync"], indirect=True)
async def test_synchronous_replication_loses_no_committed_work_d3_d4(
    cluster: PgCluster, tmp_path: Path
) -> None:
    """D3, D4 (C2): with a synchronous standby every acknowledged commit survives the kill.

    Commits made while replication was stopped were never acknowledged (they wait for the
    standby); their callers got StoreUnavailable and retried on the promoted standby. Every
    workflow completes with its expected result, nothing is recorded twice.
    """
    report = await _fail_over(cluster, "sync", tmp_path)
    assert report.invariants is not None
    assert report.missing == []
    assert report.invariants.ok, report.invariants.lines()
    assert report.invariants.completed_as_expected == OPTIONS["workflows"]


@pytest.mark.parametrize("cluster", ["async"], indirect=True)
async def test_asynchronous_replication_loses_only_the_unstreamed_commits_d2_d3_d4(
    cluster: PgCluster, tmp_path: Path
) -> None:
    """D2, D3, D4: with an asynchronous standby, exactly the commits it had not received when
    the primary died are lost: here those acknowledged while replication was stopped (and the
    streaming lag just before). A start acknowledged then has no run on the promoted server; a
    lost activity result or workflow task completion is redone after its lease expires (D2:
    the activity runs again). Fencing still records each outcome once: no duplicate activity
    outcome, command, signal or run; every other workflow completes with its expected result,
    and warm workflow state from the old primary is not resumed (the server epoch moved).
    """
    report = await _fail_over(cluster, "async", tmp_path)
    invariants = report.invariants
    assert invariants is not None
    unaccounted = {w: report.acked.get(w) for w in set(report.missing) - report.acked_in_window}
    assert not unaccounted, f"lost starts acknowledged outside the window: {unaccounted}"
    assert set(invariants.violation_counts) <= {"missing"}, invariants.lines()
    assert invariants.violation_counts["missing"] == len(report.missing)
    assert invariants.duplicates == 0
    assert invariants.completed_as_expected == OPTIONS["workflows"] - len(report.missing)
    assert report.missing == [] or report.lost_commits > 0


async def _settled(url: str, workflow_id: str, signals: int) -> None:
    """Until the run holds `signals` signals in its history and no workflow task is open."""
    conn = await asyncpg.connect(url)
    query = """
        SELECT count(*) FILTER (WHERE h.event_type = 'SignalReceived') = $2
               AND NOT EXISTS (SELECT 1 FROM workflow_tasks t
                               WHERE t.run_id = r.run_id AND t.state IN ('ready', 'leased'))
        FROM runs r LEFT JOIN history_events h USING (run_id)
        WHERE r.workflow_id = $1 GROUP BY r.run_id"""
    try:
        deadline = time.monotonic() + 30
        while not await conn.fetchval(query, workflow_id, signals):
            assert time.monotonic() < deadline, f"{workflow_id} did not settle"
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def _signal(client: Client, workflow_id: str, value: str) -> None:
    """Signal, retrying while no server takes writes (the promotion is under way)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            await client.get_handle(workflow_id).signal("step", value, signal_id=value)
            return
        except Exception:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("cluster", ["async"], indirect=True)
async def test_warm_state_the_lost_commits_built_is_never_resumed_s6_d1(
    cluster: PgCluster, tmp_path: Path
) -> None:
    """S6, D1: a worker keeps a run warm after its completion committed; after an async failover
    that commit may be gone. The warm instance (which took signal `one`) stands past the new
    primary's history, so it must not be resumed: the run replays cold from the history it has
    (`two`, `three`) and its result follows from that history alone.
    """
    env = {**worker_env(cluster, FailoverOptions()), "BURROW_STICKY_CACHE_CAPACITY": "100"}
    workers = WorkerProcesses(1, env, tmp_path, target="tests.apps.build_flows:app_v1")
    client = await Client.connect(settings=Settings.from_env(env))
    try:
        await workers.wait_started()
        handle = await client.start_workflow(
            "BuildFlow", 2, id="warm", task_queue=build_flows.TASK_QUEUE, check_workers=False
        )
        await _settled(cluster.primary.url(), "warm", 0)
        await _settled(cluster.standby.url(), "warm", 0)  # replayed there too
        await cluster.pause_replication()
        await _signal(client, "warm", "one")
        await _settled(cluster.primary.url(), "warm", 1)  # taken warm, acknowledged, unstreamed
        await asyncio.to_thread(cluster.kill_primary)
        await asyncio.to_thread(cluster.promote)
        await _signal(client, "warm", "two")
        await _signal(client, "warm", "three")
        assert await handle.result(timeout=60) == ["two", "three", "v1"]
    finally:
        workers.stop()
        await client.close()
    assert "database_server_changed" in workers.output()
