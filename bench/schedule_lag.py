"""Schedule fire lag: how late after its nominal fire time a schedule's workflow starts (issue 30).

Run from the repo root: `python -m bench.schedule_lag --schedules 50 --seconds 60`.
On a fresh database, with W worker processes (`bench.app:app`, which sweep too) and M
`burrow matching` processes, it creates N schedules that fire every second (`PT1S`) over the
same window of S seconds, starting a few seconds after the processes are up, with overlap
policy `allow_all`. Once the window is over and every run has closed it reports, from the
database:

- fires expected (N x S), fire rows recorded, runs started, duplicate workflow ids, missed;
- start lag: the `WorkflowStarted` event's `recorded_at` (stamped by the database as it is
  inserted, inside the firing transaction) minus the nominal fire time, p50/p99/max;
- pass began lag: the firing transaction's start (`now()`, the run's `created_at`) minus the
  nominal fire time: how late the repair pass woke; start lag minus this is the work the pass
  did before it inserted this run;
- first task lag: the `ActivityScheduled` event's `recorded_at` (a worker has claimed and run
  the run's first workflow task) minus the nominal fire time: start lag plus commit, wake,
  claim and one workflow task;
- fires per pass: how many of one second's N fires one firing transaction took.

See bench/README.md for what the figures mean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, OneActivity
from bench.throughput import (
    RESULTS,
    ROOT,
    check_bench_url,
    connect_client,
    delete_wake_topology,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_registered,
    wake_env,
)
from burrow.protocol.schedules import IntervalSpec, OverlapPolicy, ScheduleSpec
from burrow.store.fleet import MATCHING_APPLICATION_PREFIX

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_schedules"
LEAD_SECONDS = 3.0
"""From the last schedule created to the first fire time."""
SETTLE_TIMEOUT_SECONDS = 120.0
POLL_SECONDS = 0.2
DEDICATED_WORKER_ENV = {"DW_V2_MATCHING_ROLE_QUEUE_WAKE": "0"}
"""The dedicated matching shape (SPEC M4c): workers neither sweep nor re-poll."""
Processes = list[tuple[str, Any, Path]]


def start_matching(args: argparse.Namespace, url: str, env: dict[str, str]) -> Processes:
    """Start `burrow matching` processes `bench-m0` …, logs in bench/results/."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = []
    for i in range(args.matching):
        matching_id = f"bench-m{i}"
        log_path = RESULTS / f"schedule-lag-{matching_id}.log"
        cmd = [sys.executable, "-m", "burrow", "matching", "--matching-id", matching_id]
        full_env = {**os.environ, **env, "BURROW_DATABASE_URL": url, "BURROW_LOG_LEVEL": "WARNING"}
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT
            )
        started.append((matching_id, proc, log_path))
    return started


def stop_matching(started: Processes) -> list[int | None]:
    for _, proc, _ in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for _, proc, _ in started:
        try:
            codes.append(proc.wait(timeout=30))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(proc.wait())
    return codes


async def wait_matching(conn: AsyncConnection, started: Processes) -> None:
    """Until every matching process has a connection open (as operator metrics count them)."""
    query = text(
        "SELECT count(DISTINCT application_name) FROM pg_stat_activity"
        " WHERE datname = current_database() AND starts_with(application_name, :prefix)"
    )
    deadline = time.monotonic() + 60
    while (await conn.execute(query, {"prefix": MATCHING_APPLICATION_PREFIX})).scalar_one() < len(
        started
    ):
        for matching_id, proc, log_path in started:
            if proc.poll() is not None:
                raise SystemExit(f"{matching_id} exited {proc.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            raise SystemExit("matching processes did not connect within 60 s")
        await asyncio.sleep(0.1)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile of `values` (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


_SETTLED = text(
    "SELECT (SELECT count(*) FROM schedule_fires) AS fires,"
    " (SELECT count(*) FROM runs WHERE status = 'running') AS running"
)
_COUNTS = text(
    "SELECT (SELECT count(*) FROM runs) AS runs,"
    " (SELECT count(DISTINCT workflow_id) FROM runs) AS distinct_ids,"
    " (SELECT count(*) FROM runs WHERE status = 'completed') AS completed,"
    " (SELECT count(*) FROM schedule_fires WHERE outcome = 'started') AS started,"
    " (SELECT coalesce(sum(missed_count), 0) FROM schedules) AS missed,"
    " (SELECT coalesce(sum(skipped_count), 0) FROM schedules) AS skipped,"
    " (SELECT coalesce(sum(failures_count), 0) FROM schedules) AS failed"
)
_LAGS = text(
    """
    SELECT f.fire_at,
           extract(epoch FROM s.recorded_at - f.fire_at) AS start_lag,
           extract(epoch FROM a.recorded_at - f.fire_at) AS task_lag,
           extract(epoch FROM r.created_at - f.fire_at) AS pass_lag,
           s.recorded_at AS started_at,
           r.created_at AS txn_at
    FROM schedule_fires f
    JOIN runs r ON r.run_id = f.run_id
    JOIN history_events s ON s.run_id = f.run_id AND s.event_type = 'WorkflowStarted'
    LEFT JOIN history_events a ON a.run_id = f.run_id AND a.event_type = 'ActivityScheduled'
    WHERE f.outcome = 'started'
    """
)


async def measure(args: argparse.Namespace, url: URL) -> dict[str, Any]:
    plain_url = url.render_as_string(hide_password=False)
    prefix = args.prefix or new_prefix()
    env = wake_env(prefix, wakes=True)
    if args.repair_interval is not None:
        env["BURROW_REPAIR_INTERVAL_SECONDS"] = str(args.repair_interval)
    await recreate_database(url)
    bench = create_async_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    worker_env = {**env, **(DEDICATED_WORKER_ENV if args.dedicated else {})}
    workers = start_workers(args, plain_url, 1, env=worker_env, log_name="schedule-lag")
    matchers = start_matching(args, plain_url, env)
    client = await connect_client(plain_url, env)
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            await wait_matching(conn, matchers)
            created = time.perf_counter()
            first = datetime.now(UTC).replace(microsecond=0) + timedelta(
                seconds=math.ceil(LEAD_SECONDS + 0.02 * args.schedules)
            )
            spec = ScheduleSpec(
                intervals=[IntervalSpec(every="PT1S")],
                start_at=first,
                end_at=first + timedelta(seconds=args.seconds - 1),
            )
            for i in range(args.schedules):
                await client.create_schedule(
                    f"lag-{i}",
                    OneActivity,
                    i,
                    spec=spec,
                    task_queue=TASK_QUEUE,
                    overlap_policy=OverlapPolicy.ALLOW_ALL,
                )
            create_seconds = time.perf_counter() - created
            assert datetime.now(UTC) < first, "schedules created after the first fire time"
            expected = args.schedules * args.seconds
            print(
                f"# {args.schedules} schedules created in {create_seconds:.2f}s; window"
                f" {first:%H:%M:%S}..{spec.end_at:%H:%M:%S} UTC, {expected} fires expected",
                flush=True,
            )
            last = spec.end_at or first
            await asyncio.sleep((last - datetime.now(UTC)).total_seconds() + 1)
            deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
            while time.monotonic() < deadline:
                row = (await conn.execute(_SETTLED)).one()
                if row.fires >= expected and row.running == 0:
                    break
                await asyncio.sleep(POLL_SECONDS)
            counts = (await conn.execute(_COUNTS)).one()._asdict()
            lags = (await conn.execute(_LAGS)).all()
    finally:
        await client.close()
        worker_codes = stop_workers(workers)
        matching_codes = stop_matching(matchers)
        await bench.dispose()
        if args.prefix is None:
            await delete_wake_topology(prefix)
    start = [float(r.start_lag) for r in lags]
    task = [float(r.task_lag) for r in lags if r.task_lag is not None]
    began = [float(r.pass_lag) for r in lags]
    per_pass: dict[datetime, set[datetime]] = {}
    for r in lags:
        per_pass.setdefault(r.fire_at, set()).add(r.txn_at)
    passes = [len(txns) for txns in per_pass.values()]
    return {
        "fires_expected": expected,
        **{k: int(v) for k, v in counts.items()},
        "start_lag_p50": percentile(start, 50),
        "start_lag_p99": percentile(start, 99),
        "start_lag_max": max(start, default=float("nan")),
        "pass_began_lag_p50": percentile(began, 50),
        "pass_began_lag_p99": percentile(began, 99),
        "first_task_lag_p50": percentile(task, 50),
        "first_task_lag_p99": percentile(task, 99),
        "first_task_lag_max": max(task, default=float("nan")),
        "transactions_per_fire_second_max": max(passes, default=0),
        "transactions_per_fire_second_mean": sum(passes) / len(passes) if passes else 0.0,
        "worker_exit_codes": worker_codes,
        "matching_exit_codes": matching_codes,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.schedule_lag", description=__doc__)
    parser.add_argument("--schedules", type=int, default=50, help="N schedules, every second")
    parser.add_argument("--seconds", type=int, default=60, help="S seconds of fires")
    parser.add_argument("--workers", type=int, default=1, help="W worker processes")
    parser.add_argument("--matching", type=int, default=2, help="M `burrow matching` processes")
    parser.add_argument(
        "--dedicated",
        action="store_true",
        help="workers neither sweep nor re-poll (DW_V2_MATCHING_ROLE_QUEUE_WAKE=0): only the"
        " matching processes fire schedules",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="activity slots per worker")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="per worker")
    parser.add_argument(
        "--repair-interval",
        type=float,
        default=None,
        help="BURROW_REPAIR_INTERVAL_SECONDS of every process (default: theirs, 1.0)",
    )
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--prefix", default=None, help="BURROW_AMQP_PREFIX (default: new)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url = check_bench_url(args.database_url)
    quiet_logging()
    interval = args.repair_interval if args.repair_interval is not None else "default"
    print(
        f"# bench: schedules={args.schedules} seconds={args.seconds} workers={args.workers}"
        f" matching={args.matching} dedicated={args.dedicated} repair_interval={interval}"
        f" database={url.database}",
        flush=True,
    )
    figures = asyncio.run(measure(args, url))
    for key, value in figures.items():
        shown = f"{value:.3f}" if isinstance(value, float) else value
        print(f"{key}: {shown}")
    if args.json is not None:
        args.json.write_text(
            json.dumps({"parameters": vars(args), "figures": figures}, indent=2, default=str)
        )
    exact = (
        figures["started"] == figures["fires_expected"] == figures["runs"]
        and figures["distinct_ids"] == figures["runs"]
        and figures["missed"] == 0
    )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
