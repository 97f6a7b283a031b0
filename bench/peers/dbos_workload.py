"""The DBOS Transact side of `bench/compare.py`: the same one-step workflow, run by DBOS.

This file runs under the scratch venv's python (where `dbos` is installed), never under the
project's: it must not import burrow. `bench/compare.py` drives it through subcommands:

- `migrate URL`: create DBOS's system tables in an existing, empty database.
- `worker URL --executor-id ID`: a queue worker process. It launches DBOS, registers the queue
  (10 ms polling by default), prints `ready` once its queue thread runs, and serves until SIGTERM.
- `batch URL --workflows N`: a DBOSClient process. It prints `ready`, waits for `go` on stdin,
  enqueues N workflows (64 enqueues in flight), polls every 50 ms until all of them finished,
  and prints one JSON line of figures.
- `latency URL --workflows M --mode inprocess|queue`: start -> result one workflow at a time,
  either in this process (`DBOS.start_workflow`, nothing dequeued from the queue) or through the
  queue and a worker process (`DBOSClient.enqueue` + `get_result`). Same ready/go handshake;
  prints one JSON line with every latency in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions

APP_NAME = "burrowbench"
APP_VERSION = "bench"
QUEUE = "bench"
WORKFLOW = "one_activity"
IN_FLIGHT_ENQUEUES = 64
DONE_POLL_SECONDS = 0.05  # as bench/throughput.py polls Burrow's runs table
WARMUP = 20


@DBOS.step(name="noop")
def noop(i: int) -> int:
    return i + 1


@DBOS.workflow(name=WORKFLOW)
def one_activity(i: int) -> int:
    return noop(i)


def config(url: str, executor_id: str) -> DBOSConfig:
    return {
        "name": APP_NAME,
        "system_database_url": url,
        "application_version": APP_VERSION,
        "executor_id": executor_id,
        "log_level": "WARNING",
    }


def client(url: str) -> DBOSClient:
    return DBOSClient(
        system_database_url=url, application_name=APP_NAME, system_database_pool_size=8
    )


def options(workflow_id: str) -> EnqueueOptions:
    return {
        "workflow_name": WORKFLOW,
        "queue_name": QUEUE,
        "workflow_id": workflow_id,
        "app_version": APP_VERSION,
    }


def wait_for_go() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected 'go' on stdin")


def cmd_migrate(args: argparse.Namespace) -> None:
    DBOS.migrate(args.url)


def cmd_worker(args: argparse.Namespace) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    DBOS(config=config(args.url, args.executor_id))
    DBOS.launch()
    DBOS.register_queue(QUEUE, polling_interval_sec=args.poll, on_conflict="always_update")
    # The queue manager looks for new queues once a second: ready when our queue's thread runs.
    while not any(t.name == f"queue-worker-{QUEUE}" for t in threading.enumerate()):
        if stop.wait(0.05):
            break
    print("ready", flush=True)
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)


def done_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM dbos.workflow_status"
                    " WHERE status NOT IN ('PENDING', 'ENQUEUED', 'DELAYED')"
                )
            ).scalar_one()
        )


def batch_latencies(engine: sa.Engine) -> tuple[float, float, int]:
    """(p50, p99) of created -> updated in ms over finished workflows, and how many succeeded."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY updated_at - created_at),"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY updated_at - created_at),"
                " count(*) FILTER (WHERE status = 'SUCCESS')"
                " FROM dbos.workflow_status WHERE status NOT IN ('PENDING', 'ENQUEUED', 'DELAYED')"
            )
        ).one()
    return float(row[0] or 0.0), float(row[1] or 0.0), int(row[2])


def sqlalchemy_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+psycopg://", 1)


def cmd_batch(args: argparse.Namespace) -> None:
    dbos_client = client(args.url)
    engine = sa.create_engine(sqlalchemy_url(args.url), pool_size=1)  # one backend, kept
    n = args.workflows
    try:
        wait_for_go()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=IN_FLIGHT_ENQUEUES)
        enqueues = [pool.submit(dbos_client.enqueue, options(f"bench-{i}"), i) for i in range(n)]
        pool.shutdown(wait=False)
        closed = 0
        while time.perf_counter() - t0 < args.timeout:
            closed = done_count(engine)
            failed = sum(1 for f in enqueues if f.done() and f.exception() is not None)
            if closed >= n - failed and all(f.done() for f in enqueues):
                break
            time.sleep(DONE_POLL_SECONDS)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        failed = sum(1 for f in enqueues if f.done() and f.exception() is not None)
        if failed:
            first = next(f.exception() for f in enqueues if f.done() and f.exception())
            print(f"# {failed} enqueues failed, first: {first!r}", file=sys.stderr)
        p50, p99, completed = batch_latencies(engine)
        figures: dict[str, Any] = {
            "wall_seconds": wall,
            "closed": closed,
            "completed": completed,
            "failed_enqueues": failed,
            "client_cpu_seconds": cpu,
            "start_to_result_p50_ms": p50,
            "start_to_result_p99_ms": p99,
        }
        print(json.dumps(figures), flush=True)
    finally:
        engine.dispose()
        dbos_client.destroy()


def cmd_latency(args: argparse.Namespace) -> None:
    if args.mode == "inprocess":
        DBOS(config=config(args.url, "bench-inprocess"))
        DBOS.listen_queues([])  # this process runs only what it starts itself

        def run(i: int) -> int:
            handle = DBOS.start_workflow(one_activity, i)
            result: int = handle.get_result()
            return result

        DBOS.launch()
        close = DBOS.destroy
    else:
        dbos_client = client(args.url)

        def run(i: int) -> int:
            handle = dbos_client.enqueue(options(f"lat-{i}"), i)
            result: int = handle.get_result(polling_interval_sec=args.result_poll)
            return result

        close = dbos_client.destroy
    try:
        for i in range(WARMUP):  # connections, caches
            assert run(10_000_000 + i) == 10_000_001 + i
        wait_for_go()
        cpu0 = time.process_time()
        latencies = []
        for i in range(args.workflows):
            t0 = time.perf_counter()
            assert run(i) == i + 1
            latencies.append((time.perf_counter() - t0) * 1000)
        figures = {"latencies_ms": latencies, "process_cpu_seconds": time.process_time() - cpu0}
        print(json.dumps(figures), flush=True)
    finally:
        close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    migrate = sub.add_parser("migrate")
    migrate.add_argument("url")
    worker = sub.add_parser("worker")
    worker.add_argument("url")
    worker.add_argument("--executor-id", required=True)
    worker.add_argument("--poll", type=float, default=0.01, help="queue polling seconds")
    batch = sub.add_parser("batch")
    batch.add_argument("url")
    batch.add_argument("--workflows", type=int, default=1000)
    batch.add_argument("--timeout", type=float, default=300.0)
    latency = sub.add_parser("latency")
    latency.add_argument("url")
    latency.add_argument("--workflows", type=int, default=200)
    latency.add_argument("--mode", choices=("inprocess", "queue"), default="inprocess")
    latency.add_argument(
        "--result-poll", type=float, default=0.01, help="get_result polling seconds (queue mode)"
    )
    return parser.parse_args(argv)


COMMANDS = {"migrate": cmd_migrate, "worker": cmd_worker, "batch": cmd_batch}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    COMMANDS.get(args.command, cmd_latency)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
