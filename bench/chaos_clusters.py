"""The chaos soak's services: one private node each, or a RabbitMQ cluster / Postgres pair.

`soak_services(options)` starts what the options ask for and removes it afterwards:

- by default a private Postgres server and a private RabbitMQ node (bench/services.py);
- `rabbit_cluster`: a three-node RabbitMQ cluster (bench/rabbit_cluster.py) instead of the one
  node; workers and client get every node's URL and quorum wake queues. Its fault
  (`rabbit_node`) stops one node, keeps it down `down_for`, starts it again and waits until all
  three run as members: one node at a time, as quorum queues need a majority;
- `postgres_failover`: a primary with a streaming standby (bench/pg_cluster.py, `replication`
  sync or async) instead of the one server; workers and client get the failover URL. Its fault
  (`failover`, once per soak) SIGKILLs the primary, waits `down_for` (a failover manager
  noticing) and promotes the standby. In async mode replication is first stopped for
  FAILOVER_WINDOW seconds, so that the standby misses commits the primary acknowledged: the
  starts and signals acknowledged from then (less STREAM_LAG_MARGIN) until the promotion began
  may be lost, and `split_expected_losses` reports those workflows apart from the violations.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from bench.chaos_report import Fault, SoakOptions, SoakReport
from bench.invariants import InvariantReport, Violation
from bench.pg_cluster import PgCluster
from bench.pg_failover import STREAM_LAG_MARGIN
from bench.rabbit_cluster import RabbitCluster
from bench.services import (
    PrivatePostgres,
    PrivateRabbit,
    close_postgres,
    new_private_postgres,
    new_private_rabbit,
)
from burrow.store import migrate

FAILOVER_WINDOW = 0.5  # async mode: seconds the standby receives nothing before the kill
CLUSTER_SIZE = 3
LOST_KINDS = ("missing", "unfinished", "failed")
ClosedBetween = Callable[[float, float], Awaitable[int | None]]  # runs closed in [a, b]


@dataclass
class SoakServices:
    """What the soak runs on: single private servers, or the clusters replacing them."""

    postgres: PrivatePostgres | None = None
    rabbit: PrivateRabbit | None = None
    rabbit_cluster: RabbitCluster | None = None
    pg_cluster: PgCluster | None = None

    @property
    def database_url(self) -> str:
        if self.pg_cluster is not None:
            return self.pg_cluster.url()
        assert self.postgres is not None
        return self.postgres.url()

    @property
    def amqp_url(self) -> str:
        if self.rabbit_cluster is not None:
            return self.rabbit_cluster.url_list
        assert self.rabbit is not None
        return self.rabbit.url

    @property
    def queue_type(self) -> str:
        return "quorum" if self.rabbit_cluster is not None else "classic"

    def describe(self) -> str:
        pg = (
            f"postgres primary+standby ({self.pg_cluster.mode}) {self.database_url}"
            if self.pg_cluster is not None
            else f"private postgres {self.database_url}"
        )
        rabbit = (
            f"rabbitmq cluster of {CLUSTER_SIZE} {self.amqp_url}"
            if self.rabbit_cluster is not None
            else f"private rabbitmq {self.rabbit.node if self.rabbit else '?'} {self.amqp_url}"
        )
        return f"# {pg}, {rabbit}"

    async def inject(
        self, kind: str, fault: Fault, down: float, report: SoakReport, closed: ClosedBetween
    ) -> None:
        """Inject a cluster fault (`rabbit_node` or `failover`), filling in `fault`."""
        if kind == "rabbit_node":
            assert self.rabbit_cluster is not None
            await _stop_rabbit_node(self.rabbit_cluster, fault, down, closed)
        else:
            assert self.pg_cluster is not None
            await _fail_over(self.pg_cluster, fault, down, report)


async def _stop_rabbit_node(
    cluster: RabbitCluster, fault: Fault, down: float, closed: ClosedBetween
) -> None:
    index = random.randrange(len(cluster.nodes))
    fault.started = time.time()
    await asyncio.to_thread(cluster.stop, index)
    stopped = time.time()
    await asyncio.sleep(down)
    starting = time.time()
    await asyncio.to_thread(cluster.start_node, index)
    await asyncio.to_thread(cluster.wait_members, len(cluster.nodes))
    fault.back = time.time()
    fault.detail = (
        f"node {index} stopped in {stopped - fault.started:.1f}s, down {down:.1f}s,"
        f" rejoined in {fault.back - starting:.1f}s,"
        f" {await closed(stopped, starting)} runs closed while it was down"
    )


async def _fail_over(cluster: PgCluster, fault: Fault, down: float, report: SoakReport) -> None:
    if cluster.promoted:
        raise RuntimeError("the standby was promoted already: one failover per soak")
    paused_at = time.time()
    if cluster.mode == "async":
        await cluster.pause_replication()
        await asyncio.sleep(FAILOVER_WINDOW)
    fault.started = await asyncio.to_thread(cluster.kill_primary)
    branch = await cluster.standby_replay_lsn()
    await asyncio.sleep(down)
    promoting_at = time.time()
    fault.back = await asyncio.to_thread(cluster.promote)
    lost = await asyncio.to_thread(cluster.lost_commits, branch)
    if cluster.mode == "async":
        report.loss_window = (paused_at - STREAM_LAG_MARGIN, promoting_at)
    fault.detail = (
        f"{cluster.mode}, promoted {fault.back - fault.started:.1f}s after the kill,"
        f" {lost} commits lost"
    )


def at_risk(report: SoakReport) -> set[str]:
    """Workflow ids with a start or signal acknowledged in the async loss window."""
    if report.loss_window is None:
        return set()
    low, high = report.loss_window
    return {w for w, times in report.acked.items() if any(low <= t <= high for t in times)}


def split_expected_losses(invariants: InvariantReport, ids: set[str]) -> list[Violation]:
    """Take the lost findings (missing, unfinished, failed) of `ids` out of the violations."""
    moved = [v for v in invariants.examples if v.kind in LOST_KINDS and v.where in ids]
    invariants.examples = [v for v in invariants.examples if v not in moved]
    for v in moved:
        invariants.violation_counts[v.kind] -= 1
        if not invariants.violation_counts[v.kind]:
            del invariants.violation_counts[v.kind]
    invariants.lost = sum(invariants.violation_counts[k] for k in LOST_KINDS)
    return moved


@contextlib.contextmanager
def soak_services(options: SoakOptions) -> Iterator[SoakServices]:
    """The started services the options ask for (see the module), removed afterwards."""
    services = SoakServices()
    with contextlib.ExitStack() as stack:
        if options.postgres_failover:
            pg = PgCluster("async" if options.replication == "async" else "sync")
            _on_exit(stack, pg.close)
            pg.start()
            services.pg_cluster = pg
        else:
            postgres, pg_root = new_private_postgres()
            _on_exit(stack, lambda: close_postgres(postgres, pg_root))
            postgres.start()
            asyncio.run(migrate.upgrade(postgres.url(), create_database=True))
            services.postgres = postgres
        if options.rabbit_cluster:
            cluster = RabbitCluster(CLUSTER_SIZE)
            _on_exit(stack, cluster.close)
            cluster.start()
            services.rabbit_cluster = cluster
        else:
            rabbit = new_private_rabbit()
            _on_exit(stack, rabbit.close)
            rabbit.start()
            services.rabbit = rabbit
        yield services


def _on_exit(stack: contextlib.ExitStack, close: object) -> None:
    """Close at the end, and atexit too: a runner ended by a signal still removes its servers."""
    assert callable(close)
    atexit.register(close)
    stack.callback(atexit.unregister, close)
    stack.callback(close)
