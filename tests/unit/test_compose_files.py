"""The compose files parse, pin their images, and the clustered one is wired as it says.

compose/docker-compose.cluster.yml: three RabbitMQ nodes clustered by classic config peer
discovery (one cookie), a Postgres primary and a standby cloned by `pg_basebackup -R`, and
Burrow services that name every node and both database hosts. The local runs of both files are
tests/acceptance/test_compose_topology.py and test_compose_cluster.py.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from burrow import Settings
from burrow.config import split_amqp_urls
from burrow.server.settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
SINGLE = COMPOSE / "docker-compose.yml"
CLUSTER = COMPOSE / "docker-compose.cluster.yml"
RABBITS = {"rabbit-1", "rabbit-2", "rabbit-3"}
PRIMARY, STANDBY = "postgres-1", "postgres-2"
INTERPOLATION = re.compile(r"\$\{(?P<name>\w+):-(?P<default>[^}]*)\}")


def _services(path: Path) -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(path.read_text())["services"]
    return services


def _burrow(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if s.get("command", [None])[0] == "burrow"}


def _env(service: dict[str, Any]) -> dict[str, str]:
    raw: dict[str, str] = service.get("environment", {})
    return {key: INTERPOLATION.sub(lambda m: m["default"], value) for key, value in raw.items()}


def _pg_hosts(url: str) -> list[str]:
    netloc = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]
    return [host.rpartition(":")[0] or host for host in netloc.split(",")]


@pytest.mark.parametrize("path", [SINGLE, CLUSTER], ids=lambda p: p.name)
def test_every_image_is_pinned(path: Path) -> None:
    for name, service in _services(path).items():
        image = service["image"]
        assert ":" in image.rsplit("/", 1)[-1], f"{name}: {image} has no tag"
        assert not image.endswith(":latest"), f"{name}: {image}"


def test_the_cluster_file_pins_the_images_the_single_node_file_does() -> None:
    single = {s["image"].split(":")[0]: s["image"] for s in _services(SINGLE).values()}
    for name, service in _services(CLUSTER).items():
        image = service["image"]
        assert image == single[image.split(":")[0]], f"{name}: {image}"


def test_every_burrow_service_names_all_three_nodes_and_both_database_hosts() -> None:
    burrow = _burrow(_services(CLUSTER))
    assert set(burrow) == {"migrate", "server", "matching", "worker"}
    for name, service in burrow.items():
        env = _env(service)
        nodes = split_amqp_urls(env["BURROW_AMQP_URL"])
        assert {urllib.parse.urlsplit(node).hostname for node in nodes} == RABBITS, name
        assert env["BURROW_AMQP_QUEUE_TYPE"] == "quorum", name
        url = env["BURROW_DATABASE_URL"]
        assert _pg_hosts(url) == [PRIMARY, STANDBY], name
        assert "target_session_attrs=read-write" in url, name
        settings = Settings.from_env(env)  # the values are ones Burrow accepts
        assert len(settings.amqp_urls) == 3 and settings.wakes.queue_type == "quorum"
    server = _env(burrow["server"])
    assert _pg_hosts(server["BURROW_DATABASE_READ_URL"]) == [STANDBY]
    assert ServerSettings.load(server).database_read_url is not None


def test_the_cluster_file_documents_the_variables_it_sets() -> None:
    readme = (ROOT / "README.md").read_text()
    names = {key for s in _burrow(_services(CLUSTER)).values() for key in s["environment"]}
    assert not {n for n in names if f"`{n}`" not in readme}


def test_the_rabbit_nodes_share_a_cookie_and_discover_each_other_by_classic_config() -> None:
    services = _services(CLUSTER)
    rabbits = {name: s for name, s in services.items() if s["image"].startswith("rabbitmq:")}
    assert set(rabbits) == RABBITS
    conf = (COMPOSE / "cluster" / "rabbitmq.conf").read_text()
    assert "cluster_formation.peer_discovery_backend = classic_config" in conf
    listed = set(re.findall(r"^cluster_formation\.classic_config\.nodes\.\d+ = (\S+)$", conf, re.M))
    assert listed == {f"rabbit@{name}" for name in RABBITS}
    cookies = set()
    for name, service in rabbits.items():
        assert service["hostname"] == name  # the node is rabbit@<hostname>
        assert any(
            v.endswith(":/etc/rabbitmq/conf.d/20-cluster.conf:ro") for v in service["volumes"]
        )
        assert "/var/lib/rabbitmq/.erlang.cookie" in service["entrypoint"][-1]
        cookies.add(_env(service)["ERLANG_COOKIE"])
        assert service["healthcheck"]["test"][:2] == ["CMD", "rabbitmq-diagnostics"]
    assert len(cookies) == 1


def test_the_standby_is_cloned_from_the_primary_with_a_replication_role() -> None:
    services = _services(CLUSTER)
    primary, standby = services[PRIMARY], services[STANDBY]
    assert primary["image"] == standby["image"]
    init = [v for v in primary["volumes"] if "/docker-entrypoint-initdb.d/" in v]
    assert len(init) == 1
    script = (COMPOSE / init[0].split(":")[0]).read_text()
    assert "WITH REPLICATION LOGIN" in script
    assert "host replication replicator all scram-sha-256" in script
    clone = " ".join(standby["command"])
    assert re.search(rf"pg_basebackup -h {PRIMARY} -U replicator .*-R", clone, re.S), clone
    assert "hot_standby=on" in clone
    assert _env(standby)["PGPASSWORD"] == _env(primary)["REPLICATION_PASSWORD"]
    assert standby["depends_on"][PRIMARY]["condition"] == "service_healthy"
    for service in (primary, standby):
        assert "pg_isready -h 127.0.0.1" in service["healthcheck"]["test"][1]


def test_every_file_the_cluster_file_mounts_exists() -> None:
    for name, service in _services(CLUSTER).items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE / source).is_file(), f"{name}: {source}"
