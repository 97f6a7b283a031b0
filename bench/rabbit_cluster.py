"""A private RabbitMQ cluster: N `PrivateRabbit` nodes joined into one, for node-loss tests.

The nodes share one Erlang cookie (each in its own HOME) and join the first node's cluster
(`stop_app`, `join_cluster`, `start_app`). `stop(i)` and `start(i)` take one node down and bring
it back, as a crashed or upgraded node would go; `close()` removes them all. The shared broker
is never touched.

`python -m bench.rabbit_cluster --measure` also measures the time to recovery: it runs real
worker processes and a client against a three-node cluster with quorum wake queues, stops the
node they are connected to, and reports how long until a workflow started after the stop
completes and wakes flow again (see `bench/README.md`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.services import PrivateRabbit, ServiceError, _give_to, rabbit_bin_dir

COOKIE_FILE = ".erlang.cookie"


class RabbitCluster:
    """N private RabbitMQ nodes in one cluster, on free local ports.

    Args:
        size: How many nodes (at least one).
    """

    def __init__(self, size: int = 3) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one node, got {size}")
        bin_dir = rabbit_bin_dir()
        if bin_dir is None:
            raise ServiceError("no RabbitMQ server (rabbitmq-server) on this machine")
        cookie = secrets.token_hex(16).upper()
        self.nodes: list[PrivateRabbit] = []
        try:
            for _ in range(size):
                node = PrivateRabbit(bin_dir, Path(tempfile.mkdtemp(prefix="burrow-rabbit-")))
                self.nodes.append(node)
                _write_cookie(node, cookie)
        except BaseException:
            self.close()
            raise

    @property
    def urls(self) -> list[str]:
        """Each node's AMQP URL, in node order."""
        return [node.url for node in self.nodes]

    @property
    def url_list(self) -> str:
        """All nodes' URLs comma-separated, as BURROW_AMQP_URL takes them."""
        return ",".join(self.urls)

    def start(self) -> None:
        """Start every node and join the others to the first node's cluster."""
        first = self.nodes[0]
        with ThreadPoolExecutor(len(self.nodes)) as pool:  # each start mostly waits
            for started in [pool.submit(node.start) for node in self.nodes]:
                started.result()
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first.node)
            node.ctl("start_app")
        self.wait_members(len(self.nodes))

    def running_members(self, via: int | None = None) -> list[str]:
        """The running nodes' names, as one running node sees them."""
        node = self._running_node(via)
        status = node.ctl("eval", "rabbit_nodes:all_running().")
        return [name for name in self._names() if name in status]

    def wait_members(self, count: int, *, via: int | None = None) -> None:
        """Wait until `count` nodes run as members of the cluster (ServiceError after 60 s)."""
        for _ in range(300):
            with contextlib.suppress(ServiceError):
                if len(self.running_members(via)) == count:
                    return
            time.sleep(0.2)
        raise ServiceError(f"the cluster did not reach {count} running members")

    def connection_ports(self, via: int) -> dict[str, int]:
        """Each Burrow connection's name and the AMQP port (so the node) it is connected to,
        as node `via` sees the cluster's connections."""
        out = self.nodes[via].ctl(
            "-q", "list_connections", "client_properties", "port", "--formatter", "json"
        )
        found: dict[str, int] = {}
        for row in json.loads(out):
            properties = {key: value for key, _, value in row["client_properties"]}
            name = str(properties.get("connection_name", ""))
            if name.startswith("burrow-"):
                found[name] = int(row["port"])
        return found

    def stop(self, index: int) -> None:
        """Stop one node (its clients see their connections closed)."""
        self.nodes[index].stop()

    def start_node(self, index: int) -> None:
        """Start a stopped node again; it rejoins the cluster it left."""
        self.nodes[index].start()

    def close(self) -> None:
        """Stop every node and delete their directories."""
        if not self.nodes:
            return
        with ThreadPoolExecutor(len(self.nodes)) as pool:  # each stop mostly waits
            for closing in [pool.submit(node.close) for node in self.nodes]:
                with contextlib.suppress(Exception):
                    closing.result()

    def _names(self) -> list[str]:
        return [node.node for node in self.nodes]

    def _running_node(self, via: int | None) -> PrivateRabbit:
        candidates = self.nodes if via is None else [self.nodes[via]]
        for node in candidates:
            if node.is_running():
                return node
        raise ServiceError("no node of the cluster runs")


def _write_cookie(node: PrivateRabbit, cookie: str) -> None:
    # The node and rabbitmqctl read it from HOME (the node's root); Erlang wants it private.
    path = node.root / COOKIE_FILE
    path.write_text(cookie)
    path.chmod(0o400)
    _give_to(node._account, path)


@contextlib.contextmanager
def rabbit_cluster(size: int = 3) -> Iterator[RabbitCluster]:
    """A started cluster of `size` nodes; closed afterwards."""
    cluster = RabbitCluster(size)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def main(argv: list[str] | None = None) -> int:
    """`--measure`: time to recovery (bench/rabbit_recovery.py); else run a cluster until ^C."""
    parser = argparse.ArgumentParser(prog="python -m bench.rabbit_cluster", description=__doc__)
    parser.add_argument("--measure", action="store_true", help="measure time to recovery")
    parser.add_argument("--nodes", type=int, default=3, help="cluster size (without --measure)")
    parser.add_argument("--stops", type=int, default=5, help="node stops to measure")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--rate", type=float, default=20.0, help="workflows started per second")
    parser.add_argument("--queue-type", choices=("classic", "quorum"), default="quorum")
    args = parser.parse_args(argv)
    if args.measure:
        from bench.rabbit_recovery import RecoveryOptions, measure

        options = RecoveryOptions(
            stops=args.stops, workers=args.workers, rate=args.rate, queue_type=args.queue_type
        )
        return measure(options)
    with rabbit_cluster(args.nodes) as cluster:
        print(f"BURROW_AMQP_URL={cluster.url_list}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
