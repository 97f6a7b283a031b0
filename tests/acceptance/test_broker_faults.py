"""Broker faults (C1-C4, M4-M6): lost, duplicated and stranded wakes cost latency, never work.

Real RabbitMQ, real worker processes. Every test checks the durable effects: each run completed
with its own result, each history well formed (no duplicate events), and where the broker was
disturbed, that the same worker processes are consuming their wake queues again. The shared
broker is never stopped: the restart test stops a node of its own (tests/support/private_rabbit.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aio_pika
import pytest

from burrow import Client, Settings
from burrow.broker.errors import BrokerError
from burrow.broker.inspect import QueueDepth, inspect_queues
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from burrow.client import WorkflowHandle
from burrow.config import WakeSettings
from tests.acceptance.conftest import (
    WorkerFactory,
    fast_settings,
    fetchval,
    log_tail,
    routed,
    run_statuses,
)
from tests.apps import broker_flows
from tests.support import spawn
from tests.support.history import assert_well_formed
from tests.support.private_rabbit import PrivateRabbit, private_rabbit

pytestmark = pytest.mark.slow

TARGET = "tests.apps.broker_flows:app"
QUEUE = broker_flows.TASK_QUEUE
KINDS = (TaskKind.WORKFLOW, TaskKind.ACTIVITY, TaskKind.QUERY)
RUNS_TIMEOUT = 90.0
CONSUMING_TIMEOUT = 30.0

Run = tuple[WorkflowHandle, str]  # a handle and the result its run must return
Ctl = Callable[..., Awaitable[str]]  # `rabbitmqctl ARGS...` against one node; its output


# -- helpers ------------------------------------------------------------------------------------


def _prefix() -> str:
    return os.environ["BURROW_AMQP_PREFIX"]  # the test's own (tests/conftest.py)


def _amqp_url() -> str:
    return Settings.from_env(os.environ).amqp_url


def _wake_queues(kinds: Sequence[TaskKind] = KINDS) -> list[str]:
    topology = Topology(prefix=_prefix())
    return [
        topology.queue_name(namespace="default", connection="default", queue=QUEUE, kind=kind)
        for kind in kinds
    ]


async def _wait_all_completed(
    database_url: str, expected: int, tmp_path: Path, *, timeout: float = RUNS_TIMEOUT
) -> float:
    """Wait until the runs table holds exactly `expected` runs, all completed; returns seconds."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        counts = await run_statuses(database_url)
        if counts == {"completed": expected}:
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"runs not all completed within {timeout}s: {counts} (expected {expected})\n"
                + log_tail(tmp_path)
            )
        await asyncio.sleep(0.2)


async def _check_runs(runs: Sequence[Run]) -> None:
    """Each run returned its own result, and its history is well formed with one activity."""
    for handle, expected in runs:
        assert await handle.result(timeout=10) == expected, handle.workflow_id
        history = await handle.history()
        assert_well_formed(history)
        types = [e.event_type for e in history]
        assert types[-1] == "WorkflowCompleted", (handle.workflow_id, types)
        assert types.count("ActivityScheduled") == 1, (handle.workflow_id, types)
        assert types.count("ActivityCompleted") == 1, (handle.workflow_id, types)
        assert types.count("WorkflowCompleted") == 1, (handle.workflow_id, types)


async def _start_echoes(client: Client, label: str, count: int) -> list[Run]:
    runs = []
    for i in range(count):
        value = f"{label}-{i}"
        handle = await client.start_workflow(
            broker_flows.EchoFlow, value, id=f"{_prefix()}-{value}", task_queue=QUEUE
        )
        runs.append((handle, f"echo:{value}"))
    return runs


async def _start_gated(client: Client, gate: Path, label: str, count: int) -> list[Run]:
    runs = []
    for i in range(count):
        value = f"{label}-{i}"
        handle = await client.start_workflow(
            broker_flows.GatedFlow, str(gate), value, id=f"{_prefix()}-{value}", task_queue=QUEUE
        )
        runs.append((handle, f"gated:{value}"))
    return runs


async def _depths(names: Sequence[str]) -> dict[str, QueueDepth | None] | None:
    try:
        return await inspect_queues(_amqp_url(), names)
    except BrokerError:
        return None  # the broker is (re)starting


async def _wait_consuming(
    consumers: int, tmp_path: Path, *, kinds: Sequence[TaskKind] = KINDS
) -> dict[str, QueueDepth | None]:
    """Wait until each wake queue has exactly `consumers` consumers (one per worker)."""
    names = _wake_queues(kinds)
    deadline = time.monotonic() + CONSUMING_TIMEOUT
    while True:
        depths = await _depths(names)
        if depths is not None and all(
            d is not None and d.consumers == consumers for d in depths.values()
        ):
            return depths
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"wake queues without {consumers} consumer(s) after {CONSUMING_TIMEOUT}s: "
                f"{depths}\n" + log_tail(tmp_path)
            )
        await asyncio.sleep(0.1)


async def _eventually(
    probe: Callable[[], Awaitable[bool]], what: str, tmp_path: Path, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s\n" + log_tail(tmp_path))
        await asyncio.sleep(0.05)


async def _true(value: bool) -> bool:
    return value


def _alive(*procs: spawn.Process) -> list[int]:
    for proc in procs:
        assert proc.poll() is None, f"worker pid {proc.pid} exited with {proc.returncode}"
    return [proc.pid for proc in procs]


def _log_count(tmp_path: Path, worker_id: str, event: str) -> int:
    return (tmp_path / f"{worker_id}.log").read_text(errors="replace").count(f'"{event}"')


async def _rabbitmqctl(*args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        ["rabbitmqctl", *args],
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    return done.stdout


def _node_ctl(node: PrivateRabbit) -> Ctl:
    async def ctl(*args: str) -> str:
        return await asyncio.to_thread(node.ctl, *args)

    return ctl


async def _connection_pids(connection_name: str, ctl: Ctl = _rabbitmqctl) -> list[str]:
    """The broker pids of connections whose client-provided name is `connection_name`."""
    out = await ctl("-q", "list_connections", "pid", "client_properties")
    marker = f'{{"connection_name","{connection_name}"}}'
    return [line.split("\t", 1)[0] for line in out.splitlines() if marker in line]


@dataclass
class WakeDropper:
    """Unbinds and purges the test's wake queues every ~20 ms: wakes go nowhere."""

    names: list[str]
    exchange: str
    rounds: int = 0
    purged: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        connection = await aio_pika.connect(
            _amqp_url(), client_properties={"connection_name": f"wake-dropper:{_prefix()}"}
        )
        try:
            channel = await connection.channel()
            while not self.stop.is_set():
                for name in self.names:
                    try:
                        queue = await channel.declare_queue(name, passive=True)
                        await queue.unbind(self.exchange, routing_key=name)
                        purged = await queue.purge()
                        self.purged += purged.message_count or 0
                    except aio_pika.exceptions.ChannelClosed:
                        channel = await connection.channel()  # a missing queue closes it
                self.rounds += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 0.02)
        finally:
            await connection.close()


@pytest.fixture(autouse=True)
async def _broker_cleanup(_clean_environment: None) -> AsyncIterator[None]:
    """Remove the test's wake queues and exchange afterwards (the broker is shared).

    Autouse, so it is torn down after `worker_process` killed the workers (a live worker's
    robust channel would declare a deleted queue again).
    """
    yield
    topology = Topology(prefix=_prefix())
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect(_amqp_url(), timeout=5)
        try:
            for name in _wake_queues():
                channel = await connection.channel()
                with contextlib.suppress(Exception):
                    await channel.queue_delete(name)
            channel = await connection.channel()
            with contextlib.suppress(Exception):
                await channel.exchange_delete(topology.exchange_name)
        finally:
            await connection.close()


@pytest.fixture(scope="module")
def _rabbit_node() -> Iterator[PrivateRabbit]:
    """One private node for the module (its first boot takes ~15 s); removed even on failure."""
    with private_rabbit() as node:
        yield node


@pytest.fixture
def private_broker(
    _rabbit_node: PrivateRabbit, _clean_environment: None, monkeypatch: pytest.MonkeyPatch
) -> PrivateRabbit:
    """The private node, running, with the test's workers, clients and inspection pointed at it.

    Depends on `_clean_environment`, which sets BURROW_AMQP_URL first; the variable still holds
    the private URL when `_broker_cleanup` deletes the test's queues.
    """
    if not _rabbit_node.is_running():
        _rabbit_node.start()  # an earlier test that failed mid-restart left it down
    monkeypatch.setenv("BURROW_AMQP_URL", _rabbit_node.url)
    return _rabbit_node


@pytest.fixture
async def private_client(private_broker: PrivateRabbit, database_url: str) -> AsyncIterator[Client]:
    """A client on the test database whose wakes go to the private node."""
    settings = fast_settings(database_url)
    assert settings.amqp_url == private_broker.url
    instance = await Client.connect(settings=settings)
    yield instance
    await instance.close()


# -- tests --------------------------------------------------------------------------------------


async def test_dropped_wakes_cost_latency_not_runs(
    client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """C4, M5: with every wake unbound and purged, re-polling alone finishes all 200 runs."""
    env = {"BURROW_REPOLL_INTERVAL_SECONDS": "0.5"}
    workers = [worker_process(f"{_prefix()}-drop-{n}", TARGET, **env) for n in (1, 2)]
    await _wait_consuming(2, tmp_path)
    exchange = Topology(prefix=_prefix()).exchange_name
    [workflow_wakes] = _wake_queues([TaskKind.WORKFLOW])
    assert await routed(exchange, workflow_wakes, QUEUE)
    dropper = WakeDropper(_wake_queues(), exchange)
    task = asyncio.create_task(dropper.run())
    try:
        await _eventually(lambda: _true(dropper.rounds >= 1), "wake dropper ran once", tmp_path)
        assert not await routed(exchange, workflow_wakes, QUEUE), "wakes still reach a queue"
        runs = await _start_echoes(client, "drop", 200)
        seconds = await _wait_all_completed(database_url, 200, tmp_path)
    finally:
        dropper.stop.set()
        await task
    print(
        f"200 runs with dropped wakes: {seconds:.2f}s; {dropper.rounds} drop rounds, "
        f"{dropper.purged} wakes purged"
    )
    await _check_runs(runs)
    depths = await inspect_queues(_amqp_url(), _wake_queues())
    assert all(d is not None and d.messages == 0 for d in depths.values()), depths
    _alive(*workers)


async def test_duplicate_wakes_claim_each_task_once(
    database_url: str, worker_process: WorkerFactory, tmp_path: Path
) -> None:
    """C3, D3: every wake published three times; each task is still claimed exactly once."""
    # Long leases: an attempt > 1 may then only come from a duplicate claim, never from a
    # lease that ran out on a loaded machine.
    env = {"BURROW_WAKE_COPIES": "3", "BURROW_LEASE_SECONDS": "30"}
    workers = [worker_process(f"{_prefix()}-dup-{n}", TARGET, **env) for n in (1, 2)]
    await _wait_consuming(2, tmp_path)
    base = fast_settings(database_url)
    settings = base.model_copy(update={"wakes": WakeSettings(prefix=_prefix(), copies=3)})
    client = await Client.connect(settings=settings)
    try:
        runs = await _start_echoes(client, "dup", 50)
        seconds = await _wait_all_completed(database_url, 50, tmp_path)
        print(f"50 runs with tripled wakes: {seconds:.2f}s")
        await _check_runs(runs)
    finally:
        await client.close()
    assert await fetchval(database_url, "SELECT count(*) FROM activity_tasks") == 50
    assert await fetchval(database_url, "SELECT max(attempt) FROM activity_tasks") == 1
    assert await fetchval(database_url, "SELECT count(*) FROM workflow_tasks") == 100
    assert await fetchval(database_url, "SELECT max(attempt) FROM workflow_tasks") == 1
    _alive(*workers)


async def test_broker_restart_mid_run_same_workers_resume(
    private_broker: PrivateRabbit,
    private_client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """C4, broker invariant 5: RabbitMQ stops mid-run; the same workers resume consuming.

    The node stopped is a private one (`private_broker`), never the shared broker: its whole
    server process ends for a few seconds and is always started again in `finally`.
    """
    gate = tmp_path / "gate"
    gate.touch()
    ids = [f"{_prefix()}-restart-{n}" for n in (1, 2)]
    workers = [worker_process(worker_id, TARGET) for worker_id in ids]
    pids = _alive(*workers)
    await _wait_consuming(2, tmp_path)
    runs = await _start_gated(private_client, gate, "before", 50)

    async def activities_running() -> bool:
        leased = "SELECT count(*) FROM activity_tasks WHERE state = 'leased'"
        return bool(await fetchval(database_url, leased) >= 20)

    await _eventually(activities_running, "activities leased before the restart", tmp_path)
    reconnects_before = [_log_count(tmp_path, w, "broker_reconnected") for w in ids]
    outage = time.monotonic()
    try:
        await asyncio.to_thread(private_broker.stop)
        assert not private_broker.is_running()
        gate.unlink()  # activities finish while the broker is down; their wakes are lost
        runs += await _start_gated(private_client, gate, "during", 50)
        await asyncio.sleep(2)
    finally:
        await asyncio.to_thread(private_broker.start)  # returns once it accepts connections
    print(f"broker down for {time.monotonic() - outage:.2f}s")
    depths = await _wait_consuming(2, tmp_path)
    print(f"wake queues after the restart: {depths}")
    runs += await _start_gated(private_client, gate, "after", 20)
    seconds = await _wait_all_completed(database_url, 120, tmp_path)
    print(f"120 runs done {seconds:.2f}s after the broker came back")
    await _check_runs(runs)
    assert _alive(*workers) == pids
    for worker_id, before in zip(ids, reconnects_before, strict=True):
        assert _log_count(tmp_path, worker_id, "broker_reconnected") > before, worker_id
        connections = await _connection_pids(
            f"burrow-worker:{worker_id}", _node_ctl(private_broker)
        )
        assert connections, worker_id


async def test_worker_killed_holding_deliveries_another_finishes(
    client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """M6: kill -9 a worker with full slots and unacked wakes; a second worker finishes all."""
    gate = tmp_path / "gate"
    gate.touch()
    first = worker_process(f"{_prefix()}-kill-a", TARGET, BURROW_CONCURRENCY="2")
    await _wait_consuming(1, tmp_path)
    runs = await _start_gated(client, gate, "kill", 40)

    async def slots_full() -> bool:
        leased = "SELECT count(*) FROM activity_tasks WHERE state = 'leased'"
        scheduled = "SELECT count(*) FROM activity_tasks"
        return bool(
            await fetchval(database_url, leased) == 2
            and await fetchval(database_url, scheduled) >= 10
        )

    await _eventually(slots_full, "first worker's activity slots full", tmp_path)
    depths = await inspect_queues(_amqp_url(), _wake_queues())
    print(f"wake queues before kill -9: {depths}")
    first.send_signal(signal.SIGKILL)
    await asyncio.to_thread(first.wait, 10)
    gate.unlink()
    second = worker_process(f"{_prefix()}-kill-b", TARGET)
    seconds = await _wait_all_completed(database_url, 40, tmp_path)
    print(f"40 runs done {seconds:.2f}s after kill -9")
    await _check_runs(runs)
    retried = await fetchval(database_url, "SELECT count(*) FROM activity_tasks WHERE attempt > 1")
    assert retried >= 2, "the two killed attempts were retried after their leases expired"
    _alive(second)


async def test_consumer_connection_closed_worker_reconnects(
    client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """Broker invariant 5: the broker closes a worker's connection; it reconnects and consumes."""
    worker_id = f"{_prefix()}-cut"
    worker = worker_process(worker_id, TARGET)
    [pid] = _alive(worker)
    await _wait_consuming(1, tmp_path)
    runs = await _start_echoes(client, "pre-cut", 10)
    await _wait_all_completed(database_url, 10, tmp_path)
    [old] = await _connection_pids(f"burrow-worker:{worker_id}")
    await _rabbitmqctl("close_connection", old, "burrow fault test")

    async def reconnected() -> bool:
        pids = await _connection_pids(f"burrow-worker:{worker_id}")
        return bool(pids) and old not in pids

    await _eventually(reconnected, "worker opened a new broker connection", tmp_path)
    await _wait_consuming(1, tmp_path)
    runs += await _start_echoes(client, "post-cut", 20)
    seconds = await _wait_all_completed(database_url, 30, tmp_path)
    print(f"20 runs after the connection cut: {seconds:.2f}s")
    await _check_runs(runs)
    assert _alive(worker) == [pid]
    assert _log_count(tmp_path, worker_id, "broker_reconnected") >= 1


async def test_no_worker_repoll_wakes_still_drive_runs(
    client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """M4c: DW_V2_MATCHING_ROLE_QUEUE_WAKE=0 on the worker; healthy wakes do the work."""
    worker = worker_process(f"{_prefix()}-norepoll", TARGET, DW_V2_MATCHING_ROLE_QUEUE_WAKE="0")
    await _wait_consuming(1, tmp_path)
    runs = await _start_echoes(client, "norepoll", 20)
    seconds = await _wait_all_completed(database_url, 20, tmp_path)
    print(f"20 runs without worker re-poll: {seconds:.2f}s")
    await _check_runs(runs)
    _alive(worker)
