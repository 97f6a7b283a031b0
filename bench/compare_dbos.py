"""The DBOS side of bench/compare.py: its scratch venv, its database, and the peer processes.

DBOS is installed only into a scratch venv outside the repository, and its side runs there
(`bench/peers/dbos_workload.py`), driven through subcommands on stdin and stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from sqlalchemy.engine import URL, make_url

from bench.server_cpu import per_workflow, server_figures
from bench.throughput import RESULTS, ROOT, admin_engine, cpu_seconds, stop_workers
from bench.wake_latency import percentile
from burrow.store.engine import async_url

DBOS_VERSION = "3.4.0"
DEFAULT_DBOS_VENV = Path.home() / ".cache" / "burrow-bench" / "dbos-venv"
DEFAULT_DBOS_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_dbos"
PEER = ROOT / "bench" / "peers" / "dbos_workload.py"
READY_TIMEOUT = 120.0
DBOS_LATENCY_MODES = ("inprocess", "queue")


Worker = tuple[str, Any, Path]  # (id, Popen, log path), as bench/throughput.py keeps them


# ---- the scratch venv -------------------------------------------------------------------


def ensure_dbos_venv(venv: Path, version: str) -> Path:
    """The python of a venv outside the repo with dbos==version, created or reused."""
    venv = venv.expanduser().resolve()
    if venv.is_relative_to(ROOT):
        raise SystemExit(f"--dbos-venv {venv} is inside the repository; put it elsewhere")
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"# creating scratch venv {venv}", flush=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if installed_dbos(python) != version:
        print(f"# installing dbos=={version} into {venv}", flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"dbos=={version}"],
            check=True,
        )
    found = installed_dbos(python)
    if found != version:
        raise SystemExit(f"dbos {version} not importable from {python} (found {found})")
    return python


def installed_dbos(python: Path) -> str | None:
    probe = "import importlib.metadata as m; import dbos; print(m.version('dbos'))"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


# ---- databases --------------------------------------------------------------------------


def check_dbos_url(database_url: str) -> str:
    url = make_url(database_url)
    if url.database in (None, "burrow", "postgres", "template0", "template1"):
        raise SystemExit(f"refusing to drop database {url.database!r}; use a bench database")
    return database_url


def quoted_name(url: URL) -> str:
    return '"' + str(url.database).replace('"', '""') + '"'


async def recreate_empty_database(database_url: str) -> None:
    url = async_url(database_url)
    admin = admin_engine(url)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted_name(url)} WITH (FORCE)")
            await conn.exec_driver_sql(f"CREATE DATABASE {quoted_name(url)}")
    finally:
        await admin.dispose()


async def drop_database(database_url: str) -> None:
    url = async_url(database_url)
    admin = admin_engine(url)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quoted_name(url)} WITH (FORCE)")
    finally:
        await admin.dispose()


# ---- talking to the DBOS side -----------------------------------------------------------


def read_line(proc: subprocess.Popen[str], timeout: float, what: str) -> str:
    """The next stdout line of `proc`; SystemExit if it exits or stays silent for `timeout`."""
    stdout = proc.stdout
    assert stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.1)
        if ready:
            line = stdout.readline()
            if not line:
                raise SystemExit(f"{what} exited {proc.wait()} without answering")
            return line.strip()
    raise SystemExit(f"{what} did not answer within {timeout:.0f} s")


def peer(python: Path, *argv: str, log: IO[bytes], stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(python), str(PEER), *argv],
        cwd=ROOT,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )


def start_dbos_workers(args: argparse.Namespace, count: int, tag: str) -> list[Worker]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    workers: list[Worker] = []
    for i in range(count):
        worker_id = f"dbos-w{i}"
        log_path = RESULTS / f"compare-{tag}-{worker_id}.log"
        with log_path.open("wb") as log:
            argv = ("worker", args.dbos_database_url, "--executor-id", worker_id)
            proc = peer(args.dbos_python, *argv, "--poll", str(args.dbos_poll), log=log)
        workers.append((worker_id, proc, log_path))
    try:
        for worker_id, proc, log_path in workers:
            what = f"DBOS worker {worker_id} (log {log_path})"
            if read_line(proc, READY_TIMEOUT, what) != "ready":
                raise SystemExit(f"{what} did not get ready")
    except BaseException:
        stop_workers(workers)
        raise
    return workers


def prepare_dbos_database(args: argparse.Namespace) -> None:
    asyncio.run(recreate_empty_database(args.dbos_database_url))
    subprocess.run(
        [str(args.dbos_python), str(PEER), "migrate", args.dbos_database_url],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )


def run_dbos_client(
    args: argparse.Namespace, argv: Sequence[str], workers: list[Worker], tag: str
) -> tuple[dict[str, Any], float, dict[str, float]]:
    """Run a batch/latency client: (its JSON figures, workers' CPU s, servers' CPU s)."""
    log_path = RESULTS / f"compare-{tag}-dbos-client.log"
    with log_path.open("wb") as log:
        proc = peer(args.dbos_python, *argv, log=log, stdin=True)
    try:
        what = f"DBOS client (log {log_path})"
        if read_line(proc, READY_TIMEOUT, what) != "ready":
            raise SystemExit(f"DBOS client did not get ready; see {log_path}")
        cpu0, servers0 = cpu_seconds(workers), args.servers.cpu()
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        answer = read_line(proc, args.timeout + 30, what)
        cpu1, servers = cpu_seconds(workers), args.servers.since(servers0)
        if proc.wait(timeout=60) != 0:
            raise SystemExit(f"DBOS client exited {proc.returncode}; see {log_path}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    figures: dict[str, Any] = json.loads(answer)
    return figures, cpu1 - cpu0, servers


def dbos_batch(args: argparse.Namespace, tag: str) -> dict[str, float]:
    prepare_dbos_database(args)
    workers = start_dbos_workers(args, args.workers, tag)
    try:
        argv = ("batch", args.dbos_database_url, "--workflows", str(args.workflows))
        figures, worker_cpu, servers = run_dbos_client(
            args, (*argv, "--timeout", str(args.timeout)), workers, tag
        )
    finally:
        codes = stop_workers(workers)
    n = args.workflows
    return {
        "completed": float(figures["completed"]),
        "wall_seconds": figures["wall_seconds"],
        "workflows_per_second": figures["closed"] / figures["wall_seconds"],
        "start_to_result_p50_ms": figures["start_to_result_p50_ms"],
        "start_to_result_p99_ms": figures["start_to_result_p99_ms"],
        "worker_cpu_ms_per_workflow": per_workflow(worker_cpu, n),
        "client_cpu_ms_per_workflow": per_workflow(figures["client_cpu_seconds"], n),
        **server_figures(servers, n),
        "worker_bad_exits": float(sum(1 for c in codes if c != 0)),
    }


def dbos_latency(args: argparse.Namespace, mode: str, tag: str) -> dict[str, float]:
    prepare_dbos_database(args)
    workers = start_dbos_workers(args, 1, tag) if mode == "queue" else []
    n = args.latency_workflows
    argv = ["latency", args.dbos_database_url, "--workflows", str(n), "--mode", mode]
    argv += ["--result-poll", str(args.dbos_result_poll)]
    try:
        figures, worker_cpu, servers = run_dbos_client(args, argv, workers, tag)
    finally:
        stop_workers(workers)
    latencies = figures["latencies_ms"]
    client_cpu = figures["process_cpu_seconds"]
    if mode == "inprocess":  # the client process is the worker
        worker_cpu, client_cpu = client_cpu, 0.0
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
        "worker_cpu_ms_per_workflow": per_workflow(worker_cpu, n),
        "client_cpu_ms_per_workflow": per_workflow(client_cpu, n),
        **server_figures(servers, n),
    }


Pair = dict[str, dict[str, float]]


def run_pairs(
    args: argparse.Namespace,
    measure_pair: Callable[[argparse.Namespace, int], Pair],
    summarize: Callable[[list[Pair]], dict[str, Any]],
    report: Callable[[dict[str, Any]], None],
) -> int:
    """Measure `args.pairs` alternated pairs, drop both databases, report, write `--json`."""
    pairs = []
    try:
        for pair in range(1, args.pairs + 1):
            pairs.append(measure_pair(args, pair))
    finally:
        asyncio.run(drop_database(args.dbos_database_url))
        asyncio.run(drop_database(args.database_url))
    summary = summarize(pairs)
    report(summary)
    if args.json is not None:
        parameters = {k: v for k, v in vars(args).items() if k not in ("dbos_python", "servers")}
        document = {"parameters": parameters, "pairs": pairs, **summary}
        args.json.write_text(json.dumps(document, indent=2, default=str))
    return 0


def add_dbos_arguments(parser: argparse.ArgumentParser, default_url: str) -> None:
    """The DBOS side's options: its database (`default_url`), scratch venv and version pin."""
    parser.add_argument(
        "--dbos-database-url", default=default_url, help="DBOS's; dropped and recreated!"
    )
    parser.add_argument(
        "--dbos-venv",
        type=Path,
        default=DEFAULT_DBOS_VENV,
        help="scratch venv for DBOS, outside the repo: created or reused",
    )
    parser.add_argument("--dbos-version", default=DBOS_VERSION, help="pip pin for dbos")
