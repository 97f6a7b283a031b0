"""Burrow vs DBOS Transact on the same workload, alternated in one invocation (issue 12).

The workflow is the same on both sides: one step/activity `noop(i) -> i + 1`, whose result the
workflow returns. Two workloads, each measured once per pair on each side, the order of the
two sides reversed on even pairs:

- batch: a closed batch of N workflows through W worker processes, wall time from the first
  start to the last result (`python -m burrow worker bench.app:app` for Burrow; DBOS queue
  workers polling their queue every 10 ms, fed by a `DBOSClient`).
- latency: start -> result of M workflows, one at a time (Burrow: one worker process, result
  wakes; DBOS: in-process `DBOS.start_workflow`, and through the queue and one worker).

DBOS is installed only into a scratch venv outside the repository (`--dbos-venv`), and its
side runs there (`bench/peers/dbos_workload.py`): never into the project's environment.

Run from the repo root: `python -m bench.compare --pairs 3`. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.result_latency import one_mode
from bench.throughput import (
    RESULTS,
    ROOT,
    admin_engine,
    check_bench_url,
    connect_client,
    cpu_seconds,
    delete_wake_topology,
    env_settings,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_all,
    start_workers,
    stop_workers,
    wait_closed,
    wait_registered,
    wake_env,
)
from bench.wake_latency import percentile
from burrow.store.engine import async_url

DBOS_VERSION = "3.4.0"
DEFAULT_DBOS_VENV = Path.home() / ".cache" / "burrow-bench" / "dbos-venv"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_compare"
DEFAULT_DBOS_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_dbos"
PEER = ROOT / "bench" / "peers" / "dbos_workload.py"
LATENCY_WARMUP = 20
READY_TIMEOUT = 120.0
DBOS_LATENCY_MODES = ("inprocess", "queue")
WORKLOADS = ("batch", "latency")

Worker = tuple[str, Any, Path]  # (id, Popen, log path), as bench/throughput.py keeps them


# ---- server CPU -------------------------------------------------------------------------


def listening_pid(port: int) -> int | None:
    """The process holding the listening TCP socket on `port` (Linux /proc; None if unseen)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return None


def stat_fields(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` with its reaped children, plus its live children.

    A backend that exits in the window moves from "live child" to the parent's cutime, so
    nothing is lost as long as the parent reaps it (Postgres' postmaster does).
    """
    fields = stat_fields(root)
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(root):
            continue
        try:
            child = stat_fields(proc.name)
        except OSError:
            continue
        if int(child[1]) == root:
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Servers:
    """CPU of exactly the Postgres and RabbitMQ servers the bench talks to.

    Found by the port each listens on, so other servers on the machine (throwaway test
    instances, say) do not count. A server that restarts mid-window reads as NaN.
    """

    def __init__(self, ports: dict[str, int]) -> None:
        self.roots = {name: listening_pid(port) for name, port in ports.items()}

    def cpu(self) -> dict[str, float]:
        out = {}
        for name, root in self.roots.items():
            try:
                out[name] = math.nan if root is None else tree_cpu(root)
            except OSError:
                out[name] = math.nan
        return out

    def since(self, before: dict[str, float]) -> dict[str, float]:
        after = self.cpu()
        return {name: after[name] - before[name] for name in after}


def server_ports(database_url: str) -> dict[str, int]:
    amqp = urlsplit(env_settings().amqp_url)
    return {
        "postgres": make_url(database_url).port or 5432,
        "broker": amqp.port or 5672,
    }


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


def per_workflow(seconds: float, n: int) -> float:
    return seconds * 1000 / n


def server_figures(servers: dict[str, float], n: int) -> dict[str, float]:
    return {f"{name}_cpu_ms_per_workflow": per_workflow(servers[name], n) for name in servers}


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


# ---- the Burrow side --------------------------------------------------------------------


def burrow_args(args: argparse.Namespace, workers: int) -> argparse.Namespace:
    """The namespace bench/throughput.py's start_workers() reads."""
    return argparse.Namespace(
        workflows=args.workflows,
        workers=workers,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
        timeout=args.timeout,
        prefix=None,
        no_wakes=False,
        sticky_cache_capacity=None,
    )


async def burrow_batch_async(args: argparse.Namespace, tag: str) -> dict[str, float]:
    """A closed batch as bench/throughput.py runs it, with this bench's CPU accounting."""
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    n = args.workflows
    await recreate_database(url)
    engine = create_async_engine(url, poolclass=NullPool)
    workers = start_workers(
        burrow_args(args, args.workers), plain, 0, env=env, log_name=f"compare-{tag}"
    )
    try:
        client = await connect_client(plain, env)
        try:
            async with engine.connect() as conn:
                await wait_registered(conn, workers)
                cpu0, servers0 = cpu_seconds(workers), args.servers.cpu()
                client0 = time.process_time()
                starts = asyncio.create_task(start_all(client, n))
                closed, _, wall = await wait_closed(conn, starts, n, args.timeout)
                cpu1, servers = cpu_seconds(workers), args.servers.since(servers0)
                client1 = time.process_time()
                row = (await conn.execute(text(BURROW_BATCH_STATS))).one()
                await conn.commit()
        finally:
            await client.close()
    finally:
        codes = stop_workers(workers)
        await engine.dispose()
        await delete_wake_topology(prefix)
    return {
        "completed": float(row[2]),
        "wall_seconds": wall,
        "workflows_per_second": closed / wall,
        "start_to_result_p50_ms": float(row[0] or 0.0),
        "start_to_result_p99_ms": float(row[1] or 0.0),
        "worker_cpu_ms_per_workflow": per_workflow(cpu1 - cpu0, n),
        "client_cpu_ms_per_workflow": per_workflow(client1 - client0, n),
        **server_figures(servers, n),
        "worker_bad_exits": float(sum(1 for c in codes if c != 0)),
    }


BURROW_BATCH_STATS = (
    "WITH l AS (SELECT extract(epoch FROM closed_at - created_at) * 1000 AS ms"
    " FROM runs WHERE closed_at IS NOT NULL)"
    " SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
    " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),"
    " (SELECT count(*) FROM runs WHERE status = 'completed') FROM l"
)


async def burrow_latency_async(args: argparse.Namespace, tag: str) -> dict[str, float]:
    url = check_bench_url(args.database_url)
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = wake_env(prefix, wakes=True)
    n = args.latency_workflows
    await recreate_database(url)
    workers = start_workers(burrow_args(args, 1), plain, 0, env=env, log_name=f"compare-{tag}")
    try:
        client = await connect_client(plain, env)
        try:
            engine = create_async_engine(url, poolclass=NullPool)
            async with engine.connect() as conn:
                await wait_registered(conn, workers)
            await engine.dispose()
            await one_mode(client, LATENCY_WARMUP, 10_000_000)  # connections, caches
            cpu0, servers0 = cpu_seconds(workers), args.servers.cpu()
            client0 = time.process_time()
            latencies = await one_mode(client, n, 0)
            cpu1, servers = cpu_seconds(workers), args.servers.since(servers0)
            client1 = time.process_time()
        finally:
            await client.close()
    finally:
        stop_workers(workers)
        await delete_wake_topology(prefix)
    return {
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
        "worker_cpu_ms_per_workflow": per_workflow(cpu1 - cpu0, n),
        "client_cpu_ms_per_workflow": per_workflow(client1 - client0, n),
        **server_figures(servers, n),
    }


# ---- alternation and report -------------------------------------------------------------


def show(pair: int, side: str, figures: dict[str, float]) -> None:
    shown = " ".join(f"{key}={value:.2f}" for key, value in figures.items())
    print(f"pair {pair} {side:24s} {shown}", flush=True)


def measure_pair(args: argparse.Namespace, pair: int) -> dict[str, dict[str, float]]:
    """One pair: every workload on both sides, Burrow first on odd pairs, DBOS first on even."""
    results: dict[str, dict[str, float]] = {}
    burrow_first = pair % 2 == 1
    for workload in args.workloads:
        sides: list[tuple[str, Any]]
        if workload == "batch":
            sides = [
                ("burrow batch", lambda: asyncio.run(burrow_batch_async(args, f"p{pair}-batch"))),
                ("dbos batch", lambda: dbos_batch(args, f"p{pair}-batch")),
            ]
        else:
            dbos_sides = [
                (f"dbos latency {mode}", lambda m=mode: dbos_latency(args, m, f"p{pair}-lat-{m}"))
                for mode in args.dbos_latency_modes
            ]
            burrow_side = (
                "burrow latency",
                lambda: asyncio.run(burrow_latency_async(args, f"p{pair}-latency")),
            )
            sides = [burrow_side, *dbos_sides]
        for side, run in sides if burrow_first else reversed(sides):
            results[side] = run()
            show(pair, side, results[side])
    return results


def ratios(pair: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per-pair ratios, each written so that > 1 means Burrow is better."""
    out: dict[str, float] = {}
    if "burrow batch" in pair:
        burrow, dbos = pair["burrow batch"], pair["dbos batch"]
        out["batch_throughput_burrow_over_dbos"] = (
            burrow["workflows_per_second"] / dbos["workflows_per_second"]
        )
    if "burrow latency" in pair:
        burrow = pair["burrow latency"]
        for side, figures in pair.items():
            if side.startswith("dbos latency "):
                mode = side.removeprefix("dbos latency ")
                for q in ("p50", "p99"):
                    out[f"latency_{q}_dbos_{mode}_over_burrow"] = (
                        figures[f"{q}_ms"] / burrow[f"{q}_ms"]
                    )
    return out


def summarize(pairs: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    medians = {
        side: {key: statistics.median(p[side][key] for p in pairs) for key in pairs[0][side]}
        for side in pairs[0]
    }
    per_pair = [ratios(p) for p in pairs]
    ratio_medians = {key: statistics.median(r[key] for r in per_pair) for key in per_pair[0]}
    return {"medians": medians, "ratios": per_pair, "ratio_medians": ratio_medians}


def targets(summary: dict[str, Any]) -> list[tuple[str, float, bool]]:
    """Issue 12's targets, checked on the medians: (what, figure, met)."""
    out = []
    latency = summary["medians"].get("burrow latency")
    if latency is not None:
        out.append(
            ("burrow start->result p50 <= 10 ms", latency["p50_ms"], latency["p50_ms"] <= 10)
        )
        out.append(
            ("burrow start->result p99 <= 30 ms", latency["p99_ms"], latency["p99_ms"] <= 30)
        )
    ratio = summary["ratio_medians"].get("batch_throughput_burrow_over_dbos")
    if ratio is not None:
        out.append(("batch throughput >= 1.5x DBOS queue mode", ratio, ratio >= 1.5))
    return out


def report(summary: dict[str, Any]) -> None:
    print("median over pairs:")
    for side, figures in summary["medians"].items():
        print(f"  {side}:")
        for key, value in figures.items():
            print(f"    {key}: {value:.2f}")
    print("median of per-pair ratios (> 1: Burrow better):")
    for key, value in summary["ratio_medians"].items():
        print(f"  {key}: {value:.2f}")
    print("cpu ms per workflow (median; worker + client + postgres + broker):")
    for side, figures in summary["medians"].items():
        parts = [
            figures["worker_cpu_ms_per_workflow"],
            figures["client_cpu_ms_per_workflow"],
            figures["postgres_cpu_ms_per_workflow"],
            figures["broker_cpu_ms_per_workflow"],
        ]
        split = " + ".join(f"{part:.2f}" for part in parts)
        print(f"  {side}: {split} = {sum(parts):.2f}")
    print("targets:")
    for what, value, met in targets(summary):
        print(f"  {what}: {value:.2f} {'met' if met else 'NOT met'}")


def csv(choices: Sequence[str]) -> Any:
    def parse(value: str) -> list[str]:
        items = [item.strip() for item in value.split(",") if item.strip()]
        bad = [item for item in items if item not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return items

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--pairs", type=int, default=3, help="alternated pairs P")
    parser.add_argument("--workflows", type=int, default=1000, help="N workflows per batch")
    parser.add_argument("--workers", type=int, default=2, help="worker processes per batch")
    parser.add_argument("--latency-workflows", type=int, default=200, help="M, one at a time")
    parser.add_argument(
        "--workloads", type=csv(WORKLOADS), default=list(WORKLOADS), help="batch,latency"
    )
    parser.add_argument(
        "--dbos-latency-modes",
        type=csv(DBOS_LATENCY_MODES),
        default=list(DBOS_LATENCY_MODES),
        help="inprocess,queue",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="Burrow activity slots")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="Burrow, per worker")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per batch")
    parser.add_argument(
        "--database-url", default=DEFAULT_URL, help="Burrow's; dropped and recreated!"
    )
    parser.add_argument(
        "--dbos-database-url", default=DEFAULT_DBOS_URL, help="DBOS's; dropped and recreated!"
    )
    parser.add_argument(
        "--dbos-venv",
        type=Path,
        default=DEFAULT_DBOS_VENV,
        help="scratch venv for DBOS, outside the repo: created or reused",
    )
    parser.add_argument("--dbos-version", default=DBOS_VERSION, help="pip pin for dbos")
    parser.add_argument("--dbos-poll", type=float, default=0.01, help="DBOS queue polling s")
    parser.add_argument(
        "--dbos-result-poll",
        type=float,
        default=0.01,
        help="DBOS get_result polling s (latency through the queue)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    check_bench_url(args.database_url)
    check_dbos_url(args.dbos_database_url)
    quiet_logging()
    args.dbos_python = ensure_dbos_venv(args.dbos_venv, args.dbos_version)
    args.servers = Servers(server_ports(args.database_url))
    print(
        f"# compare: pairs={args.pairs} workloads={','.join(args.workloads)}"
        f" workflows={args.workflows} workers={args.workers}"
        f" latency_workflows={args.latency_workflows}"
        f" dbos={args.dbos_version} dbos_poll={args.dbos_poll}s"
        f" dbos_latency_modes={','.join(args.dbos_latency_modes)}",
        flush=True,
    )
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


if __name__ == "__main__":
    sys.exit(main())
