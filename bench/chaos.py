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
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import logging
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench import chaos_app
from bench.invariants import Expected, InvariantReport, check
from bench.services import (
    PrivatePostgres,
    PrivateRabbit,
    close_postgres,
    new_private_postgres,
    new_private_rabbit,
)
from burrow.client import Client
from burrow.config import Settings
from burrow.errors import WorkflowAlreadyStartedError, WorkflowNotFoundError
from burrow.logging import configure_logging
from burrow.store import migrate
from burrow.store.engine import async_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FAULT_KINDS = ("rabbit", "postgres", "kill")
POLL_SECONDS = 0.1
MAX_IN_FLIGHT_STARTS = 64
RETRY_MAX_SECONDS = 2.0
PREFIX = "chaos"

Interval = tuple[float, float]


@dataclass
class SoakOptions:
    """What to run and which faults to inject (None: that fault is off)."""

    workflows: int = 1000
    workers: int = 2
    rabbit_every: Interval | None = (5.0, 40.0)
    postgres_every: Interval | None = (20.0, 60.0)
    kill_every: Interval | None = (5.0, 20.0)
    max_faults: dict[str, int] = field(default_factory=dict)  # kind -> at most this many
    down_for: Interval = (1.0, 5.0)
    restart_delay: float = 0.5
    rate: float = 0.0  # workflow starts per second; 0: as fast as 64 in flight allow
    signal_delay: Interval = (0.0, 2.0)
    lease_seconds: float = 3.0
    repoll_seconds: float = 1.0
    concurrency: int = 16
    workflow_concurrency: int = 8
    timeout: float = 1800.0
    seed: int | None = None
    log_dir: Path | None = None
    log_level: str = "WARNING"
    echo: Callable[[str], None] = print

    def every(self, kind: str) -> Interval | None:
        return {"rabbit": self.rabbit_every, "postgres": self.postgres_every}.get(
            kind, self.kill_every
        )


@dataclass
class Fault:
    """One injected fault and what the soak saw of its recovery (times: time.time())."""

    kind: str
    started: float
    back: float = math.nan
    detail: str = ""
    leases: list[tuple[str, str]] | None = None  # (task id, lease token) held at the start
    progress_at: float | None = None
    resumed_at: float | None = None
    needs_progress: bool = True
    recovered: bool = False
    overlapped: bool = False

    def summary(self, t0: float) -> str:
        """One line: when, what, and its recovery with both parts (see the module docstring)."""

        def part(at: float | None) -> str:
            return "-" if at is None else f"{at - self.back:.2f}s"

        state = "idle" if self.idle else f"{self.recovery:.2f}s" if self.recovered else "never"
        return (
            f"recovery {self.kind} at {self.started - t0:.1f}s ({self.detail}): {state}"
            f" (progress {part(self.progress_at)}, resumed {part(self.resumed_at)})"
            + (" overlapped" if self.overlapped else "")
        )

    @property
    def idle(self) -> bool:
        """Nothing to recover: no run was open at `back` and no lease was held at the start."""
        return self.recovered and not self.needs_progress and not self.leases

    @property
    def recovery(self) -> float:
        """Seconds from `back` to recovery (see the module docstring); NaN if not recovered."""
        if not self.recovered:
            return math.nan
        ends = [t for t in (self.progress_at, self.resumed_at) if t is not None]
        return max([0.0, *(t - self.back for t in ends)])


@dataclass
class SoakReport:
    """Everything a soak saw: faults, client retries, worker exits and the invariant report."""

    options: SoakOptions
    invariants: InvariantReport | None = None
    faults: list[Fault] = field(default_factory=list)
    all_closed: bool = False
    wall_seconds: float = 0.0
    started: float = 0.0  # time.time() of the first start; fault times are printed from it
    worker_restarts: int = 0
    unexpected_worker_exits: list[str] = field(default_factory=list)
    client_retries: Counter[str] = field(default_factory=Counter)
    client_errors: list[str] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for f in self.faults if f.kind == kind)

    @property
    def ok(self) -> bool:
        """Every workflow closed as expected and no invariant broken."""
        return self.all_closed and self.invariants is not None and self.invariants.ok

    def lines(self) -> list[str]:
        out = [f"wall_seconds: {self.wall_seconds:.1f}", f"all_closed: {self.all_closed}"]
        for kind in FAULT_KINDS:
            faults = [f for f in self.faults if f.kind == kind]
            times = sorted(f.recovery for f in faults if f.recovered and not f.idle)
            out.append(f"faults_{kind}: {len(faults)}")
            out.append(f"recovery_{kind}_measured: {len(times)}")
            out.append(f"recovery_{kind}_idle: {sum(1 for f in faults if f.idle)}")
            out.append(
                f"recovery_{kind}_not_recovered: {sum(1 for f in faults if not f.recovered)}"
            )
            out.append(f"recovery_{kind}_overlapped: {sum(1 for f in faults if f.overlapped)}")
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                out.append(f"recovery_{kind}_{name}_s: {_quantile(times, q):.2f}")
            out.append(f"recovery_{kind}_max_s: {max(times) if times else math.nan:.2f}")
        out += [f"# {fault.summary(self.started)}" for fault in self.faults]
        out.append(f"worker_restarts: {self.worker_restarts}")
        out.append(f"unexpected_worker_exits: {len(self.unexpected_worker_exits)}")
        for kind, n in sorted(self.client_retries.items()):
            out.append(f"client_retries_{kind}: {n}")
        out += [f"# unexpected worker exit: {line}" for line in self.unexpected_worker_exits]
        out += [f"# client error: {line}" for line in self.client_errors[:10]]
        if self.invariants is not None:
            out += self.invariants.lines()
        out.append(f"result: {'OK' if self.ok else 'FAILED'}")
        return out


def _quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile of sorted values (NaN if none)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


# -- the workload ---------------------------------------------------------------------------------


def workload(n: int) -> dict[str, tuple[str, list[int], Expected]]:
    """Workflow id -> (workflow type, arguments, what it must come to)."""
    specs: dict[str, tuple[str, list[int], Expected]] = {}
    for i in range(n):
        if i % 2 == 0:
            want = Expected(chaos_app.expected_approval(i), runs=1, signals=1)
            specs[f"approval-{i}"] = ("ChaosApproval", [i], want)
        else:
            want = Expected(chaos_app.expected_chain(i), runs=chaos_app.CHAIN_HOPS + 1)
            specs[f"chain-{i}"] = ("ChaosChain", [i, chaos_app.CHAIN_HOPS, 0], want)
    return specs


class WorkflowDriver:
    """Starts and signals the workflows through one client, retrying through outages."""

    def __init__(self, client: Client, report: SoakReport, options: SoakOptions) -> None:
        self.client = client
        self.report = report
        self.options = options
        self.gate = asyncio.Semaphore(MAX_IN_FLIGHT_STARTS)

    async def _retry(self, what: str, attempt: Callable[[], Awaitable[bool]]) -> None:
        """Call `attempt` until it returns True; an error is counted and retried with backoff."""
        delay = 0.05
        while True:
            try:
                if await attempt():
                    return
            except Exception as exc:
                self.report.client_retries[f"{what}_{type(exc).__name__}"] += 1
                if len(self.report.client_errors) < 10:
                    self.report.client_errors.append(f"{what}: {exc!r}"[:300])
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)

    async def _exists(self, workflow_id: str) -> bool:
        try:
            await self.client.store.get_run(
                namespace=self.client.namespace, workflow_id=workflow_id, run_id=None
            )
        except WorkflowNotFoundError:
            return False
        return True

    async def start(self, workflow_id: str, workflow_type: str, args: list[int]) -> None:
        uncertain = False

        async def attempt() -> bool:
            nonlocal uncertain
            if uncertain and await self._exists(workflow_id):
                return True  # the failed attempt had committed
            uncertain = True
            with contextlib.suppress(WorkflowAlreadyStartedError):  # an earlier attempt's
                await self.client.start_workflow(
                    workflow_type,
                    *args,
                    id=workflow_id,
                    task_queue=chaos_app.TASK_QUEUE,
                    check_workers=False,
                )
            return True

        async with self.gate:
            await self._retry("start", attempt)

    async def signal(self, workflow_id: str, value: int) -> None:
        handle = self.client.get_handle(workflow_id)

        async def attempt() -> bool:
            await handle.signal(chaos_app.SIGNAL, value, signal_id=f"{workflow_id}:approve")
            return True

        await self._retry("signal", attempt)

    async def drive(self, workflow_id: str, workflow_type: str, args: list[int]) -> None:
        await self.start(workflow_id, workflow_type, args)
        if workflow_type == "ChaosApproval":
            await asyncio.sleep(random.uniform(*self.options.signal_delay))
            await self.signal(workflow_id, args[0])

    async def run_all(self, specs: dict[str, tuple[str, list[int], Expected]]) -> None:
        tasks = []
        t0 = time.monotonic()
        for k, (workflow_id, (workflow_type, args, _)) in enumerate(specs.items()):
            if self.options.rate > 0:
                await asyncio.sleep(max(0.0, t0 + k / self.options.rate - time.monotonic()))
            tasks.append(asyncio.create_task(self.drive(workflow_id, workflow_type, args)))
        await asyncio.gather(*tasks)


# -- worker processes, as a supervisor runs them ----------------------------------------------


class Workers:
    """W `burrow worker` processes; one that exits is started again (same id, same command)."""

    def __init__(self, options: SoakOptions, env: dict[str, str], log_dir: Path) -> None:
        self.options = options
        self.env = env
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()  # pids the soak killed on purpose
        self.stopping = False

    def _spawn(self, worker_id: str) -> None:
        cmd = [sys.executable, "-m", "burrow", "worker", "bench.chaos_app:app"]
        cmd += ["--worker-id", worker_id, "--concurrency", str(self.options.concurrency)]
        cmd += ["--workflow-concurrency", str(self.options.workflow_concurrency)]
        with (self.log_dir / f"{worker_id}.log").open("ab") as log:  # the child keeps its fd
            self.procs[worker_id] = subprocess.Popen(
                cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def start(self) -> None:
        for i in range(self.options.workers):
            self._spawn(f"chaos-w{i}")

    async def supervise(self, report: SoakReport) -> None:
        """Restart every worker that exits, until `stop()`."""
        while not self.stopping:
            for worker_id, proc in list(self.procs.items()):
                code = proc.poll()
                if code is None or self.stopping:
                    continue
                if proc.pid not in self.killed:
                    report.unexpected_worker_exits.append(
                        f"{worker_id} (pid {proc.pid}) exited {code}; see {self.log_dir}"
                    )
                await asyncio.sleep(self.options.restart_delay)
                if not self.stopping:
                    self._spawn(worker_id)
                    report.worker_restarts += 1
            await asyncio.sleep(POLL_SECONDS)

    def stop(self) -> list[int | None]:
        """SIGTERM every worker, SIGKILL any still alive after 20 s; their exit codes."""
        self.stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [proc.returncode for proc in self.procs.values()]


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
CLOSED_WORKFLOWS = text(
    "SELECT count(*) FROM runs WHERE status NOT IN ('running', 'continued_as_new')"
)


class Soak:
    """One soak: services, workers, client, fault injectors and recovery monitors."""

    def __init__(self, options: SoakOptions, postgres: PrivatePostgres, rabbit: PrivateRabbit):
        self.options = options
        self.postgres = postgres
        self.rabbit = rabbit
        self.report = SoakReport(options)
        self.done = asyncio.Event()
        self.engine: AsyncEngine = create_async_engine(
            async_url(postgres.url()),
            poolclass=NullPool,
            connect_args={"timeout": 2, "command_timeout": 5},
        )
        self.workers: Workers | None = None
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
        elif kind == "postgres":
            fault.leases = await self._held_leases(None)
            fault.started = time.time()
            await asyncio.to_thread(self.postgres.stop, "fast")
            await asyncio.sleep(down)
            await asyncio.to_thread(self.postgres.start)
            fault.back = time.time()
            fault.detail = f"down {fault.back - fault.started:.1f}s, {_count(fault.leases)} leases"
        else:
            fault.leases = await self._held_leases(None)
            fault.started = time.time()
            await asyncio.to_thread(self.rabbit.stop)
            await asyncio.sleep(down)
            await asyncio.to_thread(self.rabbit.start)
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
        limit = self.options.max_faults.get(kind)
        monitors = []
        while limit is None or self.report.count(kind) < limit:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), random.uniform(*interval))
            if self.done.is_set():
                break
            fault = await self._inject(kind)
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

    async def _wait_closed(self, n: int) -> bool:
        deadline = time.monotonic() + self.options.timeout
        last_print = time.monotonic()
        while time.monotonic() < deadline:
            try:
                closed = (await self._query(CLOSED_WORKFLOWS, {}))[0][0]
            except Exception:
                closed = None
            if closed is not None and closed >= n:
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
            "BURROW_DATABASE_URL": self.postgres.url(),
            "BURROW_AMQP_URL": self.rabbit.url,
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
        try:
            driver = WorkflowDriver(client, self.report, options)
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
                self.postgres.url(),
                {workflow_id: spec[2] for workflow_id, spec in specs.items()},
                repoll_seconds=options.repoll_seconds,
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


@contextlib.contextmanager
def private_services() -> Iterator[tuple[PrivatePostgres, PrivateRabbit]]:
    """A started, migrated private Postgres and a started private RabbitMQ, removed afterwards."""
    postgres, pg_root = new_private_postgres()
    # atexit too: a runner ended by an unhandled signal or sys.exit still removes its servers.
    atexit.register(close_postgres, postgres, pg_root)
    try:
        rabbit = new_private_rabbit()
        atexit.register(rabbit.close)
        try:
            postgres.start()
            asyncio.run(migrate.upgrade(postgres.url(), create_database=True))
            rabbit.start()
            yield postgres, rabbit
        finally:
            rabbit.close()
            atexit.unregister(rabbit.close)
    finally:
        close_postgres(postgres, pg_root)
        atexit.unregister(close_postgres)


def run_soak(options: SoakOptions) -> SoakReport:
    """Run one soak on private services (started and removed here) and return its report."""
    if options.seed is not None:
        random.seed(options.seed)
    log_dir = options.log_dir or RESULTS / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with private_services() as (postgres, rabbit):
        options.echo(
            f"# private postgres {postgres.url()}, private rabbitmq {rabbit.node} {rabbit.url}"
        )
        return asyncio.run(Soak(options, postgres, rabbit).run(log_dir))


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
    parser.add_argument("--down-for", type=interval, default=(1.0, 5.0), metavar="A-B")
    parser.add_argument("--restart-delay", type=float, default=0.5)
    parser.add_argument("--rate", type=float, default=0.0, help="starts per second (0: no pace)")
    parser.add_argument("--signal-delay", type=interval, default=(0.0, 2.0), metavar="A-B")
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    parser.add_argument("--repoll-seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workflow-concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    maxes = {kind: n for kind in FAULT_KINDS if (n := getattr(args, f"{kind}_max")) is not None}
    return SoakOptions(
        workflows=args.workflows,
        workers=args.workers,
        rabbit_every=args.rabbit_every,
        postgres_every=args.postgres_every,
        kill_every=args.kill_every,
        max_faults=maxes,
        down_for=args.down_for or (0.0, 0.0),
        restart_delay=args.restart_delay,
        rate=args.rate,
        signal_delay=args.signal_delay or (0.0, 0.0),
        lease_seconds=args.lease_seconds,
        repoll_seconds=args.repoll_seconds,
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
