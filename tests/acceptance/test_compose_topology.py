"""The local cluster of compose/ (C5) works as declared, run here as local processes.

Docker does not run in every test environment, so each Burrow service of the compose file is
started with its exact command and environment against the test's Postgres and RabbitMQ: service
host names map to the test servers, the database to a fresh one (which the one-shot `migrate`
creates), published ports to free local ones, and the AMQP prefix to the test's own. Services
start in `depends_on` order and wait on its conditions (a one-shot's exit 0, a health check's
success), `deploy.replicas` processes each; then a workload goes through the server's control
plane and Burrow's client, and everything is stopped (each exits 0 on SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
import sqlalchemy as sa
import yaml
from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import create_async_engine

from burrow import Client, Settings
from burrow.codec import encode
from burrow.demo import TASK_QUEUE, Order, OrderWorkflow
from burrow.store import Store
from burrow.store.engine import async_url
from burrow.testing import assert_eventually

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = ROOT / "compose" / "Dockerfile"
START_SECONDS = 60.0
STOP_SECONDS = 45.0
# Compose's `${NAME:-default}`; the test uses the defaults, whatever the environment says.
INTERPOLATION = re.compile(r"\$\{(?P<name>\w+):-(?P<default>[^}]*)\}")


class DependsOn(BaseModel):
    """One `depends_on` entry in long form."""

    model_config = ConfigDict(extra="forbid")
    condition: Literal["service_started", "service_healthy", "service_completed_successfully"]


class Healthcheck(BaseModel):
    """The part of a health check the test runs: the command and how long to retry it."""

    model_config = ConfigDict(extra="allow")
    test: list[str]
    retries: int = 3


class Deploy(BaseModel):
    """`deploy`: only the replica count matters here."""

    model_config = ConfigDict(extra="allow")
    replicas: int = 1


class Service(BaseModel):
    """A compose service, with the keys the local run honours (others are kept, unused)."""

    model_config = ConfigDict(extra="allow")
    image: str
    command: list[str] | None = None
    environment: dict[str, str] = {}
    depends_on: dict[str, DependsOn] = {}
    healthcheck: Healthcheck | None = None
    deploy: Deploy = Deploy()
    ports: list[str] = []
    restart: str = "no"

    @property
    def is_burrow(self) -> bool:
        return self.command is not None and self.command[:1] == ["burrow"]


class ComposeFile(BaseModel):
    """The compose file's services and named volumes (x- extension fields are YAML anchors)."""

    model_config = ConfigDict(extra="allow")
    services: dict[str, Service]
    volumes: dict[str, Any] = {}


def load_compose(path: Path = COMPOSE_FILE) -> ComposeFile:
    return ComposeFile.model_validate(yaml.safe_load(path.read_text()))


def _interpolate(value: str) -> str:
    return INTERPOLATION.sub(lambda m: m["default"], value)


def start_order(compose: ComposeFile) -> list[str]:
    """The Burrow services, each after the services it depends on."""
    ordered: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {[*path, name]}"
        if name in ordered or not compose.services[name].is_burrow:
            return
        for dependency in compose.services[name].depends_on:
            visit(dependency, (*path, name))
        ordered.append(name)

    for name in compose.services:
        visit(name, ())
    return ordered


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalNames:
    """How compose names become the test's: servers, database, prefix and published ports."""

    servers: dict[str, str]  # compose service host -> the test server URL it stands for
    database: str
    prefix: str
    ports: dict[int, int] = field(default_factory=dict)  # container port -> local port

    def url(self, value: str) -> str:
        parts = urllib.parse.urlsplit(value)
        target = self.servers.get(parts.hostname or "")
        if not parts.scheme or target is None:
            return value
        if parts.scheme.startswith("postgres"):
            return (
                async_url(target)
                .set(database=self.database)
                .render_as_string(hide_password=False)
                .replace("postgresql+asyncpg://", "postgresql://")
            )
        return target

    def environment(self, service: Service) -> dict[str, str]:
        env: dict[str, str] = {}
        for key, raw in service.environment.items():
            value = self.url(_interpolate(raw))
            if key == "BURROW_AMQP_PREFIX":
                value = self.prefix
            elif key == "BURROW_SERVER_HOST":
                value = "127.0.0.1"  # what compose publishes; never bind beyond loopback here
            elif key == "BURROW_SERVER_PORT":
                value = str(self.ports[int(value)])
            env[key] = value
        return env

    def publish(self, service: Service) -> None:
        for spec in service.ports:
            container = int(spec.rsplit(":", 1)[-1])
            self.ports.setdefault(container, free_port())

    def healthcheck_argv(self, check: Healthcheck) -> list[str]:
        kind, *argv = check.test
        assert kind == "CMD", f"health checks run as CMD, not {kind}"
        argv = [sys.executable if a == "python" else a for a in argv]
        for container, local in self.ports.items():
            argv = [a.replace(f":{container}/", f":{local}/") for a in argv]
        return argv


@dataclass
class Cluster:
    """The started processes of each service, and where the server listens."""

    mapping: LocalNames
    logs: Path
    processes: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)

    def log(self, name: str) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-4000:] for p in sorted(self.logs.glob(f"{name}-*.log"))
        )

    def start(self, name: str, service: Service, base_env: Mapping[str, str]) -> None:
        assert service.command is not None
        self.mapping.publish(service)
        env = {**base_env, **self.mapping.environment(service)}
        argv = [sys.executable, "-m", "burrow", *service.command[1:]]
        started = []
        for replica in range(1, service.deploy.replicas + 1):
            with (self.logs / f"{name}-{replica}.log").open("wb") as out:
                started.append(
                    subprocess.Popen(
                        argv, cwd=self.logs, env=env, stdout=out, stderr=subprocess.STDOUT
                    )
                )
        self.processes[name] = started

    def wait_for(self, name: str, dependency: DependsOn, service: Service) -> None:
        if name not in self.processes:
            return  # a server of the test's own (Postgres, RabbitMQ): up, or the test skipped
        if dependency.condition == "service_completed_successfully":
            for proc in self.processes[name]:
                code = proc.wait(timeout=START_SECONDS)
                assert code == 0, f"{name} exited {code}:\n{self.log(name)}"
            self.done.add(name)
        elif dependency.condition == "service_healthy":
            assert service.healthcheck is not None, f"{name} has no health check to wait for"
            self.wait_healthy(name, service.healthcheck)
        else:
            assert all(p.poll() is None for p in self.processes[name]), self.log(name)

    def wait_healthy(self, name: str, check: Healthcheck) -> None:
        argv = self.mapping.healthcheck_argv(check)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            assert all(p.poll() is None for p in self.processes[name]), self.log(name)
            if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"{name} never became healthy:\n{self.log(name)}")

    def stop(self) -> dict[str, list[int | None]]:
        """SIGTERM every long-running process (dependents first); their exit codes."""
        codes: dict[str, list[int | None]] = {}
        for name in reversed(list(self.processes)):
            if name in self.done:
                continue
            for proc in self.processes[name]:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            codes[name] = []
            for proc in self.processes[name]:
                try:
                    codes[name].append(proc.wait(timeout=STOP_SECONDS))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    codes[name].append(None)
        return codes


async def _drop_database(server_url: str, name: str) -> None:
    engine = create_async_engine(async_url(server_url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


@contextlib.contextmanager
def running_topology(compose: ComposeFile, mapping: LocalNames, logs: Path) -> Iterator[Cluster]:
    """The compose file's Burrow services, started in order and healthy; stopped on exit."""
    running = Cluster(mapping, logs)
    # Only what a container would have: no BURROW_*/DW_* from this process leaks in.
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("BURROW_", "DW_"))}
    try:
        for name in start_order(compose):
            service = compose.services[name]
            for dependency, condition in service.depends_on.items():
                running.wait_for(dependency, condition, compose.services[dependency])
            running.start(name, service, base_env)
        for name in running.processes:  # as `docker compose up --wait`: healthy, or running
            check = compose.services[name].healthcheck
            if check is not None:
                running.wait_healthy(name, check)
        yield running
    finally:
        running.stop()


@pytest.fixture
def cluster(
    burrow_postgres_url: str, burrow_amqp_url: str, burrow_amqp_prefix: str, tmp_path: Path
) -> Iterator[Cluster]:
    """The compose topology's Burrow services, started in order; stopped at teardown."""
    database = f"burrow_compose_{uuid.uuid4().hex[:12]}"
    mapping = LocalNames(
        servers={"postgres": burrow_postgres_url, "rabbitmq": burrow_amqp_url},
        database=database,
        prefix=burrow_amqp_prefix,
    )
    try:
        with running_topology(load_compose(), mapping, tmp_path) as running:
            yield running
    finally:
        asyncio.run(_drop_database(burrow_postgres_url, database))


def test_the_compose_file_declares_the_cluster() -> None:
    """C5: Postgres, RabbitMQ with its management UI, a one-shot migrate that the Burrow services
    wait for, server, matching and two workers, health checks and named volumes."""
    compose = load_compose()
    services = compose.services
    assert services["rabbitmq"].image == "rabbitmq:3-management"
    assert services["postgres"].healthcheck and services["rabbitmq"].healthcheck
    commands = {name: s.command for name, s in services.items() if s.is_burrow}
    assert commands == {
        "migrate": ["burrow", "migrate"],
        "server": ["burrow", "server"],
        "matching": ["burrow", "matching"],
        "worker": ["burrow", "worker", "burrow.demo:app"],
    }
    assert services["worker"].deploy.replicas == 2
    # One shape for the whole deployment: workers leave sweeping to the matching role.
    assert all(
        s.environment["DW_V2_MATCHING_ROLE_QUEUE_WAKE"] == "0"
        for s in services.values()
        if s.is_burrow
    )
    assert services["migrate"].restart == "no"
    assert services["migrate"].depends_on["postgres"].condition == "service_healthy"
    for name in ("server", "matching", "worker"):
        assert services[name].depends_on["migrate"].condition == "service_completed_successfully"
        assert services[name].depends_on["rabbitmq"].condition == "service_healthy"
    assert services["server"].healthcheck is not None
    assert set(compose.volumes) == {"postgres-data", "rabbitmq-data"}
    assert {p.rsplit(":", 1)[-1] for p in services["rabbitmq"].ports} >= {"5672", "15672"}


def test_every_variable_the_compose_file_sets_is_documented() -> None:
    readme = (ROOT / "README.md").read_text()
    names = {key for s in load_compose().services.values() if s.is_burrow for key in s.environment}
    assert names, "no Burrow environment"
    assert not {n for n in names if f"`{n}`" not in readme}


def test_the_dockerfile_installs_the_package_from_the_sources_it_copies() -> None:
    lines = [line.split() for line in DOCKERFILE.read_text().splitlines() if line.strip()]
    instructions = [line for line in lines if not line[0].startswith("#")]
    assert instructions[0] == ["FROM", "python:3.12-slim"]
    copied = [source for line in instructions if line[0] == "COPY" for source in line[1:-1]]
    assert {"pyproject.toml", "runtime", "store", "broker"} <= set(copied)
    assert all((ROOT / source).exists() for source in copied)
    assert any(line[:4] == ["RUN", "pip", "install", "."] for line in instructions)


def compose_cli() -> list[str] | None:
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        probe = subprocess.run([*argv, "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return argv
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no Docker Compose CLI here (`docker compose` nor `docker-compose`)")
    checked = subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), "config", "--quiet"], capture_output=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr.decode()


SERVER_HEADERS = {
    "Authorization": "Bearer dev-token",
    "X-Durable-Workflow-Control-Plane-Version": "2",
}


def server_url(cluster: Cluster) -> str:
    return f"http://127.0.0.1:{cluster.mapping.ports[8080]}"


async def run_orders(cluster: Cluster, settings: Settings, tag: str) -> list[str]:
    """Orders `tag-1` to `tag-4`, started over the server's control plane and by Burrow's client,
    approved by signal or by their timer, all completed by the two worker replicas; their ids."""
    store = Store.connect(settings.database_url, pool_size=1)
    try:

        async def both_replicas_live() -> bool:
            live = await store.live_workers(
                namespace="default", task_queue=TASK_QUEUE, stale_after=timedelta(seconds=30)
            )
            return len(live) == 2

        await assert_eventually(both_replicas_live, message="two live workers on the demo queue")
    finally:
        await store.close()

    ids = [f"{tag}-{n}" for n in range(1, 5)]

    def order(n: int) -> dict[str, Any]:
        return {"order_id": ids[n - 1], "amount_cents": 100 * n, "items": ["a"] * n}

    async with httpx.AsyncClient(
        base_url=server_url(cluster), headers=SERVER_HEADERS, timeout=30
    ) as http:

        async def matching_is_live() -> bool:
            response = await http.get("/api/system/operator-metrics")
            assert response.status_code == 200, response.text
            metrics = response.json()["operator_metrics"]
            shape = metrics["matching_role"]["shape"]
            return bool(shape == "dedicated" and metrics["repair"]["matching_processes"] == 1)

        await assert_eventually(matching_is_live, message="one live dedicated matching process")
        for n in (1, 2):
            started = await http.post(
                "/api/workflows",
                json={
                    "workflow_id": ids[n - 1],
                    "workflow_type": "OrderWorkflow",
                    "task_queue": TASK_QUEUE,
                    "input": encode([order(n)]),
                },
            )
            assert started.status_code == 201, started.text
        signalled = await http.post(
            f"/api/workflows/{ids[0]}/signal/approve", json={"input": encode(["http-operator"])}
        )
        assert signalled.status_code == 202, signalled.text

        async with await Client.connect(settings=settings) as client:
            for n in (3, 4):
                await client.start_workflow(
                    OrderWorkflow.run, Order(**order(n)), id=ids[n - 1], task_queue=TASK_QUEUE
                )
            await client.get_handle(ids[2]).signal(OrderWorkflow.approve, "sdk-operator")
            results = await asyncio.gather(*(client.get_handle(i).result(timeout=90) for i in ids))
        statuses = [(await http.get(f"/api/workflows/{i}")).json()["status"] for i in ids]

    assert [r["order_id"] for r in results] == ids
    assert [r["status"] for r in results] == [
        "approved by http-operator",
        "auto-approved",
        "approved by sdk-operator",
        "auto-approved",
    ]
    assert [r["shipment"] for r in results] == [f"shipment-of-{n}-items" for n in range(1, 5)]
    assert statuses == ["completed"] * 4
    return ids


def assert_stops_cleanly(cluster: Cluster) -> None:
    """Every long-running process exits 0 on SIGTERM."""
    codes = cluster.stop()
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal: the server's exit
    # status is SIGTERM's (143 in a container), as for any uvicorn app.
    if codes.get("server") == [-signal.SIGTERM]:
        codes["server"] = [0]
    assert codes == {"worker": [0, 0], "matching": [0], "server": [0]}, {
        name: cluster.log(name) for name in codes
    }


async def test_a_workload_runs_through_the_compose_topology(
    cluster: Cluster, burrow_amqp_url: str, burrow_amqp_prefix: str
) -> None:
    """C5: orders started over the server's control plane and by Burrow's client, approved by
    signal or by their timer, are all completed by the two worker replicas; then everything
    stops cleanly."""
    settings = Settings.load(
        {},
        database_url=cluster.mapping.url("postgresql://postgres@postgres/burrow"),
        amqp_url=burrow_amqp_url,
        wakes={"prefix": burrow_amqp_prefix},
    )
    await run_orders(cluster, settings, "compose")
    assert_stops_cleanly(cluster)
