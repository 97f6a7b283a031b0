"""The dedicated matching shape (SPEC M4c, M5): `burrow matching` beside workers that neither
re-poll nor sweep (`DW_V2_MATCHING_ROLE_QUEUE_WAKE=0`).

Real worker processes, real `burrow matching` processes, real Postgres and RabbitMQ.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from burrow import Client, Settings
from burrow.broker.inspect import inspect_queues
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from burrow.store import Store
from tests.acceptance.conftest import (
    ROOT,
    MatchingFactory,
    WorkerFactory,
    fetchval,
    log_tail,
    routed,
    run_statuses,
)
from tests.apps import broker_flows, matching_flows
from tests.support import spawn
from tests.support.history import assert_well_formed

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

RUNS_TIMEOUT = 90.0
# Workers of the dedicated shape: no timed re-poll, no repair pass; forced cold replay, so
# every workflow wake goes to the shared queues this test reroutes (none to a sticky queue).
DEDICATED_WORKER_ENV = {"DW_V2_MATCHING_ROLE_QUEUE_WAKE": "0", "BURROW_STICKY_CACHE_CAPACITY": "0"}


def _prefix() -> str:
    return os.environ["BURROW_AMQP_PREFIX"]  # the test's own (tests/conftest.py)


def _amqp_url() -> str:
    return Settings.from_env(os.environ).amqp_url


def _log_events(tmp_path: Path, name: str) -> list[dict[str, object]]:
    """The JSON log lines of one process."""
    events = []
    for line in (tmp_path / f"{name}.log").read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def _pass_total(tmp_path: Path, name: str, field: str) -> int:
    """The sum of one counter over a process's logged repair passes."""
    return sum(
        int(str(event.get(field, 0)))
        for event in _log_events(tmp_path, name)
        if event.get("event") in ("repair_pass_changed", "stale_ready_republished")
    )


async def _matching_processes(database_url: str) -> int:
    """Live matching processes, as operator metrics report them."""
    store = Store.connect(database_url, pool_size=1)
    try:
        metrics = await store.operator_metrics(
            namespace="default", sticky_enabled=True, sticky_ttl_seconds=300
        )
    finally:
        await store.close()
    return metrics.repair.matching_processes


async def _wait_all_completed(database_url: str, expected: int, tmp_path: Path) -> float:
    """Wait until the runs table holds exactly `expected` runs, all completed; returns seconds."""
    started = time.monotonic()
    while True:
        counts = await run_statuses(database_url)
        if counts == {"completed": expected}:
            return time.monotonic() - started
        if time.monotonic() - started >= RUNS_TIMEOUT:
            raise AssertionError(
                f"runs not all completed within {RUNS_TIMEOUT}s: {counts}\n" + log_tail(tmp_path)
            )
        await asyncio.sleep(0.2)


async def _wait_consuming(names: list[str], consumers: int, tmp_path: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        depths = await inspect_queues(_amqp_url(), names)
        if all(d is not None and d.consumers == consumers for d in depths.values()):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"wake queues not consumed: {depths}\n" + log_tail(tmp_path))
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def _cleanup_broker(prefixes: list[str], queues: list[str]) -> AsyncIterator[None]:
    """Remove the test's wake queues and exchanges afterwards (the broker is shared)."""
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            connection = await aio_pika.connect(_amqp_url(), timeout=5)
            try:
                for name in queues:
                    channel = await connection.channel()
                    with contextlib.suppress(Exception):
                        await channel.queue_delete(name)
                for prefix in prefixes:
                    channel = await connection.channel()
                    with contextlib.suppress(Exception):
                        await channel.exchange_delete(Topology(prefix=prefix).exchange_name)
            finally:
                await connection.close()


async def _reroute_to_matching(names: list[str], own: Topology, matching: Topology) -> None:
    """Every wake the client and workers publish goes nowhere; the matching role's arrive.

    The workers' wake queues are unbound from the exchange everyone else publishes to, and bound
    to the exchange of the matching process's own prefix under its routing keys.
    """
    connection = await aio_pika.connect(_amqp_url(), timeout=5)
    try:
        channel = await connection.channel()
        target = await matching.declare_exchange(channel)
        for name in names:
            queue = await channel.declare_queue(name, passive=True)
            await queue.unbind(own.exchange_name, routing_key=name)
            await queue.bind(target, routing_key=matching.prefix + name.removeprefix(own.prefix))
    finally:
        await connection.close()


async def test_dedicated_matching_completes_a_workload_whose_wakes_were_all_dropped(
    database_url: str,
    client: Client,
    worker_process: WorkerFactory,
    matching_process: MatchingFactory,
    tmp_path: Path,
) -> None:
    """M4c, M5, C4: dedicated matching shape: workers with queue wake disabled plus
    `burrow matching` complete a workload in which every wake was dropped.

    No wake the client or the workers publish reaches a worker; the workers neither re-poll
    nor sweep, so only the matching role's re-published wakes (for ready work older than the
    wake TTL) get the runs through.
    """
    queue = broker_flows.TASK_QUEUE
    own, matching = Topology(prefix=_prefix()), Topology(prefix=f"{_prefix()}-m")
    names = [
        own.queue_name(namespace="default", connection="default", queue=queue, kind=kind)
        for kind in TaskKind
    ]
    async with _cleanup_broker([own.prefix, matching.prefix], names):
        workers = [
            worker_process(f"{own.prefix}-dedicated-{n}", broker_flows.__name__ + ":app",
                           **DEDICATED_WORKER_ENV)
            for n in (1, 2)
        ]  # fmt: skip
        await _wait_consuming(names, 2, tmp_path)
        await _reroute_to_matching(names, own, matching)
        assert not await routed(own.exchange_name, names[0], queue), "wakes still arrive"

        count = 20
        handles = [
            await client.start_workflow(
                broker_flows.EchoFlow, f"v{i}", id=f"{own.prefix}-w{i}", task_queue=queue
            )
            for i in range(count)
        ]
        # Nothing claims the starts: their wakes went nowhere and nobody re-polls.
        assert (
            await fetchval(
                database_url, "SELECT count(*) FROM workflow_tasks WHERE state = 'ready'"
            )
            == count
        )

        matcher = matching_process(
            "matching-1",
            BURROW_AMQP_PREFIX=matching.prefix,
            DW_WAKE_SIGNAL_TTL_SECONDS="0.5",
            BURROW_LOG_LEVEL="debug",
        )
        seconds = await _wait_all_completed(database_url, count, tmp_path)
        print(f"{count} runs on re-published wakes alone: {seconds:.2f}s")

        for i, handle in enumerate(handles):
            assert await handle.result(timeout=10) == f"echo:v{i}"
            history = await handle.history()
            assert_well_formed(history)
            assert [e.event_type for e in history].count("ActivityCompleted") == 1
        assert _pass_total(tmp_path, "matching-1", "republished") > 0
        for proc in (*workers, matcher):
            assert proc.poll() is None, f"pid {proc.pid} exited with {proc.returncode}"


async def test_two_matching_processes_fire_each_timer_and_timeout_once(
    database_url: str,
    worker_process: WorkerFactory,
    matching_process: MatchingFactory,
    tmp_path: Path,
) -> None:
    """M4c, D3, store invariant 5: two `burrow matching` processes sweep the same database;
    every timer fires once and every missed heartbeat times its attempt out once (one retry),
    and both stop cleanly on SIGTERM."""
    worker_process(f"{_prefix()}-timed", matching_flows.__name__ + ":app", **DEDICATED_WORKER_ENV)
    matchers = [matching_process(f"matching-{n}") for n in (1, 2)]
    settings = Settings.from_env(os.environ).model_copy(update={"database_url": database_url})
    client = await Client.connect(settings=settings)
    count = 10
    try:
        handles = [
            await client.start_workflow(
                matching_flows.TimedRetryFlow,
                f"v{i}",
                id=f"timed-{uuid.uuid4().hex[:8]}",
                task_queue=matching_flows.TASK_QUEUE,
            )
            for i in range(count)
        ]
        await _wait_all_completed(database_url, count, tmp_path)
        for handle in handles:
            assert await handle.result(timeout=10) == 2  # the retry after the timeout won
            history = await handle.history()
            assert_well_formed(history)
            types = [e.event_type for e in history]
            assert types.count("TimerFired") == 2, types
            assert types.count("ActivityScheduled") == 1, types
            assert types.count("ActivityRetryScheduled") == 1, types
            assert types.count("ActivityCompleted") == 1, types
    finally:
        await client.close()

    names = [f"matching-{n}" for n in (1, 2)]
    assert sum(_pass_total(tmp_path, name, "timers_fired") for name in names) == 2 * count
    assert sum(_pass_total(tmp_path, name, "activity_timeouts") for name in names) == count
    attempts = "SELECT count(*) FROM activity_tasks WHERE attempt = 2 AND state = 'completed'"
    assert await fetchval(database_url, attempts) == count

    assert await _matching_processes(database_url) == 2  # M8: operators see both
    for proc in matchers:
        proc.send_signal(signal.SIGTERM)
    for proc, name in zip(matchers, names, strict=True):
        assert proc.wait(timeout=30) == 0, log_tail(tmp_path)
        events = [e.get("event") for e in _log_events(tmp_path, name)]
        assert events[0] == "matching_started" and events[-1] == "matching_stopped", events
    # A closed connection leaves pg_stat_activity as soon as its backend has exited.
    deadline = time.monotonic() + 30
    while await _matching_processes(database_url) != 0:
        assert time.monotonic() < deadline, "stopped matching processes still counted"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--repair-interval", "0"], 2, "--repair-interval"),
        (["--wake-ttl", "-1"], 2, "--wake-ttl"),
        (["--database-url", "mysql://db/burrow"], 2, "must be a postgresql:// URL"),
        (["--amqp-url", "http://broker"], 2, "must be an amqp:// or amqps:// URL"),
        (
            ["--database-url", "postgresql://postgres@127.0.0.1:5432/burrow_never_created"],
            1,
            "run `burrow migrate`",
        ),
    ],
)
@pytest.mark.runs_no_workflow_code
def test_matching_refuses_bad_settings_and_an_unmigrated_database(
    args: list[str], code: int, message: str
) -> None:
    """M4c: bad flags exit 2 and a database without Burrow's tables exits 1, each saying why,
    before any pass runs."""
    done = spawn.run(
        [sys.executable, "-m", "burrow", "matching", "--no-wakes", *args],
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert message in " ".join(done.stderr.split()), done.stderr
    assert "repair_pass_changed" not in done.stderr


@pytest.mark.runs_no_workflow_code
async def test_matching_outlives_an_unreachable_database_and_stops_on_sigterm(
    matching_process: MatchingFactory, tmp_path: Path
) -> None:
    """M4c, C4: an unreachable Postgres is logged and retried, never fatal; SIGTERM stops the
    process with exit code 0."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    proc = matching_process(
        "matching-outage",
        BURROW_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/burrow",
        BURROW_WAKES="0",
    )

    def failures() -> int:
        events = _log_events(tmp_path, "matching-outage")
        return sum(e.get("event") == "matching_pass_failed" for e in events)

    deadline = time.monotonic() + 30
    while failures() < 2:
        assert proc.poll() is None, log_tail(tmp_path)
        assert time.monotonic() < deadline, log_tail(tmp_path)
        await asyncio.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, log_tail(tmp_path)
    assert _log_events(tmp_path, "matching-outage")[-1]["event"] == "matching_stopped"
