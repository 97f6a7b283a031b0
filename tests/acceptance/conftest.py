"""Fixtures for end-to-end tests: real worker processes and clients on the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aio_pika
import asyncpg
import pytest
from aiormq.abc import DeliveredMessage

from burrow import Client, Settings, WorkerSettings
from burrow.broker.messages import TaskKind, Wake
from tests.support import spawn

ROOT = Path(__file__).resolve().parents[2]
FAST_WORKER_ENV = {
    "BURROW_LEASE_SECONDS": "2",
    "BURROW_REPAIR_INTERVAL_SECONDS": "0.2",
    "BURROW_POLL_INTERVAL_SECONDS": "0.02",
    "BURROW_MAX_POLL_INTERVAL_SECONDS": "0.2",
    "BURROW_HEARTBEAT_INTERVAL_SECONDS": "1",
    # A killed sticky owner is known gone after 3 missed heartbeats, not the default 30 s.
    "BURROW_STICKY_OWNER_STALE_SECONDS": "3",
}


STICKY_MODES = {"warm": "100", "cold": "0"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """S12: every scenario runs twice, warm and forced cold, unless it sets the cache itself or
    runs no workflow code (then both modes would test the same thing twice)."""
    if "sticky_mode" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker
        own = marker("sticky_cache_set_by_test") or marker("runs_no_workflow_code")
        metafunc.parametrize("sticky_mode", ["warm"] if own else list(STICKY_MODES), indirect=True)


@pytest.fixture(autouse=True)
def sticky_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """S12: the scenario runs with the sticky cache on, or with forced cold replay.

    Worker processes and `fast_settings` read the cache capacity from the environment.
    """
    mode: str = request.param
    monkeypatch.setenv("BURROW_STICKY_CACHE_CAPACITY", STICKY_MODES[mode])
    return mode


def fast_settings(database_url: str, namespace: str = "default") -> Settings:
    """Settings with short leases and intervals, so fault tests finish quickly."""
    env = Settings.from_env(os.environ)  # the test's own AMQP prefix (tests/conftest.py)
    return Settings(
        database_url=database_url,
        namespace=namespace,
        amqp_url=env.amqp_url,
        wakes=env.wakes,
        sticky=env.sticky.model_copy(update={"owner_stale_seconds": 3}),
        worker=WorkerSettings(
            lease_seconds=2,
            repair_interval_seconds=0.2,
            poll_interval_seconds=0.02,
            max_poll_interval_seconds=0.2,
            heartbeat_interval_seconds=1,
            sticky_cache_capacity=env.worker.sticky_cache_capacity,
        ),
    )


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[Client]:
    """A client on the test database."""
    instance = await Client.connect(settings=fast_settings(database_url))
    yield instance
    await instance.close()


WorkerFactory = Callable[..., spawn.Process]


@pytest.fixture
def worker_process(database_url: str, tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start real `burrow worker` processes; every one still alive is killed at teardown."""
    started: list[spawn.Process] = []

    def start(worker_id: str, target: str = "tests.apps.flows:app", **env: str) -> spawn.Process:
        args = [sys.executable, "-m", "burrow", "worker", target, "--worker-id", worker_id]
        with (tmp_path / f"{worker_id}.log").open("wb") as log:  # the child keeps its own fd
            proc = spawn.popen(
                args,
                cwd=ROOT,
                env={**os.environ, **FAST_WORKER_ENV, "BURROW_DATABASE_URL": database_url, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


MatchingFactory = Callable[..., spawn.Process]


@pytest.fixture
def matching_process(database_url: str, tmp_path: Path) -> Iterator[MatchingFactory]:
    """Start real `burrow matching` processes; every one still alive is killed at teardown."""
    started: list[spawn.Process] = []

    def start(matching_id: str, **env: str) -> spawn.Process:
        with (tmp_path / f"{matching_id}.log").open("wb") as log:
            proc = spawn.popen(
                [sys.executable, "-m", "burrow", "matching", "--matching-id", matching_id],
                cwd=ROOT,
                env={
                    **os.environ,
                    "BURROW_REPAIR_INTERVAL_SECONDS": "0.2",
                    "BURROW_STICKY_OWNER_STALE_SECONDS": "3",
                    "BURROW_LOG_JSON": "1",
                    "BURROW_DATABASE_URL": database_url,
                    **env,
                },
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def log_tail(tmp_path: Path, lines: int = 15) -> str:
    """The last lines of every process log in `tmp_path`, for an assertion message."""
    tails = []
    for log in sorted(tmp_path.glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        tails.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(tails)


async def run_statuses(database_url: str) -> dict[str, int]:
    """How many runs are in each status, read straight from the database."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT status, count(*) AS n FROM runs GROUP BY status")
    finally:
        await conn.close()
    return {row["status"]: row["n"] for row in rows}


async def fetchval(database_url: str, query: str) -> object:
    """One value of one query, on a connection of its own."""
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def routed(exchange: str, routing_key: str, queue: str) -> bool:
    """Whether the broker routes a wake with this key to any queue (a mandatory publish)."""
    body = Wake(namespace="default", queue=queue, kind=TaskKind.WORKFLOW).encode()
    connection = await aio_pika.connect(Settings.from_env(os.environ).amqp_url, timeout=5)
    try:
        channel = await connection.channel(publisher_confirms=True)
        target = await channel.get_exchange(exchange)
        result = await target.publish(aio_pika.Message(body), routing_key, mandatory=True)
    finally:
        await connection.close()
    return not isinstance(result, DeliveredMessage)  # a Basic.Return: no queue took it
