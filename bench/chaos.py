"""Chaos soak: mixed workflows through real worker processes while their services fail.

Run from the repo root, e.g.
`python -m bench.chaos --workflows 2000 --workers 2 --rabbit-every 5-40 --postgres-every 20-60
--kill-every 5-20`. See bench/README.md ("Chaos soak") for every flag and figure.

The soak starts a private Postgres server and a private RabbitMQ node (bench/services.py: the
shared servers are never touched), W `python -m burrow worker bench.chaos_app:app` processes
and a client, then starts N workflows (bench/chaos_app.py: half `ChaosApproval`, two
activities, a timer and a signal the soak sends; half `ChaosChain`, an activity per run and two
continue-as-new). Meanwhile, each fault kind switched on fires at random intervals:

- rabbit:   the private RabbitMQ node is stopped, stays down a random `--down-for` time, and is
            started again;
- postgres: the private Postgres server is stopped (`pg_ctl -m fast`: every connection is cut),
            stays down `--down-for`, and is started again;
- rabbit_node, failover: with `--rabbit-cluster` or `--postgres-failover` the soak runs on a
            three-node RabbitMQ cluster or a Postgres primary with a standby instead, and one
            node is stopped, or the primary killed and the standby promoted
            (bench/chaos_clusters.py);
- kill:     a random worker process gets SIGKILL; the soak, acting as a supervisor, starts it
            again (same command line and worker id) after `--restart-delay` seconds.

The client itself rides out the outages: a start or signal that fails with StoreUnavailable (or
any connection error) is retried with backoff; before a start is retried, the soak looks the
workflow id up, since the failed attempt may have committed. A start refused with
WorkflowAlreadyStartedError counts as done. Signals carry a fixed signal id, so a retried signal
is delivered once. Faults stop once every workflow closed; then the invariant checker
(bench/invariants.py) reads the store.

Recovery, per fault. `back` is the moment the fault ended: for a restart, when the service
accepts connections again (`pg_ctl -w start` or `rabbitmqctl await_startup` returned); for a
kill, the moment of the SIGKILL. Just before the fault the soak records the task leases held
(task id and lease token; all of them for a restart, the killed worker's for a kill). Recovery
is the time from `back` until both
  (a) progress: a run closed (runs.closed_at) at or after `back`, and
  (b) resumed: none of the recorded leases is still held with the same token (each task was
      completed, or its lease expired and it was given to a worker again),
whichever comes later. (a) is skipped when no run was open at `back`; (b) when the leases could
not be read (Postgres was down). It is observed by polling every 0.1 s, so it is accurate to
about 0.1 s, and measured on this machine's clock (Postgres runs on it too). A fault during
which or after which another fault began before recovery is counted as `overlapped`: its
recovery includes the other fault's.

Ready work, sampled. Besides the checker's end-of-soak ready-work check, the soak samples it
every `--sample-every` seconds while workflows run (bench/invariants.py `sample_ready_work`):
work ready, a lease expired, a timer due or an inbox event unobserved for more than
`--sample-stale-after` seconds is a violation (`ready_samples_stale`). A sample is skipped
while a fault is being injected and until `lease_seconds + sample_stale_after` after it ended
(work the fault held up may rightly wait that long), and counted as failed when the store
cannot be read.

The options and the report are in bench/chaos_report.py; the workload, the client driver and
the supervised workers in bench/chaos_drivers.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench.chaos_clusters import SoakServices, at_risk, soak_services, split_expected_losses
from bench.chaos_drivers import POLL_SECONDS, ROOT, Workers, WorkflowDriver, workload
from bench.chaos_report import FAULT_KINDS, Fault, Interval, SoakOptions, SoakReport
from bench.invariants import check, sample_ready_work
from burrow.client import Client
from burrow.config import Settings
from burrow.logging import configure_logging
from burrow.store.engine import async_url

RESULTS = ROOT / "bench" / "results"
PREFIX = "chaos"
LOSS_SETTLE_SECONDS = 5.0


# -- faults and recovery ----------------------------------------------------------------------

HELD_LEASES = text(
    "SELECT task_id::text, lease_token::text FROM workflow_tasks"
    " WHERE state = 'leased' AND (CAST(:owner AS text) IS NULL OR lease_owner = :owner)"
    " UNION ALL SELECT task_id::text, lease_token::text FROM activity_tasks"
    " WHERE state = 'leased' AND (CAST(:owner AS text) IS NULL OR lease_owner = :owner)"
)
STILL_HELD = text(
    "SELECT count(*) FROM (SELECT task_id, lease_token FROM workflow_tasks WHERE state = 'leased'"
    " UNION ALL SELECT task_id, lease_token FROM activity_tasks WHERE state = 'leased') t"
    " WHERE t.task_id::text || ':' || t.lease_token::text = ANY(:held)"
)
FIRST_CLOSE_AFTER = text(
    "SELECT extract(epoch FROM min(closed_at)) FROM runs WHERE closed_at >= to_timestamp(:t)"
)
OPEN_AT = text(
    "SELECT count(*) FROM runs WHERE created_at <= to_timestamp(:t)"
    " AND (closed_at IS NULL OR closed_at >= to_timestamp(:t))"
)
CLOSED_BETWEEN = text(
    "SELECT count(*) FROM runs WHERE closed_at BETWEEN to_timestamp(:a) AND to_timestamp(:b)"
)
CLOSED_WORKFLOWS = text(
    "SELECT count(*) FROM runs WHERE status NOT IN ('running', 'continued_as_new')"
)


class Soak:
    """One soak: services, workers, client, fault injectors and recovery monitors."""

    def __init__(self, options: SoakOptions, services: SoakServices):
        self.options = options
        self.services = services
        self.report = SoakReport(options)
        self.done = asyncio.Event()
        self.engine: AsyncEngine = create_async_engine(
            async_url(services.database_url),
            poolclass=NullPool,
            connect_args={"timeout": 2, "command_timeout": 5},
        )
        self.workers: Workers | None = None
        self.injecting = 0  # faults being injected right now
        self.t0 = time.time()

    def echo(self, line: str) -> None:
        self.options.echo(line)

    async def _query(self, stmt: Any, params: dict[str, Any]) -> Any:
        """One statement on its own connection; raises if Postgres is unreachable."""
        async with self.engine.connect() as conn:
            result = (await conn.execute(stmt, params)).all()
            await conn.rollback()
            return result

    async def _held_leases(self, owner: str | None) -> list[tuple[str, str]] | None:
        try:
            rows = await self._query(HELD_LEASES, {"owner": owner})
        except Exception:
            return None  # Postgres is down: this fault's recovery is measured by progress only
        return [(row[0], row[1]) for row in rows]

    async def _closed_between(self, a: float, b: float) -> int | None:
        try:
            return int((await self._query(CLOSED_BETWEEN, {"a": a, "b": b}))[0][0])
        except Exception:
            return None

    async def _alive_worker(self, workers: Workers) -> str:
        """A random running worker; waits while every one is dead (restarts pending)."""
        while True:
            alive = sorted(w for w, p in workers.procs.items() if p.poll() is None)
            if alive:
                return random.choice(alive)
            await asyncio.sleep(POLL_SECONDS)

    async def _inject(self, kind: str) -> Fault:
        fault = Fault(kind=kind, started=time.time())
        down = random.uniform(*self.options.down_for)
        if kind == "kill":
            assert self.workers is not None
            worker_id = await self._alive_worker(self.workers)
            fault.leases = await self._held_leases(worker_id)
            fault.started = time.time()
            self.workers.killed.add(self.workers.procs[worker_id].pid)
            with contextlib.suppress(ProcessLookupError):
                self.workers.procs[worker_id].send_signal(signal.SIGKILL)
            fault.back = time.time()
            fault.detail = f"SIGKILL {worker_id} holding {_count(fault.leases)} leases"
        elif kind in ("rabbit_node", "failover"):
            fault.leases = await self._held_leases(None)
            await self.services.inject(kind, fault, down, self.report, self._closed_between)
        elif kind == "postgres":
            assert self.services.postgres is not None
            fault.leases = await self._held_leases(None)
            fault.started = time.time()
            await asyncio.to_thread(self.services.postgres.stop, "fast")
            await asyncio.sleep(down)
            await asyncio.to_thread(self.services.postgres.start)
            fault.back = time.time()
            fault.detail = f"down {fault.back - fault.started:.1f}s, {_count(fault.leases)} leases"
        else:
            assert self.services.rabbit is not None
            fault.leases = await self._held_leases(None)
            fault.started = time.time()
            await asyncio.to_thread(self.services.rabbit.stop)
            await asyncio.sleep(down)
            await asyncio.to_thread(self.services.rabbit.start)
            fault.back = time.time()
            fault.detail = f"down {fault.back - fault.started:.1f}s"
        return fault

    async def _monitor(self, fault: Fault) -> None:
        """Poll until the fault recovered (see the module docstring) or the soak ended."""
        held = None if fault.leases is None else [f"{t}:{tok}" for t, tok in fault.leases]
        checked_open = False
        while True:
            try:
                if not checked_open:
                    opened = (await self._query(OPEN_AT, {"t": fault.back}))[0][0]
                    fault.needs_progress = bool(opened)
                    checked_open = True
                if fault.needs_progress and fault.progress_at is None:
                    first = (await self._query(FIRST_CLOSE_AFTER, {"t": fault.back}))[0][0]
                    if first is not None:
                        fault.progress_at = float(first)
                if held and fault.resumed_at is None:
                    still = (await self._query(STILL_HELD, {"held": held}))[0][0]
                    fault.resumed_at = time.time() if still == 0 else None
            except Exception:
                pass  # Postgres down again (another fault): poll on
            progressed = not fault.needs_progress or fault.progress_at is not None
            resumed = not held or fault.resumed_at is not None
            if checked_open and progressed and resumed:
                fault.recovered = True
                return
            if self.done.is_set():
                return  # polled once more after the last workflow closed
            await asyncio.sleep(POLL_SECONDS)

    async def _fault_loop(self, kind: str, interval: Interval) -> None:
        # One failover: the promoted standby has no standby of its own.
        limit = 1 if kind == "failover" else self.options.max_faults.get(kind)
        monitors = []
        while limit is None or self.report.count(kind) < limit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), random.uniform(*interval))
            if self.done.is_set():
                break
            self.injecting += 1  # the fault is in no list until it ended
            try:
                fault = await self._inject(kind)
            finally:
                self.injecting -= 1
            self.report.faults.append(fault)
            self.echo(f"# fault {fault.started - self.t0:7.1f}s {kind}: {fault.detail}")
            monitors.append(asyncio.create_task(self._monitor(fault)))
        await asyncio.gather(*monitors)

    def _mark_overlaps(self) -> None:
        faults = sorted(self.report.faults, key=lambda f: f.started)
        for fault in faults:
            end = fault.back + (fault.recovery if fault.recovered else math.inf)
            fault.overlapped = any(
                other is not fault
                and (
                    fault.started <= other.started <= end
                    or other.started <= fault.started <= other.back
                )
                for other in faults
            )

    def _in_fault_window(self, now: float) -> bool:
        """Within a fault, or soon enough after it that work may still be waiting on it: leases
        the fault cut short expire `lease_seconds` after it, then have `sample_stale_after`."""
        settle = self.options.lease_seconds + self.options.sample_stale_after
        return any(
            fault.started <= now and (math.isnan(fault.back) or now <= fault.back + settle)
            for fault in self.report.faults
        ) or bool(self.injecting)

    async def _sample_ready_work(self) -> None:
        """Sample the ready-work invariant every `sample_every` seconds until the soak ends."""
        samples = self.report.ready_samples
        while not self.done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), self.options.sample_every)
            if self.done.is_set():
                return
            if self._in_fault_window(time.time()):
                samples.skipped += 1
                continue
            try:
                async with self.engine.connect() as conn:
                    found = await sample_ready_work(conn, self.options.sample_stale_after)
            except Exception:
                samples.failed += 1  # Postgres went down (a fault began meanwhile)
                continue
            if self._in_fault_window(time.time()):
                samples.skipped += 1  # a fault began while the sample was read
                continue
            samples.checked += 1
            samples.stale += sum(found.violation_counts.values())
            samples.examples += found.examples

    async def _wait_closed(self, n: int) -> bool:
        deadline = time.monotonic() + self.options.timeout
        last_print = time.monotonic()
        settled: tuple[int, float] | None = None  # (closed, since) once only losses may remain
        while time.monotonic() < deadline:
            try:
                closed = (await self._query(CLOSED_WORKFLOWS, {}))[0][0]
            except Exception:
                closed = None
            if closed is not None and closed >= n:
                return True
            if closed is not None and closed >= n - len(at_risk(self.report)):
                # An async failover may have lost some: done once no more close for a while.
                if settled is None or settled[0] != closed:
                    settled = (closed, time.monotonic())
                elif time.monotonic() - settled[1] > LOSS_SETTLE_SECONDS:
                    return True
            if time.monotonic() - last_print > 30:
                self.echo(f"# {time.time() - self.t0:7.1f}s: {closed} of {n} workflows closed")
                last_print = time.monotonic()
            await asyncio.sleep(0.5)
        return False

    async def run(self, log_dir: Path) -> SoakReport:
        options = self.options
        specs = workload(options.workflows)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("BURROW_", "DW_"))},
            "BURROW_DATABASE_URL": self.services.database_url,
            "BURROW_AMQP_URL": self.services.amqp_url,
            "BURROW_AMQP_QUEUE_TYPE": self.services.queue_type,
            "BURROW_AMQP_PREFIX": PREFIX,
            "BURROW_WAKES": "1",
            "BURROW_LOG_LEVEL": options.log_level,
            "BURROW_LEASE_SECONDS": str(options.lease_seconds),
            "BURROW_REPAIR_INTERVAL_SECONDS": "0.2",
            "BURROW_POLL_INTERVAL_SECONDS": "0.02",
            "BURROW_MAX_POLL_INTERVAL_SECONDS": "0.2",
            "BURROW_HEARTBEAT_INTERVAL_SECONDS": "1",
            "BURROW_REPOLL_INTERVAL_SECONDS": str(options.repoll_seconds),
        }
        self.workers = Workers(options, env, log_dir)
        self.workers.start()
        client = await Client.connect(settings=Settings.from_env(env))
        supervisor = asyncio.create_task(self.workers.supervise(self.report))
        self.t0 = self.report.started = time.time()
        injectors = [
            asyncio.create_task(self._fault_loop(kind, every))
            for kind in FAULT_KINDS
            if (every := options.every(kind)) is not None and options.max_faults.get(kind, 1) > 0
        ]
        injectors.append(asyncio.create_task(self._sample_ready_work()))
        try:
            driver = WorkflowDriver(
                client, self.report, options, lambda w: w in at_risk(self.report)
            )
            await driver.run_all(specs)
            self.echo(f"# {time.time() - self.t0:7.1f}s: all {len(specs)} workflows started")
            self.report.all_closed = await self._wait_closed(len(specs))
            self.report.wall_seconds = time.time() - self.t0
            self.echo(
                f"# {self.report.wall_seconds:7.1f}s: "
                + ("all workflows closed" if self.report.all_closed else "timed out")
            )
            self.done.set()
            await asyncio.gather(*injectors)
            self._mark_overlaps()
            self.report.invariants = await check(
                self.services.database_url,
                {workflow_id: spec[2] for workflow_id, spec in specs.items()},
                repoll_seconds=options.repoll_seconds,
            )
            self.report.expected_losses = split_expected_losses(
                self.report.invariants, at_risk(self.report)
            )
        finally:
            self.done.set()
            for task in [*injectors, supervisor]:
                task.cancel()
            await asyncio.gather(*injectors, supervisor, return_exceptions=True)
            codes = self.workers.stop()
            self.echo(f"# worker exit codes at the end: {codes} (logs: {log_dir})")
            await client.close()
            await self.engine.dispose()
        return self.report


def _count(leases: list[tuple[str, str]] | None) -> str:
    return "?" if leases is None else str(len(leases))


def run_soak(options: SoakOptions) -> SoakReport:
    """Run one soak on private services (started and removed here) and return its report."""
    if options.seed is not None:
        random.seed(options.seed)
    log_dir = options.log_dir or RESULTS / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with soak_services(options) as services:
        options.echo(services.describe())
        return asyncio.run(Soak(options, services).run(log_dir))


# -- command line -------------------------------------------------------------------------------


def interval(value: str) -> Interval | None:
    """`A-B` seconds (or `A`: exactly A); `off` or `0` switches the fault off."""
    if value in ("off", "0"):
        return None
    low, _, high = value.partition("-")
    try:
        pair = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an interval A-B in seconds: {value!r}") from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"need 0 <= A <= B: {value!r}")
    return pair


def parse_args(argv: list[str] | None = None) -> SoakOptions:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workflows", type=int, default=1000, help="N workflows")
    parser.add_argument("--workers", type=int, default=2, help="W worker processes")
    for kind, default in (("rabbit", "5-40"), ("postgres", "20-60"), ("kill", "5-20")):
        parser.add_argument(
            f"--{kind}-every",
            type=interval,
            default=interval(default),
            metavar="A-B",
            help=f"seconds between {kind} faults, uniform in A-B; 'off' switches it off"
            f" (default {default})",
        )
        parser.add_argument(
            f"--{kind}-max", type=int, default=None, help=f"at most this many {kind} faults"
        )
    parser.add_argument("--rabbit-cluster", action="store_true", help="three-node cluster")
    parser.add_argument("--rabbit-cluster-every", type=interval, default=(10.0, 30.0))
    parser.add_argument("--rabbit-cluster-max", type=int, default=None)
    parser.add_argument("--postgres-failover", action="store_true", help="primary + standby")
    parser.add_argument("--failover-after", type=interval, default=(5.0, 15.0), metavar="A-B")
    parser.add_argument("--replication", choices=("sync", "async"), default="sync")
    parser.add_argument("--down-for", type=interval, default=(1.0, 5.0), metavar="A-B")
    parser.add_argument("--restart-delay", type=float, default=0.5)
    parser.add_argument("--rate", type=float, default=0.0, help="starts per second (0: no pace)")
    parser.add_argument("--signal-delay", type=interval, default=(0.0, 2.0), metavar="A-B")
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    parser.add_argument("--repoll-seconds", type=float, default=1.0)
    parser.add_argument("--sample-every", type=float, default=1.0, help="ready-work sampling")
    parser.add_argument("--sample-stale-after", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workflow-concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    maxes = {
        k: n for k in ("rabbit", "postgres", "kill") if (n := getattr(args, f"{k}_max")) is not None
    }
    if args.rabbit_cluster_max is not None:
        maxes["rabbit_node"] = args.rabbit_cluster_max
    return SoakOptions(
        workflows=args.workflows,
        workers=args.workers,
        rabbit_every=args.rabbit_every,
        postgres_every=args.postgres_every,
        kill_every=args.kill_every,
        rabbit_cluster=args.rabbit_cluster,
        rabbit_node_every=args.rabbit_cluster_every,
        postgres_failover=args.postgres_failover,
        failover_every=args.failover_after,
        replication=args.replication,
        max_faults=maxes,
        down_for=args.down_for or (0.0, 0.0),
        restart_delay=args.restart_delay,
        rate=args.rate,
        signal_delay=args.signal_delay or (0.0, 0.0),
        lease_seconds=args.lease_seconds,
        repoll_seconds=args.repoll_seconds,
        sample_every=args.sample_every,
        sample_stale_after=args.sample_stale_after,
        concurrency=args.concurrency,
        workflow_concurrency=args.workflow_concurrency,
        timeout=args.timeout,
        seed=args.seed,
        log_dir=args.log_dir,
        log_level=args.log_level,
    )


def quiet_logging() -> None:
    """Only warnings, and no AMQP tracebacks: the client's own warnings say what happened."""
    configure_logging(level="WARNING")
    for name in ("aiormq", "aio_pika"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every finally: servers go


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    quiet_logging()
    signal.signal(signal.SIGTERM, _interrupt)
    every = {k: options.every(k) for k in FAULT_KINDS}
    print(
        f"# chaos: workflows={options.workflows} workers={options.workers}"
        + "".join(
            f" {k}_every={'off' if v is None else f'{v[0]:g}-{v[1]:g}'}" for k, v in every.items()
        )
        + f" max_faults={options.max_faults or '-'} down_for={options.down_for[0]:g}-"
        f"{options.down_for[1]:g} rate={options.rate:g} lease_seconds={options.lease_seconds:g}"
        f" seed={options.seed}",
        flush=True,
    )
    options.echo = lambda line: print(line, flush=True)
    report = run_soak(options)
    for line in report.lines():
        print(line, flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
