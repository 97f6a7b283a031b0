"""A clustered RabbitMQ loses nodes under load: no work lost, none duplicated (C1-C4, M5, M6).

A private three-node cluster (bench/rabbit_cluster.py) with quorum wake queues; real worker
processes and a client that starts workflows the whole time, all given every node's URL. The
node holding the most workers is stopped; they move to a surviving node, where the shared queues
live on and wakes flow again. The stopped node is started again (a quorum queue needs a
majority), and then the node now holding the most workers is stopped as well. Every workflow
started completes exactly once, as the store's invariants show (bench/invariants.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bench.invariants import Expected, InvariantReport, check
from bench.rabbit_cluster import RabbitCluster
from burrow import Client
from burrow.broker.inspect import inspect_queues
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from tests.acceptance.conftest import WorkerFactory, fast_settings, log_tail
from tests.apps import broker_flows
from tests.support.private_rabbit import started_rabbit_cluster

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

TARGET = "tests.apps.broker_flows:app"
QUEUE = broker_flows.TASK_QUEUE
WORKERS = 2
START_EVERY_SECONDS = 0.05
MOVE_TIMEOUT = 30.0
DONE_TIMEOUT = 60.0


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, _clean_environment: None) -> Iterator[RabbitCluster]:
    """A started cluster; workers and clients get all its nodes and quorum wake queues."""
    with started_rabbit_cluster(3) as started:
        monkeypatch.setenv("BURROW_AMQP_URL", started.url_list)
        monkeypatch.setenv("BURROW_AMQP_QUEUE_TYPE", "quorum")
        # Sticky on: each worker's sticky queue must be declared anew on every node it moves to.
        monkeypatch.setenv("BURROW_STICKY_CACHE_CAPACITY", "100")
        yield started


@pytest.fixture
async def cluster_client(cluster: RabbitCluster, database_url: str) -> AsyncIterator[Client]:
    settings = fast_settings(database_url)
    assert settings.amqp_urls == tuple(cluster.urls) and settings.wakes.queue_type == "quorum"
    client = await Client.connect(settings=settings)
    yield client
    await client.close()


class Starter:
    """Starts an EchoFlow every few milliseconds until stopped; remembers what it started."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.started: dict[str, Expected] = {}
        self.stopped = asyncio.Event()

    async def run(self) -> None:
        prefix = os.environ["BURROW_AMQP_PREFIX"]
        while not self.stopped.is_set():
            value = f"{prefix}-{len(self.started)}"
            await self.client.start_workflow(
                broker_flows.EchoFlow, value, id=value, task_queue=QUEUE
            )
            self.started[value] = Expected(result=f"echo:{value}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopped.wait(), START_EVERY_SECONDS)

    async def one_completes(self, label: str) -> float:
        """Seconds until a workflow started now completes."""
        began = time.monotonic()
        handle = await self.client.start_workflow(
            broker_flows.EchoFlow, label, id=label, task_queue=QUEUE
        )
        self.started[label] = Expected(result=f"echo:{label}")
        assert await handle.result(timeout=MOVE_TIMEOUT) == f"echo:{label}"
        return time.monotonic() - began


def _wake_queues() -> list[str]:
    topology = Topology(prefix=os.environ["BURROW_AMQP_PREFIX"], queue_type="quorum")
    return [
        topology.queue_name(namespace="default", connection="default", queue=QUEUE, kind=kind)
        for kind in (TaskKind.WORKFLOW, TaskKind.ACTIVITY)
    ]


async def _settled(
    cluster: RabbitCluster, via: int, count: int, tmp_path: Path, *, off: int | None = None
) -> dict[str, int]:
    """Wait until `count` Burrow connections are up, none on node `off`, and both wake queues
    have every worker consuming; return each connection's node port.

    Which surviving node a connection lands on is the client's business (a node still settling
    may refuse it and the next URL is tried), so any running node will do.
    """
    gone = None if off is None else cluster.nodes[off].port
    deadline = time.monotonic() + MOVE_TIMEOUT
    while True:
        ports = await asyncio.to_thread(cluster.connection_ports, via)
        depths = await inspect_queues(cluster.urls[via], _wake_queues())
        consuming = all(d is not None and d.consumers == WORKERS for d in depths.values())
        if consuming and len(ports) == count and gone not in ports.values():
            return ports
        if time.monotonic() >= deadline:
            raise AssertionError(f"not settled off {gone}: {ports} {depths}\n" + log_tail(tmp_path))
        await asyncio.sleep(0.2)


def _busiest(cluster: RabbitCluster, ports: dict[str, int]) -> int:
    """The index of the node holding the most worker connections."""
    held = [
        sum(1 for name, port in ports.items() if port == node.port and "worker" in name)
        for node in cluster.nodes
    ]
    return held.index(max(held))


async def test_losing_two_nodes_in_turn_loses_and_duplicates_no_work(
    cluster: RabbitCluster,
    cluster_client: Client,
    worker_process: WorkerFactory,
    database_url: str,
    tmp_path: Path,
) -> None:
    """C1-C4, M5, M6: workers and clients follow the wake path from node to node.

    Nodes are stopped one at a time and the first comes back before the second goes: a quorum
    queue needs a majority of its three replicas. Each time, the node stopped is the one holding
    the most workers, so every stop moves at least one worker.
    """
    began = time.monotonic()
    ids = [f"{os.environ['BURROW_AMQP_PREFIX']}-w{n}" for n in range(WORKERS)]
    workers = [worker_process(worker_id, TARGET) for worker_id in ids]
    connections = WORKERS + 1  # and the client
    ports = await _settled(cluster, 0, connections, tmp_path)
    moves = dict.fromkeys(ids, 0)
    starter = Starter(cluster_client)
    starting = asyncio.create_task(starter.run())
    try:
        await starter.one_completes("warm-up")

        print(f"workers consuming after {time.monotonic() - began:.1f}s: {ports}")
        for _ in range(2):
            if not cluster.nodes[0].is_running():
                began = time.monotonic()
                await asyncio.to_thread(cluster.start_node, 0)
                await asyncio.to_thread(cluster.wait_members, 3)
                print(f"node 0 back in {time.monotonic() - began:.1f}s")
            lost = _busiest(cluster, ports)
            for worker_id in ids:
                moves[worker_id] += ports[f"burrow-worker:{worker_id}"] == cluster.nodes[lost].port
            via = next(n for n in range(len(cluster.nodes)) if n != lost)
            began = time.monotonic()
            await asyncio.to_thread(cluster.stop, lost)
            stopped = time.monotonic()
            ports = await _settled(cluster, via, connections, tmp_path, off=lost)
            moved = time.monotonic()
            completed = await starter.one_completes(f"after-stop-{lost}")
            print(
                f"node {lost} stopped in {stopped - began:.1f}s; settled on {ports}"
                f" {moved - stopped:.1f}s later; a new workflow took {completed:.2f}s"
            )
    finally:
        starter.stopped.set()
        await starting

    report = await _all_done(database_url, starter.started, tmp_path)
    assert report.runs == len(starter.started) > 20
    for proc in workers:
        assert proc.poll() is None, log_tail(tmp_path)
    assert sum(moves.values()) >= 2
    for worker_id in ids:
        log = (tmp_path / f"{worker_id}.log").read_text(errors="replace")
        assert log.count('"broker_reconnected"') >= moves[worker_id], worker_id
        assert "guest:guest@" not in log  # node URLs are logged without their password


async def _all_done(
    database_url: str, expected: dict[str, Expected], tmp_path: Path
) -> InvariantReport:
    deadline = time.monotonic() + DONE_TIMEOUT
    while True:
        report = await check(database_url, expected)
        if report.lost == 0 and report.duplicates == 0 and report.violations == 0:
            return report
        if time.monotonic() >= deadline:
            raise AssertionError("\n".join(report.lines()) + "\n" + log_tail(tmp_path))
        await asyncio.sleep(0.5)
