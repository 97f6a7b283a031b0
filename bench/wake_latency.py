"""Wake latency: how long a ready workflow task waits for its claim, with and without the broker.

Run from the repo root: `python -m bench.wake_latency --workflows 300 --rate 50 --workers 2`.
Each mode runs on a fresh database, fresh worker processes and an AMQP prefix of its own:

- broker:  wakes on for workers and client, broker healthy.
- dropped: wakes on for the workers (re-poll interval BURROW_REPOLL_INTERVAL_SECONDS, 1.0 s by
           default), off for the client, so no start is ever woken; a background loop also
           purges the bench queue's workflow and activity wake queues every 20 ms. A lost wake
           should cost at most the re-poll interval.
- polling: BURROW_WAKES=0 for workers and client: durable polling with the default backoff.

The latency sample is the first workflow task of each run (created by the client's start
transaction, so only a poll or a wake can claim it): `claimed_at - created_at`.

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.app import TASK_QUEUE, OneActivity
from bench.throughput import (
    IDLE_SAMPLE_SECONDS,
    MAX_IN_FLIGHT_STARTS,
    RESULTS,
    STATS_SETTLE_SECONDS,
    admin_engine,
    check_bench_url,
    delete_wake_topology,
    env_settings,
    new_prefix,
    quiet_logging,
    recreate_database,
    start_workers,
    stop_workers,
    wait_closed,
    wait_registered,
    wake_env,
    wake_queue_names,
    xact_counters,
)
from burrow.broker.messages import TaskKind
from burrow.broker.topology import Topology
from burrow.client import Client
from burrow.config import Settings
from burrow.store import Store
from burrow.store.ready import Notice, ReadyTask
from burrow.wake_link import WakeLink

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/burrow_bench_wake"
PURGE_INTERVAL_SECONDS = 0.02
CONSUMERS_TIMEOUT_SECONDS = 30.0
DROPPED_KINDS = (TaskKind.WORKFLOW, TaskKind.ACTIVITY)
# Worker log events (WARNING and above) that mean the broker went away during the measurement.
BROKER_TROUBLE = ("broker_connection_lost", "wake_publish_failed", "wake_consumer_setup_failed")


@dataclass(frozen=True)
class Mode:
    """Who has wakes on, and whether the bench drops every wake left in the queues."""

    name: str
    worker_wakes: bool
    client_wakes: bool
    drop_wakes: bool


MODES = {
    "broker": Mode("broker", worker_wakes=True, client_wakes=True, drop_wakes=False),
    "dropped": Mode("dropped", worker_wakes=True, client_wakes=False, drop_wakes=True),
    "polling": Mode("polling", worker_wakes=False, client_wakes=False, drop_wakes=False),
}

# Only measured runs: workflow ids are bench-{i}, and the first `warmup` of them are not.
MEASURED = "split_part(r.workflow_id, '-', 2)::int >= :warmup"
# One per run: the task created by the client's start transaction. Nothing can claim it in the
# transaction that made it ready, so it is always claimed by a poll or a wake. Rows stay in
# workflow_tasks after completion, so this works once the runs are closed.
FIRST_TASKS = text(
    "SELECT DISTINCT ON (t.run_id) t.task_id,"
    " extract(epoch FROM t.claimed_at - t.created_at) * 1000,"
    " extract(epoch FROM t.claimed_at)::float8"
    f" FROM workflow_tasks t JOIN runs r USING (run_id) WHERE {MEASURED}"
    " ORDER BY t.run_id, t.created_at, t.task_id"
)
START_TO_RESULT = text(
    "SELECT extract(epoch FROM r.closed_at - r.created_at) * 1000 FROM runs r"
    f" WHERE r.closed_at IS NOT NULL AND {MEASURED}"
)
COMPLETED = text(f"SELECT count(*) FROM runs r WHERE r.status = 'completed' AND {MEASURED}")


async def sessions_opened(admin: AsyncEngine, name: str) -> int:
    """pg_stat_database.sessions (PG14+): connections ever made to the database."""
    async with admin.connect() as conn:
        row = await conn.execute(
            text("SELECT sessions FROM pg_stat_database WHERE datname = :n"), {"n": name}
        )
        return int(row.scalar_one() or 0)


def load() -> str:
    """The 1-minute load average, to judge how busy the shared machine was."""
    return f"{os.getloadavg()[0]:.2f}"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (as Postgres percentile_cont)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


async def connect_recording_client(
    url: str, env: Mapping[str, str] | None
) -> tuple[Client, dict[str, float]]:
    """A client like `connect_client`'s that notes when each workflow task it made ready committed.

    The store calls `after_commit` right after COMMIT returns (before any wake is published),
    so this is the commit as the client sees it, on the same host clock Postgres uses.
    """
    times: dict[str, float] = {}
    settings = Settings.load({**os.environ, **(env or {})}, database_url=url)
    wakes = WakeLink(settings, name=f"bench-client:{os.getpid()}")
    if settings.wakes.enabled:
        await wakes.start()

    async def after_commit(notices: list[Notice]) -> None:
        now = time.time()
        for notice in notices:
            if not isinstance(notice, ReadyTask):
                continue
            if notice.kind == "workflow" and notice.task_id is not None:
                times.setdefault(notice.task_id, now)
        if settings.wakes.enabled:
            await wakes.publish_ready(notices)

    store = Store.connect(
        url, pool_size=5, max_payload_bytes=settings.max_payload_bytes, after_commit=after_commit
    )
    client = Client(
        store, settings=settings, owns_store=True, wakes=wakes if settings.wakes.enabled else None
    )
    return client, times


async def start_at_rate(client: Client, n: int, rate: float) -> tuple[int, float, float]:
    """Start N workflows, the i-th at i/rate s: (failed starts, seconds, worst lateness in s)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)
    t0 = loop.time()
    late = 0.0

    async def one(i: int) -> None:
        async with gate:
            await client.start_workflow(
                OneActivity, i, id=f"bench-{i}", task_queue=TASK_QUEUE, check_workers=False
            )

    tasks = []
    for i in range(n):
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            late = max(late, -delay)
        tasks.append(asyncio.create_task(one(i)))
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        print(f"# {len(failed)} starts failed, first: {failed[0]!r}", file=sys.stderr)
    return len(failed), loop.time() - t0, late


@dataclass
class BrokerProbe:
    """The bench's own AMQP connection, touching only queues of its own prefix.

    It waits for the workers' consumers, taps the wake routing keys (an exclusive queue bound
    next to each wake queue counts every wake published) and, in `dropped` mode, purges the
    wake queues.
    """

    prefix: str
    connection: AbstractConnection | None = None
    taps: dict[TaskKind, AbstractQueue] = field(default_factory=dict)
    purged: dict[TaskKind, int] = field(default_factory=dict)
    purges: int = 0
    problems: list[str] = field(default_factory=list)
    """What went wrong on the bench's own broker connection (any entry: broker disturbed)."""
    closing: bool = False

    async def attempt(self, what: str, step: Awaitable[Any]) -> bool:
        """Run one probe step; a broker problem is recorded, not raised."""
        try:
            await step
        except Exception as exc:
            self.problems.append(f"{what}: {exc!r}")
            return False
        return True

    @property
    def names(self) -> dict[TaskKind, str]:
        return wake_queue_names(self.prefix)

    async def open(self) -> None:
        self.connection = await aio_pika.connect(env_settings().amqp_urls[0])
        self.connection.close_callbacks.add(self._closed)

    def _closed(self, _sender: Any, exc: BaseException | None) -> None:
        if not self.closing:
            self.problems.append(f"probe connection closed: {exc!r}")

    async def close(self) -> None:
        self.closing = True
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()  # the exclusive tap queues go with it

    async def channel(self) -> AbstractChannel:
        assert self.connection is not None
        return await self.connection.channel()

    async def wait_consumers(self, kinds: Sequence[TaskKind], count: int) -> None:
        """Wait until each wake queue of `kinds` exists and has `count` consumers."""
        deadline = time.monotonic() + CONSUMERS_TIMEOUT_SECONDS
        seen: dict[str, int] = {}
        while True:
            channel = await self.channel()
            try:
                for kind in kinds:
                    name = self.names[kind]
                    queue = await channel.declare_queue(name, passive=True)
                    seen[name] = queue.declaration_result.consumer_count or 0
            except aio_pika.exceptions.AMQPError:
                pass  # not declared yet (404 closes the channel)
            finally:
                with contextlib.suppress(Exception):
                    await channel.close()
            if len(seen) == len(kinds) and min(seen.values()) >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"wake consumers did not appear: {seen}, wanted {count} each")
            await asyncio.sleep(0.1)

    async def tap(self, kinds: Iterable[TaskKind]) -> None:
        """Bind an exclusive counting queue to each wake routing key of `kinds`."""
        channel = await self.channel()
        exchange = await Topology(prefix=self.prefix).declare_exchange(channel)
        for kind in kinds:
            queue = await channel.declare_queue(f"{self.prefix}.bench-tap.{kind}", exclusive=True)
            await queue.bind(exchange, routing_key=self.names[kind])
            self.taps[kind] = queue

    async def tapped(self) -> dict[TaskKind, float]:
        """How many wakes each tap has seen so far (NaN if the broker cannot tell)."""
        counts = {kind: math.nan for kind in self.taps}

        async def read() -> None:
            channel = await self.channel()
            try:
                for kind, queue in self.taps.items():
                    declared = await channel.declare_queue(queue.name, passive=True)
                    counts[kind] = float(declared.declaration_result.message_count or 0)
            finally:
                await channel.close()

        await self.attempt("reading the taps", read())
        return counts

    async def unbind(self, kinds: Iterable[TaskKind]) -> None:
        """Unbind the wake queues of `kinds` from the exchange: wakes to them become unroutable."""
        channel = await self.channel()
        try:
            exchange = await Topology(prefix=self.prefix).declare_exchange(channel)
            for kind in kinds:
                queue = await channel.declare_queue(self.names[kind], passive=True)
                await queue.unbind(exchange, routing_key=self.names[kind])
        finally:
            await channel.close()

    async def purge_forever(self, kinds: Iterable[TaskKind]) -> None:
        """Purge the wake queues of `kinds` every PURGE_INTERVAL_SECONDS until cancelled."""
        channel = await self.channel()
        queues = {
            kind: await channel.declare_queue(self.names[kind], passive=True) for kind in kinds
        }
        try:
            while True:
                for kind, queue in queues.items():
                    ok = await queue.purge()
                    self.purged[kind] = self.purged.get(kind, 0) + (ok.message_count or 0)
                self.purges += 1
                await asyncio.sleep(PURGE_INTERVAL_SECONDS)
        finally:
            with contextlib.suppress(Exception):
                await channel.close()


def mode_envs(mode: Mode, prefix: str, repoll: float) -> tuple[dict[str, str], dict[str, str]]:
    """(worker env, client env) of a mode."""
    worker = wake_env(prefix, wakes=mode.worker_wakes, repoll_seconds=repoll)
    client = wake_env(prefix, wakes=mode.client_wakes, repoll_seconds=repoll)
    return worker, client


async def measure(args: argparse.Namespace, url: URL, mode: Mode) -> dict[str, float]:
    plain_url = url.render_as_string(hide_password=False)
    name = str(url.database)
    n = args.warmup + args.workflows
    measured = {"warmup": args.warmup}
    prefix = new_prefix()
    worker_env, client_env = mode_envs(mode, prefix, args.repoll_interval)
    print(
        f"# mode {mode.name}: amqp_prefix={prefix}"
        f" worker_wakes={'on' if mode.worker_wakes else 'off'}"
        f" client_wakes={'on' if mode.client_wakes else 'off'}"
        f" purge_wake_queues={'every 20 ms' if mode.drop_wakes else 'no'}"
        f" unbind_wake_queues={'yes' if mode.drop_wakes and args.unbind_dropped else 'no'}",
        flush=True,
    )
    await recreate_database(url)
    admin = admin_engine(url)
    bench = create_async_engine(url, poolclass=NullPool)
    probe = BrokerProbe(prefix)
    workers = start_workers(args, plain_url, 0, env=worker_env, log_name=f"wake-{mode.name}")
    client, commit_times = await connect_recording_client(plain_url, client_env)
    purge: asyncio.Task[bool] | None = None
    tapped: dict[TaskKind, float] = {}
    try:
        async with bench.connect() as conn:
            await wait_registered(conn, workers)
            if mode.worker_wakes:
                # Only start once both workers consume: an earlier wake would find no queue.
                await probe.attempt("connecting", probe.open())
                if not probe.problems:
                    await probe.attempt(
                        "waiting for consumers", probe.wait_consumers(DROPPED_KINDS, len(workers))
                    )
                if not probe.problems:
                    await probe.attempt("binding the taps", probe.tap(DROPPED_KINDS))
            idle_start = await xact_counters(admin, name)
            await asyncio.sleep(IDLE_SAMPLE_SECONDS - STATS_SETTLE_SECONDS)
            idle_end = await xact_counters(admin, name)
            idle_rate = (idle_end[0] - idle_start[0]) / (idle_end[2] - idle_start[2])
            sessions_before, load_before = await sessions_opened(admin, name), load()
            if mode.drop_wakes and not probe.problems:
                if args.unbind_dropped:
                    await probe.attempt("unbinding", probe.unbind(DROPPED_KINDS))
                purge = asyncio.create_task(
                    probe.attempt("purging", probe.purge_forever(DROPPED_KINDS))
                )
            starts = asyncio.create_task(start_at_rate(client, n, args.rate))
            closed, failed_starts, wall = await wait_closed(conn, starts, n, args.timeout)
            if purge is not None:
                if purge.done():  # the loop only ends early on a broker problem
                    probe.problems.append("the purge loop stopped early")
                purge.cancel()
                await asyncio.gather(purge, return_exceptions=True)
            if probe.taps:
                tapped = await probe.tapped()
            after = await xact_counters(admin, name)
            sessions = await sessions_opened(admin, name) - sessions_before
            load_after = load()
            firsts = (await conn.execute(FIRST_TASKS, measured)).all()
            results = [float(r[0]) for r in (await conn.execute(START_TO_RESULT, measured)).all()]
            completed = (await conn.execute(COMPLETED, measured)).scalar_one()
            await conn.commit()
    finally:
        if purge is not None and not purge.done():
            purge.cancel()
            await asyncio.gather(purge, return_exceptions=True)
        await client.close()
        codes = stop_workers(workers)
        await probe.close()
        await bench.dispose()
        await admin.dispose()
        if mode.worker_wakes or mode.client_wakes:
            await delete_wake_topology(prefix)
    latencies = [float(r[1]) for r in firsts if r[1] is not None]
    # Per sample: (created_at -> claim, DB clock) and (client saw COMMIT -> claim, host clock).
    pairs = [
        (float(r[1]), (float(r[2]) - commit_times[str(r[0])]) * 1000)
        for r in firsts
        if r[2] is not None and str(r[0]) in commit_times
    ]
    from_commit = [since_commit for _, since_commit in pairs]
    start_txn = [total - since_commit for total, since_commit in pairs]
    logs = [p.read_text() for _, _, p in workers]
    log_lines = sum(len(log.splitlines()) for log in logs)
    problems = list(probe.problems)
    if mode.worker_wakes or mode.client_wakes:
        seen = [event for event in BROKER_TROUBLE if any(event in log for log in logs)]
        problems += [f"worker log: {event}" for event in seen]
    late = math.nan if starts.cancelled() else starts.result()[2]
    print(
        f"# mode {mode.name}: wall={wall:.2f}s closed={closed}/{n} measured_completed={completed}"
        f" worst_start_lateness={late * 1000:.1f}ms load_avg_1m={load_before}->{load_after}"
        f" worker_exit_codes={codes}"
        f" worker_log_lines={log_lines} (logs: {RESULTS}/wake-{mode.name}-*)",
        flush=True,
    )
    for problem in problems:
        print(f"# WARNING mode {mode.name}: broker disturbed: {problem}", flush=True)
    m = mode.name
    figures = {
        f"completed_{m}": float(completed),
        f"wake_latency_{m}_samples": float(len(latencies)),
        f"wake_latency_{m}_p50_ms": percentile(latencies, 0.5),
        f"wake_latency_{m}_p99_ms": percentile(latencies, 0.99),
        f"wake_latency_{m}_max_ms": max(latencies, default=math.nan),
        f"commit_to_claim_{m}_p50_ms": percentile(from_commit, 0.5),
        f"commit_to_claim_{m}_p99_ms": percentile(from_commit, 0.99),
        f"start_txn_{m}_p50_ms": percentile(start_txn, 0.5),
        f"start_txn_{m}_p99_ms": percentile(start_txn, 0.99),
        f"start_to_result_{m}_p50_ms": percentile(results, 0.5),
        f"start_to_result_{m}_p99_ms": percentile(results, 0.99),
        f"idle_commits_per_second_{m}": idle_rate,
        f"commits_per_workflow_{m}": (after[0] - idle_end[0]) / n,
        f"db_sessions_opened_{m}": float(sessions),
        f"failed_starts_{m}": float(failed_starts),
        f"worker_log_lines_{m}": float(log_lines),
        f"worker_bad_exits_{m}": float(sum(1 for c in codes if c != 0)),
        f"broker_disturbed_{m}": float(bool(problems)),
    }
    for kind, count in tapped.items():
        figures[f"wakes_published_{m}_{kind}"] = float(count)
    if mode.drop_wakes:
        for kind in DROPPED_KINDS:
            figures[f"wakes_purged_{m}_{kind}"] = float(probe.purged.get(kind, 0))
        figures[f"purge_passes_{m}"] = float(probe.purges)
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_latency", description=__doc__)
    parser.add_argument("--workflows", type=int, default=300, help="N workflows per mode")
    parser.add_argument("--rate", type=float, default=50.0, help="starts per second")
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="start this many workflows first (same rate) and leave them out of the figures",
    )
    parser.add_argument("--workers", type=int, default=2, help="W worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="activity slots per worker")
    parser.add_argument("--workflow-concurrency", type=int, default=16, help="per worker")
    parser.add_argument(
        "--repoll-interval",
        type=float,
        default=1.0,
        help="BURROW_REPOLL_INTERVAL_SECONDS for workers with wakes on",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated subset of {','.join(MODES)}",
    )
    parser.add_argument(
        "--unbind-dropped",
        action="store_true",
        help="dropped mode: also unbind the wake queues from the exchange, so that no wake"
        " reaches a consumer (the purge alone only drops wakes no consumer has taken yet)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="measure a mode again (up to this many times) when the broker connection dropped"
        " during it; the shared RabbitMQ may be restarted by other people's tests",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mode")
    parser.add_argument("--database-url", default=DEFAULT_URL, help="dropped and recreated!")
    parser.add_argument("--json", type=Path, default=None, help="also write figures here")
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown or not args.modes:
        parser.error(f"--modes: unknown {unknown}; choose from {list(MODES)}")
    if args.rate <= 0:
        parser.error("--rate must be positive")
    return args


def print_figures(figures: Mapping[str, float]) -> None:
    for key, value in figures.items():
        if key.endswith("_ms"):
            print(f"{key}: {value:.1f}")
        elif key.endswith("_seconds"):
            print(f"{key}: {float(value)}")  # settings: as given, e.g. 1.0 or 0.05
        else:
            print(f"{key}: {value:.2f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url = check_bench_url(args.database_url)
    quiet_logging()
    polling = env_settings({"BURROW_WAKES": "0"}).worker
    print(
        f"# bench: workflows={args.workflows} warmup={args.warmup} rate={args.rate}/s"
        f" workers={args.workers}"
        f" concurrency={args.concurrency} workflow_concurrency={args.workflow_concurrency}"
        f" modes={','.join(args.modes)} database={url.database}",
        flush=True,
    )
    results: dict[str, float] = {}
    for name in args.modes:
        for attempt in range(args.retries + 1):
            figures = asyncio.run(measure(args, url, MODES[name]))
            if not figures[f"broker_disturbed_{name}"]:
                break
            if attempt < args.retries:
                print(f"# mode {name}: the broker was disturbed, measuring again", flush=True)
        results.update(figures)
    results["repoll_interval_seconds"] = args.repoll_interval
    results["poll_interval_seconds"] = polling.poll_interval_seconds
    results["max_poll_interval_seconds"] = polling.max_poll_interval_seconds
    print_figures(results)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"parameters": vars(args), "figures": results}, indent=2, default=str)
        )
    complete = all(results[f"completed_{name}"] == args.workflows for name in args.modes)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
