"""Schedules fired exactly once under faults (issue 30, "Done when"): a schedule every second
for 30 s, fired by two `burrow matching` processes and a worker's repair pass, while the worker
is killed (SIGKILL) twice and restarted, and one matching process is killed for good; and one
for 20 s while Postgres crashes and restarts.

Real processes, real Postgres and RabbitMQ. The crash is of a private Postgres server of the
test's own (tests/support/private_postgres.py): the shared one serves tests running in parallel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from burrow import Client
from burrow.protocol.schedules import (
    IntervalSpec,
    OverlapPolicy,
    ScheduleSpec,
    fire_times_after,
    scheduled_workflow_id,
)
from tests.acceptance.conftest import MatchingFactory, WorkerFactory, fast_settings, log_tail
from tests.apps import schedule_flows
from tests.support import spawn
from tests.support.private_postgres import PrivatePostgres, private_postgres

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

FIRES = 30
CRASH_FIRES = 20
LEAD = 3.0
"""Seconds from now to the first fire time: the processes start meanwhile."""
SETTLE_TIMEOUT = 30.0
MAX_LAG = timedelta(seconds=10)
"""A loose bound on fire lag (one repair interval is 0.2 s): fires go on while a worker is down."""


@pytest.fixture
def server() -> Iterator[PrivatePostgres]:
    """A private Postgres server this test crashes (the shared one is never touched)."""
    with private_postgres() as instance:
        yield instance


def _every_second(count: int) -> tuple[ScheduleSpec, list[datetime]]:
    """A spec firing every second `count` times from LEAD seconds from now, and its times."""
    first = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=LEAD)
    spec = ScheduleSpec(
        intervals=[IntervalSpec(every="PT1S")],
        start_at=first,
        end_at=first + timedelta(seconds=count - 1),
    )
    expected = fire_times_after(spec, first - timedelta(seconds=1), limit=count + 5)
    assert len(expected) == count
    return spec, expected


def _kill(proc: spawn.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


async def _until(moment: datetime) -> None:
    await asyncio.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


async def _settled(conn: asyncpg.Connection, schedule_id: str, count: int, tmp_path: Path) -> None:
    """Wait until every fire time is recorded and every run the schedule started has closed."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    query = """
        SELECT (SELECT count(*) FROM schedule_fires WHERE schedule_id = $1) AS fires,
               (SELECT count(*) FROM runs WHERE status = 'running') AS running
    """
    while True:
        row = await conn.fetchrow(query, schedule_id)
        if row["fires"] >= count and row["running"] == 0:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"not settled: {dict(row)}\n" + log_tail(tmp_path))
        await asyncio.sleep(0.2)


async def _assert_each_fire_started_once(
    database_url: str,
    client: Client,
    schedule_id: str,
    expected: list[datetime],
    tmp_path: Path,
) -> dict[str, asyncpg.Record]:
    """Each expected fire time started exactly one run, nothing else started, and every run
    completed; returns the runs by workflow id."""
    count = len(expected)
    conn = await asyncpg.connect(database_url)
    try:
        await _settled(conn, schedule_id, count, tmp_path)
        fires = await conn.fetch(
            "SELECT fire_at, outcome, workflow_id, run_id::text AS run_id FROM schedule_fires"
            " WHERE schedule_id = $1 ORDER BY fire_at",
            schedule_id,
        )
        runs = await conn.fetch(
            "SELECT workflow_id, run_id::text AS run_id, status, created_at FROM runs"
        )
        schedule = await conn.fetchrow(
            "SELECT fires_count, skipped_count, missed_count, failures_count, next_fire_at"
            " FROM schedules WHERE schedule_id = $1",
            schedule_id,
        )
    finally:
        await conn.close()

    assert [f["fire_at"] for f in fires] == expected, log_tail(tmp_path)  # none missed
    assert {f["outcome"] for f in fires} == {"started"}, [dict(f) for f in fires]
    ids = [scheduled_workflow_id(schedule_id, at) for at in expected]
    assert [f["workflow_id"] for f in fires] == ids
    # Exactly one run per fire time, and nothing else started: none twice.
    assert sorted(r["workflow_id"] for r in runs) == sorted(ids)
    by_id = {r["workflow_id"]: r for r in runs}
    assert [by_id[f["workflow_id"]]["run_id"] for f in fires] == [f["run_id"] for f in fires]
    assert {r["status"] for r in runs} == {"completed"}, [dict(r) for r in runs]
    assert dict(schedule) == {
        "fires_count": count,
        "skipped_count": 0,
        "missed_count": 0,
        "failures_count": 0,
        "next_fire_at": None,  # past end_at: completed
    }
    for workflow_id in ids[:: count // 5]:
        assert await client.get_handle(workflow_id).result(timeout=10) == f"ran {workflow_id}"

    return by_id


async def test_every_second_for_30s_fires_each_second_once_through_worker_kills(
    database_url: str,
    client: Client,
    worker_process: WorkerFactory,
    matching_process: MatchingFactory,
    tmp_path: Path,
) -> None:
    """issue 30: each fire time of an every-second schedule starts exactly one workflow, with
    id `<schedule id>-<fire time>`, none missed and none twice, while the worker (which sweeps
    too) is SIGKILLed twice and restarted and one of two matching processes is SIGKILLed; every
    started workflow completes."""
    prefix = os.environ["BURROW_AMQP_PREFIX"]  # the test's own (tests/conftest.py)
    target = schedule_flows.__name__ + ":app"
    matchers = [matching_process(f"matching-{n}") for n in (1, 2)]
    worker = worker_process(f"{prefix}-sched-1", target)

    spec, expected = _every_second(FIRES)
    first = expected[0]
    schedule_id = f"every-second-{prefix}"
    await client.create_schedule(
        schedule_id,
        schedule_flows.ScheduledFlow,
        spec=spec,
        task_queue=schedule_flows.TASK_QUEUE,
        # Runs left open by a dead worker must not turn later fires into skips.
        overlap_policy=OverlapPolicy.ALLOW_ALL,
    )

    # Faults, by fire time: the worker dies at +7 s and +17 s, back 2 s later each time;
    # matching-1 dies at +12 s and stays down.
    await _until(first + timedelta(seconds=7))
    _kill(worker)
    await _until(first + timedelta(seconds=9))
    worker = worker_process(f"{prefix}-sched-2", target)
    await _until(first + timedelta(seconds=12))
    _kill(matchers[0])
    await _until(first + timedelta(seconds=17))
    _kill(worker)
    await _until(first + timedelta(seconds=19))
    worker = worker_process(f"{prefix}-sched-3", target)
    await _until(expected[-1] + timedelta(seconds=1))

    by_id = await _assert_each_fire_started_once(
        database_url, client, schedule_id, expected, tmp_path
    )
    fires = [(at, by_id[scheduled_workflow_id(schedule_id, at)]) for at in expected]
    lags = sorted(run["created_at"] - at for at, run in fires)
    print(f"fire lag: min {lags[0]}, median {lags[len(lags) // 2]}, max {lags[-1]}")
    assert lags[0] >= timedelta(0) and lags[-1] < MAX_LAG, lags
    for proc in (matchers[1], worker):
        assert proc.poll() is None, f"pid {proc.pid} exited with {proc.returncode}"


async def test_every_second_for_20s_fires_each_second_once_through_a_postgres_crash(
    server: PrivatePostgres,
    worker_process: WorkerFactory,
    matching_process: MatchingFactory,
    tmp_path: Path,
) -> None:
    """issue 30: Postgres crashes (`pg_ctl stop -m immediate`) for 3 s of an every-second
    schedule's 20 s: the fires due meanwhile are started once it is back (within the catch-up
    window), each exactly once, and every started workflow completes; the processes live on."""
    url = server.url()
    prefix = os.environ["BURROW_AMQP_PREFIX"]
    target = schedule_flows.__name__ + ":app"
    on_server = {"BURROW_DATABASE_URL": url}
    matchers = [matching_process(f"matching-{n}", **on_server) for n in (1, 2)]
    worker = worker_process(f"{prefix}-crash-1", target, **on_server)
    spec, expected = _every_second(CRASH_FIRES)
    schedule_id = f"through-a-crash-{prefix}"
    client = await Client.connect(settings=fast_settings(url))
    try:
        await client.create_schedule(
            schedule_id,
            schedule_flows.ScheduledFlow,
            spec=spec,
            task_queue=schedule_flows.TASK_QUEUE,
            overlap_policy=OverlapPolicy.ALLOW_ALL,
        )
        await _until(expected[0] + timedelta(seconds=6))
        await asyncio.to_thread(server.stop, "immediate")
        await asyncio.sleep(3)
        await asyncio.to_thread(server.start)
        await _until(expected[-1] + timedelta(seconds=1))
        by_id = await _assert_each_fire_started_once(url, client, schedule_id, expected, tmp_path)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    for proc in (*matchers, worker):
        assert proc.poll() is None, f"pid {proc.pid} exited with {proc.returncode}"
    # The fires due while the server was down were started after it came back, not on time.
    late = [
        by_id[scheduled_workflow_id(schedule_id, at)]["created_at"] - at for at in expected[7:9]
    ]
    assert min(late) >= timedelta(seconds=1), late
    events = "".join((tmp_path / f"matching-{n}.log").read_text() for n in (1, 2))
    assert "matching_pass_failed" in events, log_tail(tmp_path)
