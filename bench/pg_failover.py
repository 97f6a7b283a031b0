"""Workers under load while the Postgres primary dies and its standby is promoted.

`run_failover(cluster, options, log_dir)` runs W `burrow worker bench.chaos_app:app` processes
and a client on the cluster's failover URL (bench/pg_cluster.py), and starts N `ChaosChain`
workflows (an activity per run, continued as new twice). While they run it stops replication
(`--window` seconds before the kill: commits made in it exist on the primary only), SIGKILLs
the primary, waits `--promote-after` seconds (a failover manager noticing) and promotes the
standby. It then waits until every workflow closed, stops the workers and reads the store back
with the invariant checker (bench/invariants.py).

What it reports:
  - recovery_seconds: from the kill to the first run closed after it (progress: a run
    continued as new counts); first_workflow_completed_seconds: to the first workflow's last
    run completed, which waits behind the backlog the outage left; all_closed_seconds: to the
    last run closed. Read from runs.closed_at afterwards (Postgres runs on this machine).
  - lost_commits: transactions in the dead primary's WAL after the point the standby branched
    (pg_waldump). With sync replication none of them was acknowledged; with async they were.
  - acked_in_window: starts acknowledged to the client after replication stopped (less a
    margin for the streaming lag then, STREAM_LAG_MARGIN), before the promotion began (nothing
    but the dead primary took writes until then); missing: started
    workflows with no run on the promoted standby. Only a start acked in the window may go
    missing (async); every other workflow must complete as expected.

Run from the repo root: `python -m bench.pg_cluster --measure --mode async` (flags below).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from bench import chaos_app
from bench.invariants import Expected, InvariantReport, check
from bench.pg_cluster import MODES, Mode, PgCluster
from burrow.client import Client
from burrow.config import Settings
from burrow.errors import WorkflowAlreadyStartedError, WorkflowNotFoundError
from burrow.store.engine import async_url

ROOT = Path(__file__).resolve().parent.parent
# Commits acknowledged just before the WAL sender stopped may not have been streamed yet; on a
# loaded machine that lag can reach a fraction of a second. They are lost with the window's.
STREAM_LAG_MARGIN = 0.5
CLOSED_AFTER = text(
    "SELECT extract(epoch FROM min(closed_at)),"
    " extract(epoch FROM min(closed_at) FILTER (WHERE status = 'completed')),"
    " extract(epoch FROM max(closed_at))"
    " FROM runs WHERE closed_at >= to_timestamp(:at)"
)


@dataclass
class FailoverOptions:
    """The load and the moments of the failover (seconds after the first start)."""

    mode: Mode = "sync"
    workflows: int = 60
    workers: int = 2
    rate: float = 20.0  # starts per second
    kill_at: float = 1.5
    window: float = 0.5  # replication stopped this long before the kill
    promote_after: float = 0.5
    lease_seconds: float = 2.0
    timeout: float = 120.0


@dataclass
class FailoverReport:
    """What one failover cost (times: time.time())."""

    mode: str
    workflows: int
    paused_at: float = 0.0
    killed_at: float = 0.0
    promoting_at: float = 0.0  # no server took writes from the kill until then
    promoted_at: float = 0.0
    first_closed_at: float | None = None  # any run, continued-as-new too: progress
    first_completion_at: float | None = None  # a workflow's last run completed
    last_closed_at: float | None = None
    lost_commits: int = 0
    acked: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    all_closed: bool = False
    invariants: InvariantReport | None = None

    @property
    def acked_in_window(self) -> set[str]:
        """Starts acknowledged while the standby received nothing: what async may lose.

        Up to the promotion: a reply the old primary sent just before the kill may be read
        after it, and no other server took writes until then.
        """
        since = self.paused_at - STREAM_LAG_MARGIN
        return {w for w, at in self.acked.items() if since <= at <= self.promoting_at}

    def since_kill(self, at: float | None) -> str:
        return "never" if at is None else f"{at - self.killed_at:.2f}"

    def lines(self) -> list[str]:
        out = [
            f"mode: {self.mode}",
            f"workflows: {self.workflows}",
            f"kill_to_promoted_seconds: {self.promote_seconds:.2f}",
            f"recovery_seconds: {self.since_kill(self.first_closed_at)}",
            f"first_workflow_completed_seconds: {self.since_kill(self.first_completion_at)}",
            f"all_closed_seconds: {self.since_kill(self.last_closed_at)}",
            f"lost_commits: {self.lost_commits}",
            f"acked_in_window: {len(self.acked_in_window)}",
            f"missing: {len(self.missing)}",
            f"all_closed: {self.all_closed}",
        ]
        return out + (self.invariants.lines() if self.invariants else [])

    @property
    def promote_seconds(self) -> float:
        return self.promoted_at - self.killed_at


class WorkerProcesses:
    """`burrow worker <target>` processes writing to log files of their own."""

    def __init__(
        self, n: int, env: dict[str, str], log_dir: Path, target: str = "bench.chaos_app:app"
    ) -> None:
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        for i in range(n):
            cmd = [sys.executable, "-m", "burrow", "worker", target]
            cmd += ["--worker-id", f"failover-w{i}"]
            with (log_dir / f"failover-w{i}.log").open("ab") as log:  # the child keeps its fd
                self.procs.append(
                    subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
                )

    async def wait_started(self, timeout: float = 60.0) -> None:
        """Until every worker logged `worker_started` (the load must not outrun them)."""
        deadline = time.monotonic() + timeout
        while self.output().count('"worker_started"') < len(self.procs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"workers did not start; see {self.log_dir}")
            await asyncio.sleep(0.1)

    def output(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.log_dir.glob("failover-w*"))

    def stop(self) -> list[int | None]:
        """SIGTERM, SIGKILL after 20 s; the exit codes."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return [proc.returncode for proc in self.procs]


def worker_env(cluster: PgCluster, options: FailoverOptions) -> dict[str, str]:
    """Workers on the failover URL, polling (no broker), with short leases."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("BURROW_", "DW_"))},
        "BURROW_DATABASE_URL": cluster.url(),
        "BURROW_WAKES": "0",
        "BURROW_LOG_LEVEL": "INFO",
        "BURROW_LEASE_SECONDS": str(options.lease_seconds),
        "BURROW_REPAIR_INTERVAL_SECONDS": "0.2",
        "BURROW_POLL_INTERVAL_SECONDS": "0.02",
        "BURROW_MAX_POLL_INTERVAL_SECONDS": "0.2",
        "BURROW_HEARTBEAT_INTERVAL_SECONDS": "1",
        "BURROW_REPOLL_INTERVAL_SECONDS": "0.5",
        "BURROW_STICKY_OWNER_STALE_SECONDS": "3",
    }


def workload(n: int) -> dict[str, Expected]:
    """Workflow id -> what it must come to (ChaosChain(i, CHAIN_HOPS, 0))."""
    want = chaos_app.CHAIN_HOPS + 1
    return {f"chain-{i}": Expected(chaos_app.expected_chain(i), runs=want) for i in range(n)}


async def _start(client: Client, workflow_id: str, report: FailoverReport) -> None:
    """Start until acknowledged, through the outage; a failed attempt may have committed."""
    i = int(workflow_id.rsplit("-", 1)[1])
    uncertain, delay = False, 0.05
    while True:
        try:
            if uncertain and await _exists(client, workflow_id):
                break
            uncertain = True
            with contextlib.suppress(WorkflowAlreadyStartedError):
                await client.start_workflow(
                    "ChaosChain",
                    i,
                    chaos_app.CHAIN_HOPS,
                    0,
                    id=workflow_id,
                    task_queue=chaos_app.TASK_QUEUE,
                    check_workers=False,
                )
            break
        except Exception:  # StoreUnavailable mostly: the primary is gone, nothing promoted yet
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    report.acked[workflow_id] = time.time()


async def _exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.store.get_run(namespace=client.namespace, workflow_id=workflow_id, run_id=None)
    except WorkflowNotFoundError:
        return False
    return True


async def _drive(client: Client, ids: list[str], rate: float, report: FailoverReport) -> None:
    t0 = time.monotonic()
    tasks = []
    for k, workflow_id in enumerate(ids):
        await asyncio.sleep(max(0.0, t0 + k / rate - time.monotonic()))
        tasks.append(asyncio.create_task(_start(client, workflow_id, report)))
    await asyncio.gather(*tasks)


async def _fail_over(cluster: PgCluster, options: FailoverOptions, report: FailoverReport) -> None:
    """Stop replication, kill the primary, promote the standby, at the options' moments."""
    await asyncio.sleep(options.kill_at - options.window)
    report.paused_at = time.time()
    await cluster.pause_replication()
    await asyncio.sleep(options.window)
    report.killed_at = await asyncio.to_thread(cluster.kill_primary)
    branch = await cluster.standby_replay_lsn()
    await asyncio.sleep(options.promote_after)
    report.promoting_at = time.time()
    report.promoted_at = await asyncio.to_thread(cluster.promote)
    report.lost_commits = await asyncio.to_thread(cluster.lost_commits, branch)


async def _read_recovery(engine: AsyncEngine, report: FailoverReport) -> None:
    """When runs closed after the kill, from runs.closed_at (this machine's clock)."""
    async with engine.connect() as conn:
        row = (await conn.execute(CLOSED_AFTER, {"at": report.killed_at})).one()
    report.first_closed_at, report.first_completion_at, report.last_closed_at = (
        None if value is None else float(value) for value in row
    )


async def _wait_closed(engine: AsyncEngine, timeout: float) -> bool:
    """Until no run is running (every start was acknowledged before this is called)."""
    deadline = time.monotonic() + timeout
    query = text("SELECT count(*) FROM runs WHERE status = 'running'")
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            async with engine.connect() as conn:
                if await conn.scalar(query) == 0:
                    return True
        await asyncio.sleep(0.2)
    return False


async def run_failover(
    cluster: PgCluster, options: FailoverOptions, log_dir: Path
) -> FailoverReport:
    """One failover under load on a started cluster (see the module); the cluster is left
    with its standby promoted."""
    report = FailoverReport(mode=options.mode, workflows=options.workflows)
    expected = workload(options.workflows)
    env = worker_env(cluster, options)
    workers = WorkerProcesses(options.workers, env, log_dir)
    client = await Client.connect(settings=Settings.from_env(env))
    engine = create_async_engine(async_url(cluster.url()), poolclass=NullPool)
    try:
        await workers.wait_started()
        await asyncio.gather(
            _drive(client, list(expected), options.rate, report),
            _fail_over(cluster, options, report),
        )
        report.all_closed = await _wait_closed(engine, options.timeout)
        await _read_recovery(engine, report)
        async with engine.connect() as conn:
            present = set((await conn.execute(text("SELECT workflow_id FROM runs"))).scalars())
        report.missing = sorted(set(expected) - present)
    finally:
        workers.stop()
        await client.close()
        await engine.dispose()
    report.invariants = await check(cluster.url(), expected, repoll_seconds=5.0)
    return report


def parse_args(argv: list[str] | None = None) -> tuple[FailoverOptions, int, Path | None]:
    parser = argparse.ArgumentParser(prog="python -m bench.pg_cluster", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--measure", action="store_true", help="run the failover measurement")
    parser.add_argument("--mode", choices=MODES, default="sync")
    parser.add_argument("--workflows", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=40.0, help="starts per second")
    parser.add_argument("--kill-at", type=float, default=3.0, help="seconds into the load")
    parser.add_argument("--window", type=float, default=1.0, help="replication stopped (s)")
    parser.add_argument("--promote-after", type=float, default=1.0)
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.measure:
        parser.error("say --measure to run the failover measurement")
    options = FailoverOptions(
        mode=args.mode,
        workflows=args.workflows,
        workers=args.workers,
        rate=args.rate,
        kill_at=args.kill_at,
        window=args.window,
        promote_after=args.promote_after,
        lease_seconds=args.lease_seconds,
    )
    return options, args.trials, args.log_dir


def main(argv: list[str] | None = None) -> int:
    options, trials, log_dir = parse_args(argv)
    ok = True
    for trial in range(trials):
        logs = log_dir or Path(tempfile.mkdtemp(prefix="burrow-failover-"))
        logs.mkdir(parents=True, exist_ok=True)
        cluster = PgCluster(options.mode)
        try:
            cluster.start()
            report = asyncio.run(run_failover(cluster, options, logs))
        finally:
            cluster.close()
        print(f"# trial {trial + 1} of {trials} (worker logs: {logs})", flush=True)
        for line in report.lines():
            print(line, flush=True)
        lost = set(report.missing) - report.acked_in_window
        ok = ok and report.all_closed and not lost
    return 0 if ok else 1
