"""Time to recovery when a RabbitMQ cluster node is lost.

Run as `python -m bench.rabbit_cluster --measure [--stops N --workers W --rate R]`.

A private Postgres and a private three-node cluster (`bench.rabbit_cluster`); W real worker
processes and one client, all given every node's URL, with quorum wake queues by default. The
client starts a one-activity workflow every `1/rate` seconds the whole time. Each round stops
the node everyone is connected to, waits until they all consume on another node, lets traffic
run, and starts the node again (a quorum queue needs a majority). Per stop:

- closed:       from `rabbitmqctl stop` being issued to the node closing the first worker's
                connection (its `broker_connection_lost`): the loss itself, t0 below;
- reconnected:  t0 to the last worker's `broker_reconnected` on another node (aio-pika has
                restored queues and consumers there: wakes flow again);
- first done:   t0 to the completion of the first workflow started after t0;
- latency:      median and worst start-to-completion of the workflows started in the
                `WINDOW` seconds after t0, against the median before the stop.

Every workflow is then checked with `bench.invariants.check` (lost, duplicated, violations).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from bench import app as bench_app
from bench.invariants import Expected, InvariantReport, check
from bench.rabbit_cluster import RabbitCluster, rabbit_cluster
from bench.services import PrivatePostgres, close_postgres, new_private_postgres
from burrow import Client, Settings
from burrow.store import migrate

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "recovery"
MOVE_TIMEOUT = 60.0
WINDOW = 5.0


@dataclass(frozen=True)
class RecoveryOptions:
    stops: int = 5
    workers: int = 2
    rate: float = 20.0
    queue_type: str = "quorum"
    settle_seconds: float = 3.0


@dataclass(frozen=True)
class StopFigures:
    """Seconds from the stop being issued to each recovery mark."""

    node: int
    closed: float
    reconnected: float
    first_done: float
    median_latency: float
    worst_latency: float
    baseline_latency: float


@contextlib.contextmanager
def _postgres() -> Iterator[PrivatePostgres]:
    postgres, root = new_private_postgres()
    try:
        postgres.start()
        asyncio.run(migrate.upgrade(postgres.url(), create_database=True))
        yield postgres
    finally:
        close_postgres(postgres, root)


def _worker_env(
    database_url: str, cluster: RabbitCluster, options: RecoveryOptions
) -> dict[str, str]:
    return {
        **os.environ,
        "BURROW_DATABASE_URL": database_url,
        "BURROW_AMQP_URL": cluster.url_list,
        "BURROW_AMQP_QUEUE_TYPE": options.queue_type,
        "BURROW_AMQP_PREFIX": PREFIX,
        "BURROW_LOG_JSON": "1",
    }


def _spawn_workers(count: int, env: dict[str, str], log_dir: Path) -> list[subprocess.Popen[bytes]]:
    workers = []
    for i in range(count):
        cmd = [sys.executable, "-m", "burrow", "worker", "bench.app:app", "--worker-id", f"w{i}"]
        with (log_dir / f"w{i}.log").open("wb") as log:  # the child keeps its own fd
            workers.append(
                subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
    return workers


def _all_on_one_node(cluster: RabbitCluster, count: int, *, not_on: int | None = None) -> int:
    """Wait until `count` Burrow connections share one running node; its index."""
    deadline = time.monotonic() + MOVE_TIMEOUT
    ports = [node.port for node in cluster.nodes]
    while time.monotonic() < deadline:
        via = next(i for i, node in enumerate(cluster.nodes) if node.is_running())
        with contextlib.suppress(Exception):
            found = set(cluster.connection_ports(via).values())
            names = len(cluster.connection_ports(via))
            if names == count and len(found) == 1:
                index = ports.index(found.pop())
                if index != not_on:
                    return index
        time.sleep(0.2)
    raise RuntimeError(f"the connections did not settle on one node within {MOVE_TIMEOUT}s")


def _firsts(log_dir: Path, event: str, after: float) -> list[float]:
    """Per worker, the first `event` logged at or after `after` (epoch seconds)."""
    firsts: list[float] = []
    for log in sorted(log_dir.glob("w*.log")):
        times = []
        for line in log.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                stamp = json.loads(line)["timestamp"].replace("Z", "+00:00")
                at = datetime.fromisoformat(stamp).timestamp()
                if at >= after:
                    times.append(at)
        firsts.append(min(times) if times else float("nan"))
    return firsts


async def _starter(
    client: Client, started: dict[str, Expected], rate: float, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        n = len(started)
        workflow_id = f"{PREFIX}-{n}"
        await client.start_workflow(
            bench_app.OneActivity.run, n, id=workflow_id, task_queue=bench_app.TASK_QUEUE
        )
        started[workflow_id] = Expected(result=n + 1)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1 / rate)


async def _runs(database_url: str) -> list[tuple[float, float]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT extract(epoch FROM created_at) AS c, extract(epoch FROM closed_at) AS d"
            " FROM runs WHERE closed_at IS NOT NULL ORDER BY created_at"
        )
    finally:
        await conn.close()
    return [(float(r["c"]), float(r["d"])) for r in rows]


def _figures(
    runs: list[tuple[float, float]], node: int, issued: float, log_dir: Path
) -> StopFigures:
    t0 = min(_firsts(log_dir, "broker_connection_lost", issued))
    reconnected = max(_firsts(log_dir, "broker_reconnected", t0)) - t0
    before = [done - made for made, done in runs if made < issued]
    after = [(made, done) for made, done in runs if made >= t0]
    window = [done - made for made, done in after if made < t0 + WINDOW]
    return StopFigures(
        node=node,
        closed=t0 - issued,
        reconnected=reconnected,
        first_done=min(done for _, done in after) - t0,
        median_latency=statistics.median(window),
        worst_latency=max(window),
        baseline_latency=statistics.median(before[-200:]),
    )


async def _stop_nodes(
    cluster: RabbitCluster, database_url: str, options: RecoveryOptions, env: dict[str, str]
) -> tuple[list[tuple[int, float]], InvariantReport]:
    """Stop nodes under load; when each stop was issued, and the store's invariant report."""
    client = await Client.connect(settings=Settings.load(env))
    started: dict[str, Expected] = {}
    stop = asyncio.Event()
    starting = asyncio.create_task(_starter(client, started, options.rate, stop))
    marks: list[tuple[int, float]] = []
    try:
        count = options.workers + 1
        node = await asyncio.to_thread(_all_on_one_node, cluster, count)
        await asyncio.sleep(options.settle_seconds)
        for _ in range(options.stops):
            issued = time.time()
            await asyncio.to_thread(cluster.stop, node)
            marks.append((node, issued))
            lost = node
            node = await asyncio.to_thread(_all_on_one_node, cluster, count, not_on=lost)
            await asyncio.sleep(options.settle_seconds)
            await asyncio.to_thread(cluster.start_node, lost)
            await asyncio.to_thread(cluster.wait_members, len(cluster.nodes))
            await asyncio.sleep(options.settle_seconds)
        stop.set()
        await starting
        deadline = time.monotonic() + 60
        while True:
            report = await check(database_url, started)
            if (report.lost == 0 and report.violations == 0) or time.monotonic() > deadline:
                return marks, report
            await asyncio.sleep(0.5)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await starting
        await client.close()


async def _measure(
    cluster: RabbitCluster, database_url: str, options: RecoveryOptions, log_dir: Path
) -> tuple[list[StopFigures], str]:
    env = _worker_env(database_url, cluster, options)
    workers = _spawn_workers(options.workers, env, log_dir)
    try:
        marks, report = await _stop_nodes(cluster, database_url, options, env)
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=30)
    runs = await _runs(database_url)
    figures = [_figures(runs, node, issued, log_dir) for node, issued in marks]
    verdict = (
        f"{report.workflows} workflows: {report.lost} lost, {report.duplicates} duplicated,"
        f" {report.violations} other violations"
    )
    return figures, verdict


def measure(options: RecoveryOptions) -> int:
    """Run the measurement and print a table and medians; 1 if any work was lost or duplicated."""
    log_dir = Path(tempfile.mkdtemp(prefix="burrow-rabbit-recovery-"))
    with _postgres() as postgres, rabbit_cluster(3) as cluster:
        figures, verdict = asyncio.run(_measure(cluster, postgres.url(), options, log_dir))
    print(
        f"# {options.workers} workers, 1 client starting {options.rate:g} workflows/s,"
        f" {options.queue_type} wake queues, 3 nodes; seconds"
    )
    columns = list(StopFigures.__dataclass_fields__)
    print("  ".join(columns))
    for f in figures:
        cells = [f"{getattr(f, c):>{len(c)}.3f}" for c in columns[1:]]
        print("  ".join([f"{f.node:>4}", *cells]))
    for name in columns[1:]:
        values = [getattr(f, name) for f in figures]
        print(f"median {name}: {statistics.median(values):.3f}s (of {len(values)} stops)")
    print(verdict)
    print(f"# worker logs: {log_dir}")
    return 0 if " 0 lost, 0 duplicated, 0 other" in verdict else 1
