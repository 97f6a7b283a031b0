"""`burrow worker` and Postgres outages, with real worker processes and signals (issue 13)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

from burrow import Client, Settings
from burrow.testing import assert_eventually
from tests.acceptance.conftest import FAST_WORKER_ENV, ROOT
from tests.apps import outage_flows
from tests.apps.outage_flows import GoAheadFlow
from tests.support import spawn
from tests.support.private_postgres import PrivatePostgres, private_postgres

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

NO_WAKES = {"BURROW_WAKES": "0"}


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A private server these tests stop and start (the shared one is never touched)."""
    with private_postgres() as instance:
        yield instance


@pytest.fixture
def stopped(server: PrivatePostgres) -> Iterator[PrivatePostgres]:
    """The private server, down at the start of the test and left running after it."""
    server.ensure_stopped()
    yield server
    if not server.is_running():
        server.start()


class WorkerProcess:
    """A `burrow worker` process whose output goes to a file the test can read."""

    def __init__(
        self, log_path: Path, database_url: str, target: str = "tests.apps.flows:app", **env: str
    ) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:  # the child keeps its own descriptor
            self.proc = spawn.popen(
                [sys.executable, "-m", "burrow", "worker", target],
                cwd=ROOT,
                env={
                    **os.environ,
                    **FAST_WORKER_ENV,
                    **NO_WAKES,
                    "BURROW_DATABASE_URL": database_url,
                    **env,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, *, count: int = 1, timeout: float = 20.0) -> None:
        """Wait until `text` was printed `count` times."""
        deadline = time.monotonic() + timeout
        while self.output().count(text) < count:
            assert self.proc.poll() is None, f"worker exited early:\n{self.output()}"
            assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{self.output()}"
            time.sleep(0.05)

    def terminate(self, *, within: float) -> int:
        """SIGTERM, then the exit code, which must come within `within` seconds."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still alive {within}s after SIGTERM:\n{self.output()}")
        assert time.monotonic() - started < within
        return code

    def kill(self) -> None:
        """SIGKILL if still alive."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Worker processes started by the test; any still alive is killed at teardown."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def _start(
    workers: list[WorkerProcess],
    tmp_path: Path,
    database_url: str,
    target: str = "tests.apps.flows:app",
    **env: str,
) -> WorkerProcess:
    worker = WorkerProcess(tmp_path / f"worker-{len(workers)}.log", database_url, target, **env)
    workers.append(worker)
    return worker


def test_worker_started_while_postgres_is_down_waits_then_serves(
    stopped: PrivatePostgres, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 13 item 9: the worker retries with a logged backoff and serves once Postgres is up."""
    worker = _start(workers, tmp_path, stopped.url())
    worker.wait_for("store_unavailable_at_start", count=3)
    stopped.start()
    worker.wait_for("worker_started")
    assert worker.terminate(within=10) == 0
    assert "worker_loop_crashed" not in worker.output()
    assert "Traceback" not in worker.output()


def test_sigterm_while_waiting_for_postgres_exits_promptly(
    stopped: PrivatePostgres, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 13 item 9: a worker still waiting for Postgres ends on SIGTERM within seconds."""
    worker = _start(workers, tmp_path, stopped.url())
    worker.wait_for("store_unavailable_at_start", count=2)
    assert worker.terminate(within=5) == 0


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"username": "burrow_no_such_role"}, "check the user and password"),
        ({"database": "burrow_no_such_database"}, "burrow migrate"),
    ],
    ids=["bad-credentials", "missing-database"],
)
def test_configuration_errors_exit_non_zero_at_once_naming_the_fix(
    database_url: str,
    workers: list[WorkerProcess],
    tmp_path: Path,
    change: dict[str, str],
    expected: str,
) -> None:
    """Issue 13 item 9: bad credentials or a missing database are not waited out."""
    url = make_url(database_url).set(**change).render_as_string(hide_password=False)
    worker = _start(workers, tmp_path, url)
    code = worker.proc.wait(timeout=15)
    assert code != 0
    assert expected in worker.output()
    assert "store_unavailable_at_start" not in worker.output()


def test_an_unusable_amqp_url_is_refused_at_start(
    database_url: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 13 item 3: `--amqp-url zzz://x` exits non-zero at once, naming the setting."""
    worker = _start(workers, tmp_path, database_url, BURROW_WAKES="1", BURROW_AMQP_URL="zzz://x")
    assert worker.proc.wait(timeout=15) != 0
    assert "amqp_url" in worker.output()
    assert "BURROW_AMQP_URL or --amqp-url" in worker.output()


@pytest.mark.parametrize("database_up", [True, False], ids=["database-up", "database-down"])
def test_sigterm_ends_a_worker_with_unreachable_connections_within_its_drain_timeout(
    stopped: PrivatePostgres,
    workers: list[WorkerProcess],
    tmp_path: Path,
    database_up: bool,
) -> None:
    """Issue 13 item 3: an unreachable broker (and database) never keeps a worker from exiting."""
    if database_up:
        stopped.start()
    worker = _start(
        workers,
        tmp_path,
        stopped.url(),
        BURROW_WAKES="1",
        BURROW_AMQP_URL="amqp://guest:guest@127.0.0.1:1/",
        BURROW_DRAIN_SECONDS="1",
    )
    worker.wait_for("worker_started" if database_up else "store_unavailable_at_start")
    assert worker.terminate(within=1 + 5) == 0


async def test_an_activity_result_held_through_a_postgres_restart_lands_once(
    stopped: PrivatePostgres, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Issue 13 item 4: the worker keeps its lease and retries the result until Postgres is back.

    The attempt ran once: its result was not dropped and left to wait out the (30 s) lease.
    """
    stopped.start()
    worker = _start(
        workers, tmp_path, stopped.url(), "tests.apps.outage_flows:app", BURROW_LEASE_SECONDS="30"
    )
    worker.wait_for("worker_started")
    settings = Settings.from_env({**os.environ, **NO_WAKES, "BURROW_DATABASE_URL": stopped.url()})
    client = await Client.connect(settings=settings)
    try:
        handle = await client.start_workflow(
            GoAheadFlow.run, str(tmp_path), task_queue=outage_flows.TASK_QUEUE
        )
        executions = tmp_path / "executions"
        await assert_eventually(lambda: _exists(executions), timeout=30)
        await asyncio.to_thread(stopped.stop, "fast")
        (tmp_path / "go").touch()
        await asyncio.to_thread(worker.wait_for, "store_unavailable_retrying")
        await asyncio.to_thread(stopped.start)
        assert await handle.result(timeout=60) == "done"
    finally:
        await client.close()
    assert (await asyncio.to_thread(executions.read_text)).splitlines() == ["ran"]
    # Written alone, or with the workflow task it wakes when the run is warm (worker/completion.py).
    output = worker.output()
    assert "complete_activity_task" in output or "complete_activity_with_workflow_task" in output
    assert "activity_task_store_unavailable" not in output


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)
