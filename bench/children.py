"""Child workflows: a parent fans out to N children and sums their results, Burrow vs DBOS.

The same shape on both sides: the parent starts its N children one after the other, then
awaits each one's result. Each child awaits one step/activity `noop(i) -> i + 1` (`--no-step`:
it returns `i + 1` itself).

- Burrow: W `python -m burrow worker bench.children_app:app` processes; the bench's client
  starts `Parent` and awaits `result()`. The parent uses `workflow.start_child_workflow`.
- DBOS Transact: one process (`bench/peers/dbos_children.py`, in the scratch venv of
  bench/compare_dbos.py) runs `DBOS.start_workflow(parent, n)`; inside it each child is
  `DBOS.start_workflow(child, i)`, then `handle.get_result()` for each.

Per side and pair: wall time from the parent's start to its result, and Postgres commits per
child (`xact_commit` of the side's database before and after). Sides alternate, the order
reversed on even pairs; the report gives medians and Burrow/DBOS ratios.

Run from the repo root: `python -m bench.children --pairs 3`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE
from bench.children_app import Parent, expected
from bench.compare import csv
from bench.compare_dbos import (
    READY_TIMEOUT,
    add_dbos_arguments,
    check_dbos_url,
    ensure_dbos_venv,
    prepare_dbos_database,
    read_line,
    run_pairs,
)
from bench.server_cpu import Servers, per_workflow, server_ports
from bench.throughput import (
    RESULTS,
    ROOT,
    STATS_SETTLE_SECONDS,
    admin_engine,
    check_bench_url,
    connect_client,
    cpu_seconds,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
    xact_counters,
)
from burrow.client import Client
from burrow.store.engine import async_url

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_children"
DEFAULT_DBOS_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_children_dbos"
PEER = ROOT / "bench" / "peers" / "dbos_children.py"
# A backend that flushed its statistics less than a second ago keeps new counts pending until it
# is next busy or has idled for 10 s (PGSTAT_IDLE_INTERVAL): wait that out on both sides of the
# window, so the warm-up is not counted in it and the run is not left out of it.
FLUSH_SECONDS = 10.5
IDLE_SAMPLE_SECONDS = 3.0
SIDES = ("burrow", "dbos")

Processes = Callable[[], dict[str, float]]


# ---- the window both sides are measured in ----------------------------------------------


async def measure_window(
    args: argparse.Namespace,
    database_url: str,
    go: Callable[[], Awaitable[float]],
    processes: Processes,
) -> dict[str, float]:
    """Run `go` (it returns its wall seconds) between two readings of the database's counters.

    Before the window, the commits of a few idle seconds give the side's background rate
    (worker heartbeats and polls on Burrow's side), so the figures can leave it out.
    """
    url = async_url(database_url)
    name = str(url.database)
    n = args.children
    admin = admin_engine(url)
    try:
        await asyncio.sleep(FLUSH_SECONDS)
        idle = await xact_counters(admin, name)
        await asyncio.sleep(IDLE_SAMPLE_SECONDS - STATS_SETTLE_SECONDS)
        before = await xact_counters(admin, name)
        cpu0, servers0 = processes(), args.servers.cpu()
        wall = await go()
        cpu1, servers = processes(), args.servers.since(servers0)
        await asyncio.sleep(FLUSH_SECONDS)
        after = await xact_counters(admin, name)
    finally:
        await admin.dispose()
    idle_rate = (before[0] - idle[0]) / (before[2] - idle[2])
    commits = after[0] - before[0]
    background = idle_rate * max(0.0, after[2] - before[2] - wall)
    return {
        "wall_seconds": wall,
        "ms_per_child": wall * 1000 / n,
        "commits_per_child": commits / n,
        "commits_per_child_less_background": (commits - background) / n,
        "rollbacks_per_child": (after[1] - before[1]) / n,
        "background_commits_per_second": idle_rate,
        **{f"{k}_cpu_ms_per_child": per_workflow(cpu1[k] - cpu0[k], n) for k in cpu0},
        **{f"{k}_cpu_ms_per_child": per_workflow(v, n) for k, v in servers.items()},
    }


# ---- the Burrow side --------------------------------------------------------------------


def worker_args(args: argparse.Namespace) -> argparse.Namespace:
    """The namespace bench/throughput.py's start_workers() reads."""
    return argparse.Namespace(
        workers=args.workers,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
    )


async def run_parent(client: Client, args: argparse.Namespace, n: int, run_id: str) -> float:
    """Start a parent of n children and await its result: wall seconds."""
    t0 = time.perf_counter()
    handle = await client.start_workflow(
        Parent.run, n, args.step, id=run_id, task_queue=TASK_QUEUE, check_workers=False
    )
    result = await handle.result(timeout=args.timeout)
    wall = time.perf_counter() - t0
    if result != expected(n):
        raise SystemExit(f"Burrow parent {run_id} returned {result}, expected {expected(n)}")
    return wall


async def burrow_side(args: argparse.Namespace, tag: str) -> dict[str, float]:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    await recreate_database(url)
    workers = start_workers(
        worker_args(args),
        plain,
        0,
        env=env,
        log_name=f"children-{tag}",
        app="bench.children_app:app",
    )
    try:
        client = await connect_client(plain, env)
        try:
            engine = create_async_engine(url, poolclass=NullPool)
            async with engine.connect() as conn:
                await wait_registered(conn, workers)
            await engine.dispose()
            if args.warmup:
                await run_parent(client, args, args.warmup, "warmup")

            def processes() -> dict[str, float]:
                return {"worker": cpu_seconds(workers), "client": time.process_time()}

            figures = await measure_window(
                args,
                plain,
                lambda: run_parent(client, args, args.children, "parent"),
                processes,
            )
            figures.update(await workflow_tasks(url, args.children))
        finally:
            await client.close()
    finally:
        codes = stop_workers(workers)
        await delete_wake_topology(prefix)
    return {**figures, "worker_bad_exits": float(sum(1 for c in codes if c != 0))}


WORKFLOW_TASKS = text(
    "SELECT count(*) FILTER (WHERE r.workflow_id = 'parent'),"
    " count(*) FILTER (WHERE r.parent_workflow_id = 'parent')"
    " FROM workflow_tasks t JOIN runs r USING (run_id)"
)


async def workflow_tasks(url: URL, n: int) -> dict[str, float]:
    """Where the commits go: the parent's workflow tasks, and its children's per child."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            parent, children = (await conn.execute(WORKFLOW_TASKS)).one()
    finally:
        await engine.dispose()
    return {"parent_workflow_tasks": float(parent), "workflow_tasks_per_child": children / n}


# ---- the DBOS side ----------------------------------------------------------------------


def dbos_side(args: argparse.Namespace, tag: str) -> dict[str, float]:
    prepare_dbos_database(args)  # empty database, then DBOS's own tables
    RESULTS.mkdir(parents=True, exist_ok=True)
    log_path = RESULTS / f"children-{tag}-dbos.log"
    argv = [str(args.dbos_python), str(PEER), "run", args.dbos_database_url]
    argv += ["--children", str(args.children), "--warmup", str(args.warmup)]
    argv += ["--step" if args.step else "--no-step"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
    what = f"DBOS children process (log {log_path})"
    try:
        if read_line(proc, READY_TIMEOUT, what) != "ready":
            raise SystemExit(f"{what} did not get ready")
        figures = asyncio.run(dbos_window(args, proc, what, log_path))
        if proc.wait(60) != 0:
            raise SystemExit(f"{what} exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return figures


async def dbos_window(
    args: argparse.Namespace, proc: subprocess.Popen[str], what: str, log_path: Path
) -> dict[str, float]:
    """The measured window of a ready DBOS process; it is told to quit afterwards."""
    stdin = proc.stdin
    assert stdin is not None
    peer = [("dbos", proc, log_path)]

    def say(line: str) -> None:
        stdin.write(line + "\n")
        stdin.flush()

    async def go() -> float:
        say("go")
        answer = await asyncio.to_thread(read_line, proc, args.timeout, what)
        wall: float = json.loads(answer)["wall_seconds"]
        return wall

    def processes() -> dict[str, float]:  # one process is both client and worker
        return {"worker": cpu_seconds(peer), "client": 0.0}

    figures = await measure_window(args, args.dbos_database_url, go, processes)
    say("quit")
    return figures


# ---- alternation and report -------------------------------------------------------------


def measure_pair(args: argparse.Namespace, pair: int) -> dict[str, dict[str, float]]:
    """One pair: both sides, Burrow first on odd pairs, DBOS first on even ones."""
    runs = {
        "burrow": lambda: asyncio.run(burrow_side(args, f"p{pair}")),
        "dbos": lambda: dbos_side(args, f"p{pair}"),
    }
    sides = [side for side in SIDES if side in args.sides]
    results: dict[str, dict[str, float]] = {}
    for side in sides if pair % 2 == 1 else reversed(sides):
        results[side] = runs[side]()
        shown = " ".join(f"{key}={value:.2f}" for key, value in results[side].items())
        print(f"pair {pair} {side:6s} {shown}", flush=True)
    return results


RATIOS = ("wall_seconds", "commits_per_child", "commits_per_child_less_background")


def ratios(pair: dict[str, dict[str, float]]) -> dict[str, float]:
    """Burrow over DBOS, per pair: below 1 means Burrow took less (none with one side)."""
    if len(pair) < len(SIDES):
        return {}
    return {f"{key}_burrow_over_dbos": pair["burrow"][key] / pair["dbos"][key] for key in RATIOS}


def summarize(pairs: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    medians = {
        side: {key: statistics.median(p[side][key] for p in pairs) for key in pairs[0][side]}
        for side in pairs[0]
    }
    per_pair = [ratios(p) for p in pairs]
    ratio_medians = {key: statistics.median(r[key] for r in per_pair) for key in per_pair[0]}
    return {"medians": medians, "ratios": per_pair, "ratio_medians": ratio_medians}


def report(summary: dict[str, Any]) -> None:
    print("median over pairs:")
    for side, figures in summary["medians"].items():
        print(f"  {side}:")
        for key, value in figures.items():
            print(f"    {key}: {value:.2f}")
    print("median of per-pair ratios, Burrow / DBOS (< 1: Burrow took less):")
    for key, value in summary["ratio_medians"].items():
        print(f"  {key}: {value:.2f}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.children", description=__doc__)
    parser.add_argument("--pairs", type=int, default=3, help="alternated pairs P")
    parser.add_argument("--children", type=int, default=100, help="N children of the parent")
    parser.add_argument(
        "--step",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each child awaits one noop step/activity (--no-step: it returns i + 1 itself)",
    )
    parser.add_argument("--sides", type=csv(SIDES), default=list(SIDES), help="burrow,dbos")
    parser.add_argument("--warmup", type=int, default=5, help="children of a warm-up parent")
    parser.add_argument("--workers", type=int, default=2, help="Burrow worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="Burrow activity slots")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="Burrow, per worker")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per parent")
    parser.add_argument(
        "--database-url", default=DEFAULT_URL, help="Burrow's; dropped and recreated!"
    )
    add_dbos_arguments(parser, DEFAULT_DBOS_URL)
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    check_bench_url(args.database_url)
    check_dbos_url(args.dbos_database_url)
    quiet_logging()
    if "dbos" in args.sides:
        args.dbos_python = ensure_dbos_venv(args.dbos_venv, args.dbos_version)
    args.servers = Servers(server_ports(args.database_url))
    print(
        f"# children: pairs={args.pairs} children={args.children} step={args.step}"
        f" warmup={args.warmup} sides={','.join(args.sides)} workers={args.workers}"
        f" dbos={args.dbos_version}",
        flush=True,
    )
    return run_pairs(args, measure_pair, summarize, report)


if __name__ == "__main__":
    sys.exit(main())
