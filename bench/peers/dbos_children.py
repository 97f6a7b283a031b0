"""The DBOS Transact side of `bench/children.py`: a parent workflow fans out to N children.

This file runs under the scratch venv's python (where `dbos` is installed), never under the
project's: it must not import burrow. The database gets its tables from
`bench/peers/dbos_workload.py migrate URL` first.

`run URL --children N [--no-step] --warmup K`: one process launches DBOS (no queue: it runs
only what it starts itself), runs a warm-up parent with K children, prints `ready`, waits for
`go` on stdin, then starts `parent(N, step)` with `DBOS.start_workflow` and waits for its
result. The parent starts each child with `DBOS.start_workflow(child, i)` inside the workflow,
then awaits every handle's `get_result()`. It prints one JSON line of figures, then waits for
`quit` (or end of input) before it closes DBOS, so the driver reads Postgres' counters while
the process is still connected, as the Burrow side's workers are.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from dbos import DBOS, DBOSConfig

APP_NAME = "burrowbench"
APP_VERSION = "bench"


@DBOS.step(name="noop")
def noop(i: int) -> int:
    return i + 1


@DBOS.workflow(name="bench-child")
def child_step(i: int) -> int:
    return noop(i)


@DBOS.workflow(name="bench-child-plain")
def child_plain(i: int) -> int:
    return i + 1


@DBOS.workflow(name="bench-parent")
def parent(n: int, step: bool) -> int:
    child = child_step if step else child_plain
    handles = [DBOS.start_workflow(child, i) for i in range(n)]
    return sum(h.get_result() for h in handles)


def expected(n: int) -> int:
    return n * (n + 1) // 2


def config(url: str) -> DBOSConfig:
    return {
        "name": APP_NAME,
        "system_database_url": url,
        "application_version": APP_VERSION,
        "executor_id": "bench-children",
        "log_level": "WARNING",
    }


def run_parent(n: int, step: bool) -> int:
    result: int = DBOS.start_workflow(parent, n, step).get_result()
    if result != expected(n):
        raise SystemExit(f"parent({n}) returned {result}, expected {expected(n)}")
    return result


def cmd_run(args: argparse.Namespace) -> None:
    DBOS(config=config(args.url))
    DBOS.listen_queues([])  # this process runs only what it starts itself
    DBOS.launch()
    try:
        if args.warmup:
            run_parent(args.warmup, args.step)  # connections, caches, thread pool
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("expected 'go' on stdin")
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        run_parent(args.children, args.step)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        figures = {"wall_seconds": wall, "process_cpu_seconds": cpu}
        print(json.dumps(figures), flush=True)
        sys.stdin.readline()  # "quit", or end of input
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("url")
    run.add_argument("--children", type=int, default=100)
    run.add_argument("--step", action=argparse.BooleanOptionalAction, default=True)
    run.add_argument("--warmup", type=int, default=5, help="children of the warm-up parent")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cmd_run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
