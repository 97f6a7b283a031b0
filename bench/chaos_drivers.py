"""The chaos soak's load: its workload, the client driving it through outages, its workers."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import chaos_app
from bench.chaos_report import SoakOptions, SoakReport
from bench.invariants import Expected
from burrow.client import Client
from burrow.errors import WorkflowAlreadyStartedError, WorkflowNotFoundError

ROOT = Path(__file__).resolve().parent.parent
POLL_SECONDS = 0.1
MAX_IN_FLIGHT_STARTS = 64
RETRY_MAX_SECONDS = 2.0


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

    def __init__(
        self,
        client: Client,
        report: SoakReport,
        options: SoakOptions,
        may_be_lost: Callable[[str], bool] = lambda workflow_id: False,
    ) -> None:
        self.client = client
        self.may_be_lost = may_be_lost  # an acked start an async failover may have lost
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
        self._acked(workflow_id)

    def _acked(self, workflow_id: str) -> None:
        self.report.acked.setdefault(workflow_id, []).append(time.time())

    async def signal(self, workflow_id: str, value: int) -> None:
        handle = self.client.get_handle(workflow_id)

        async def attempt() -> bool:
            try:
                await handle.signal(chaos_app.SIGNAL, value, signal_id=f"{workflow_id}:approve")
            except WorkflowNotFoundError:
                if not self.may_be_lost(workflow_id):
                    raise
                self.report.client_retries["signal_start_lost"] += 1
            return True

        await self._retry("signal", attempt)
        self._acked(workflow_id)

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
