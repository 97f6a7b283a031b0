"""SDK workers through `burrow server` against Burrow-native AMQP workers, same workload.

Both sides run `OneActivity` (one `noop` activity) with one worker process on a fresh database:

- `native`: a `burrow worker` process woken by RabbitMQ, started by a native `Client`.
- `sdk`: a `burrow server` process and an unmodified `durable-workflow` SDK worker process
  (`bench/peers/sdk_worker.py`) long-polling it over HTTP; the SDK's own `Client` starts the
  workflows through the server's control plane.

Per side it measures a closed batch (N workflows started at once, 64 starts in flight, until all
closed: workflows per second) and a sparse phase (M workflows one at a time): poll-to-claim
latency from the database clock (`claimed_at - created_at` of workflow tasks,
`claimed_at - scheduled_at` of activity tasks) and start-to-result. CPU per workflow covers the
worker process, plus the server process on the SDK side. Sides alternate in pairs.

Run from the repo root: `python -m bench.server_vs_native --workflows 300 --pairs 3`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from durable_workflow import Client as SdkClient
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, OneActivity
from bench.services import free_port
from bench.throughput import (
    MAX_IN_FLIGHT_STARTS,
    RESULTS,
    ROOT,
    _proc_cpu,
    check_bench_url,
    connect_client,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    wake_env,
)
from bench.wake_latency import percentile

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_server"
SIDES = ("native", "sdk")
TOKEN = "bench-token"
SDK_QUEUE = "bench-sdk"
START_TIMEOUT_SECONDS = 60.0
Starter = Callable[[int], Awaitable[None]]


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _wait_registered(url: URL, procs: Sequence[subprocess.Popen[bytes]]) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    query = text("SELECT count(*) FROM worker_registrations WHERE state = 'active'")
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    try:
        async with engine.connect() as conn:
            while (await conn.execute(query)).scalar_one() < 1:
                if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                    raise SystemExit(f"a process exited or no worker registered; see {RESULTS}")
                await asyncio.sleep(0.1)
    finally:
        await engine.dispose()


async def _wait_server(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    async with httpx.AsyncClient() as http:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"burrow server did not start; see {RESULTS}")
            try:
                await http.get(f"{base}/api/health")
                return
            except httpx.TransportError:
                await asyncio.sleep(0.1)


async def _batch(url: URL, start: Starter, n: int, timeout: float) -> tuple[float, float]:
    """(seconds from the first start to the last close, completed runs), from the database."""
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)

    async def one(i: int) -> None:
        async with gate:
            await start(i)

    starts = asyncio.gather(*(one(i) for i in range(n)))
    engine = create_async_engine(url, poolclass=NullPool)
    done = text("SELECT count(*) FROM runs WHERE status <> 'running'")
    deadline = time.monotonic() + timeout
    try:
        async with engine.connect() as conn:
            while (await conn.execute(done)).scalar_one() < n:
                if time.monotonic() > deadline:
                    raise SystemExit(f"batch did not finish in {timeout} s")
                await asyncio.sleep(0.05)
            await starts
            row = (
                await conn.execute(
                    text(
                        "SELECT extract(epoch FROM max(closed_at) - min(created_at)),"
                        " count(*) FILTER (WHERE status = 'completed') FROM runs"
                    )
                )
            ).one()
    finally:
        await engine.dispose()
    return float(row[0]), float(row[1])


async def _claim_latencies(url: URL, since_ids: Sequence[str]) -> dict[str, list[float]]:
    """Workflow- and activity-task poll-to-claim milliseconds of these workflow ids' runs."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            wf = await conn.execute(
                text(
                    "SELECT 1000 * extract(epoch FROM w.claimed_at - w.created_at) FROM"
                    " workflow_tasks w JOIN runs r USING (run_id) WHERE r.workflow_id = ANY(:ids)"
                    " AND w.claimed_at IS NOT NULL"
                ),
                {"ids": list(since_ids)},
            )
            act = await conn.execute(
                text(
                    "SELECT 1000 * extract(epoch FROM a.claimed_at - a.scheduled_at) FROM"
                    " activity_tasks a JOIN runs r USING (run_id) WHERE r.workflow_id = ANY(:ids)"
                    " AND a.claimed_at IS NOT NULL"
                ),
                {"ids": list(since_ids)},
            )
            return {
                "workflow_task_claim": [float(v) for (v,) in wf],
                "activity_claim": [float(v) for (v,) in act],
            }
    finally:
        await engine.dispose()


def _cpu(procs: Sequence[subprocess.Popen[bytes]]) -> float:
    return sum(_proc_cpu(p.pid) for p in procs)


async def _measure(
    args: argparse.Namespace,
    url: URL,
    procs: Sequence[subprocess.Popen[bytes]],
    start: Starter,
    result_of: Callable[[int], Awaitable[None]],
    names: Sequence[str],
) -> dict[str, float]:
    cpu0 = [_cpu([p]) for p in procs]
    wall, completed = await _batch(url, start, args.workflows, args.timeout)
    cpu = [(_cpu([p]) - c) * 1000 / args.workflows for p, c in zip(procs, cpu0, strict=True)]
    latencies = []
    for i in range(args.workflows, args.workflows + args.latency_workflows):
        t0 = time.perf_counter()
        await result_of(i)
        latencies.append((time.perf_counter() - t0) * 1000)
    ids = [f"b-{i}" for i in range(args.workflows, args.workflows + args.latency_workflows)]
    claims = await _claim_latencies(url, ids)
    figures = {
        "completed": completed,
        "workflows_per_second": completed / wall,
        "cpu_ms_per_workflow": sum(cpu),
        # The SDK side's processes are [server, SDK worker]; the native side has its worker only.
        **{f"cpu_ms_per_workflow_{name}": c for name, c in zip(names, cpu, strict=True)},
        "start_to_result_p50_ms": statistics.median(latencies),
        "start_to_result_p99_ms": percentile(latencies, 0.99),
    }
    for name, values in claims.items():
        figures[f"{name}_p50_ms"] = statistics.median(values) if values else float("nan")
        figures[f"{name}_p99_ms"] = percentile(values, 0.99)
    return figures


async def native_side(args: argparse.Namespace, url: URL, pair: int) -> dict[str, float]:
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    env = {**os.environ, **wake_env(prefix, wakes=True), "BURROW_DATABASE_URL": plain}
    env["BURROW_LOG_LEVEL"] = "WARNING"
    cmd = [sys.executable, "-m", "burrow", "worker", "bench.app:app", "--worker-id", "native-w0"]
    cmd += ["--concurrency", "32", "--workflow-concurrency", "16"]
    worker = _spawn(cmd, env, RESULTS / f"server-vs-native-p{pair}-native.log")
    client = await connect_client(plain, wake_env(prefix, wakes=True))
    try:
        await _wait_registered(url, [worker])

        async def start(i: int) -> None:
            await client.start_workflow(
                OneActivity, i, id=f"b-{i}", task_queue=TASK_QUEUE, check_workers=False
            )

        async def result_of(i: int) -> None:
            handle = await client.start_workflow(
                OneActivity, i, id=f"b-{i}", task_queue=TASK_QUEUE, check_workers=False
            )
            assert await handle.result(timeout=60) == i + 1

        return await _measure(args, url, [worker], start, result_of, ["worker"])
    finally:
        await client.close()
        _stop([worker])
        await delete_wake_topology(prefix)


async def sdk_side(args: argparse.Namespace, url: URL, pair: int) -> dict[str, float]:
    plain = url.render_as_string(hide_password=False)
    prefix = new_prefix()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, **wake_env(prefix, wakes=True), "BURROW_DATABASE_URL": plain}
    env.update({"BURROW_AUTH_TOKEN": TOKEN, "BURROW_LOG_LEVEL": "WARNING"})
    server = _spawn(
        [sys.executable, "-m", "burrow", "server", "--host", "127.0.0.1", "--port", str(port)],
        env,
        RESULTS / f"server-vs-native-p{pair}-server.log",
    )
    procs = [server]
    try:
        await _wait_server(base, server)
        procs.append(
            _spawn(
                [sys.executable, "-m", "bench.peers.sdk_worker", base, TOKEN, SDK_QUEUE],
                env,
                RESULTS / f"server-vs-native-p{pair}-sdk-worker.log",
            )
        )
        await _wait_registered(url, procs)
        async with SdkClient(base, token=TOKEN, namespace="default") as client:

            async def start(i: int) -> None:
                await client.start_workflow(
                    workflow_type="OneActivity",
                    workflow_id=f"b-{i}",
                    task_queue=SDK_QUEUE,
                    input=[i],
                )

            async def result_of(i: int) -> None:
                handle = await client.start_workflow(
                    workflow_type="OneActivity",
                    workflow_id=f"b-{i}",
                    task_queue=SDK_QUEUE,
                    input=[i],
                )
                assert await client.get_result(handle) == i + 1

            return await _measure(args, url, procs, start, result_of, ["server", "worker"])
    finally:
        _stop(procs)
        await delete_wake_topology(prefix)


async def run(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    url = check_bench_url(args.database_url)
    sides: dict[str, Callable[..., Awaitable[dict[str, float]]]] = {
        "native": native_side,
        "sdk": sdk_side,
    }
    figures: dict[str, dict[str, list[float]]] = {side: {} for side in SIDES}
    RESULTS.mkdir(parents=True, exist_ok=True)
    for pair in range(1, args.pairs + 1):
        for side in SIDES if pair % 2 else tuple(reversed(SIDES)):
            await recreate_database(url)
            measured = await sides[side](args, url, pair)
            line = " ".join(f"{k}={v:.2f}" for k, v in measured.items())
            print(f"pair {pair} {side:6s} {line}", flush=True)
            for key, value in measured.items():
                figures[side].setdefault(key, []).append(value)
    return figures


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.server_vs_native", description=__doc__)
    parser.add_argument("--workflows", type=int, default=300, help="closed batch size")
    parser.add_argument("--latency-workflows", type=int, default=30, help="one at a time")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per batch")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logging()
    figures = asyncio.run(run(args))
    print("median over pairs:")
    for side, values in figures.items():
        print(f"  {side}:")
        for key, series in values.items():
            print(f"    {key}: {statistics.median(series):.2f}")
    native, sdk = figures["native"], figures["sdk"]
    ratios: dict[str, Any] = {
        "native_over_sdk_throughput": [
            n / s
            for n, s in zip(
                native["workflows_per_second"], sdk["workflows_per_second"], strict=True
            )
        ],
    }
    for key, series in ratios.items():
        print(f"median of per-pair ratios: {key}: {statistics.median(series):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
