"""The clustered compose file (compose/docker-compose.cluster.yml) works as declared, locally.

As test_compose_topology.py does for the single-node file, each Burrow service is started with
its exact command and environment, in `depends_on` order and after its conditions, but against a
private three-node RabbitMQ cluster and a private Postgres primary with a streaming standby:
`rabbit-1..3` map to the cluster's nodes, `postgres-1` to the primary and `postgres-2` to the
standby (the server's read replica). A workload runs; then the node every process is connected
to is stopped and a second workload runs on the two nodes left.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import urllib.parse
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from bench.pg_cluster import PgCluster
from bench.rabbit_cluster import RabbitCluster
from burrow import Settings
from burrow.config import split_amqp_urls
from burrow.server.read_replica import READ_APPLICATION_NAME
from burrow.testing import assert_eventually
from tests.acceptance.test_compose_topology import (
    ROOT,
    SERVER_HEADERS,
    Cluster,
    LocalNames,
    assert_stops_cleanly,
    compose_cli,
    load_compose,
    run_orders,
    running_topology,
    server_url,
)
from tests.support.pg_cluster import started_pg_cluster
from tests.support.private_rabbit import started_rabbit_cluster

pytestmark = [pytest.mark.slow, pytest.mark.sticky_cache_set_by_test]

CLUSTER_FILE = ROOT / "compose" / "docker-compose.cluster.yml"
RABBIT_NODES = ("rabbit-1", "rabbit-2", "rabbit-3")
PRIMARY, STANDBY = "postgres-1", "postgres-2"


@dataclass
class ClusterNames(LocalNames):
    """Multi-host URLs: each AMQP node URL and each `host:port` of a libpq host list maps on its
    own (`servers`: a rabbit host to a node's URL, a Postgres host to a local `host:port`)."""

    def url(self, value: str) -> str:
        scheme = urllib.parse.urlsplit(value).scheme
        if scheme == "amqp":
            nodes = split_amqp_urls(value)
            return ",".join(self.servers[urllib.parse.urlsplit(n).hostname or ""] for n in nodes)
        if scheme.startswith("postgres"):
            parts = urllib.parse.urlsplit(value)
            hosts = parts.netloc.rpartition("@")[2].split(",")
            local = ",".join(self.servers[host.rpartition(":")[0] or host] for host in hosts)
            path = f"/{self.database}"
            return urllib.parse.urlunsplit(
                (parts.scheme, f"postgres@{local}", path, parts.query, "")
            )
        return value


@dataclass
class Servers:
    rabbits: RabbitCluster
    postgres: PgCluster


@pytest.fixture
def servers() -> Iterator[Servers]:
    """The private RabbitMQ cluster and Postgres primary and standby, started side by side."""
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(1) as pool:  # Postgres starts while the nodes start and join
            postgres = pool.submit(stack.enter_context, started_pg_cluster("async"))
            try:
                rabbits = stack.enter_context(started_rabbit_cluster(3))
            finally:
                started = postgres.result()
        yield Servers(rabbits, started)


@pytest.fixture
def cluster(servers: Servers, burrow_amqp_prefix: str, tmp_path: Path) -> Iterator[Cluster]:
    """The cluster file's Burrow services on the private clusters; stopped at teardown."""
    rabbits, postgres = servers.rabbits, servers.postgres
    hosts = dict(zip(RABBIT_NODES, rabbits.urls, strict=True))
    hosts[PRIMARY] = f"127.0.0.1:{postgres.primary.port}"
    hosts[STANDBY] = f"127.0.0.1:{postgres.standby.port}"
    mapping = ClusterNames(
        servers=hosts,
        database=f"burrow_cluster_{uuid.uuid4().hex[:12]}",  # `burrow migrate` creates it
        prefix=burrow_amqp_prefix,
    )
    with running_topology(load_compose(CLUSTER_FILE), mapping, tmp_path) as running:
        yield running


def test_the_cluster_file_maps_every_host_to_the_private_clusters() -> None:
    """Each Burrow service's URLs name all three nodes and both database hosts, mapped here."""
    mapping = ClusterNames(
        servers={"rabbit-1": "amqp://a/", "rabbit-2": "amqp://b/", "rabbit-3": "amqp://c/"}
        | {PRIMARY: "127.0.0.1:1", STANDBY: "127.0.0.1:2"},
        database="db",
        prefix="p",
    )
    for service in load_compose(CLUSTER_FILE).services.values():
        if not service.is_burrow:
            continue
        mapping.publish(service)
        env = mapping.environment(service)
        assert env["BURROW_AMQP_URL"] == "amqp://a/,amqp://b/,amqp://c/"
        assert env["BURROW_AMQP_QUEUE_TYPE"] == "quorum"
        assert env["BURROW_DATABASE_URL"] == (
            "postgresql://postgres@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write"
        )
        if "BURROW_DATABASE_READ_URL" in env:
            assert env["BURROW_DATABASE_READ_URL"] == "postgresql://postgres@127.0.0.1:2/db"


def test_docker_compose_config_accepts_the_cluster_file() -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no Docker Compose CLI here (`docker compose` nor `docker-compose`)")
    checked = subprocess.run(
        [*cli, "-f", str(CLUSTER_FILE), "config", "--quiet"], capture_output=True, timeout=60
    )
    assert checked.returncode == 0, checked.stderr.decode()


async def _reads_on_the_standby(cluster: Cluster, postgres: PgCluster, ids: list[str]) -> None:
    """The runs listed come from the standby: the server's read pool is connected there."""
    async with httpx.AsyncClient(
        base_url=server_url(cluster), headers=SERVER_HEADERS, timeout=30
    ) as http:

        async def all_listed() -> bool:
            response = await http.get("/api/workflows", params={"page_size": 50})
            assert response.status_code == 200, response.text
            listed = {run["workflow_id"] for run in response.json()["workflows"]}
            return set(ids) <= listed

        await assert_eventually(all_listed, message="the finished orders listed")
    conn = await asyncpg.connect(postgres.standby.url("postgres"))
    try:
        readers = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = $2",
            READ_APPLICATION_NAME,
            cluster.mapping.database,
        )
    finally:
        await conn.close()
    assert readers >= 1, "the server never read from the standby"


async def test_a_workload_runs_through_the_clustered_compose_topology(
    cluster: Cluster, servers: Servers
) -> None:
    """Orders complete on the clustered topology (quorum wake queues, the failover URL, the
    standby as read replica); they complete again once the first broker node, the one every
    process connected to, is stopped; then everything stops cleanly."""
    rabbits, postgres = servers.rabbits, servers.postgres
    worker_env = cluster.mapping.environment(load_compose(CLUSTER_FILE).services["worker"])
    settings = Settings.from_env(worker_env)  # the client connects as the services do
    assert settings.amqp_urls == tuple(rabbits.urls) and settings.wakes.queue_type == "quorum"
    ids = await run_orders(cluster, settings, "cluster")
    await _reads_on_the_standby(cluster, postgres, ids)

    await asyncio.to_thread(rabbits.stop, 0)
    await run_orders(cluster, settings, "node-lost")
    for name in ("server", "matching", "worker"):
        logs = [p.read_text(errors="replace") for p in cluster.logs.glob(f"{name}-*.log")]
        assert all('"broker_reconnected"' in log for log in logs), cluster.log(name)
    assert_stops_cleanly(cluster)
