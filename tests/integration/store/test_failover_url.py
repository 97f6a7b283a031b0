"""A failover URL reaches the primary only, and the promoted standby after a failover (C2, D4).

A private primary with a synchronous standby (bench/pg_cluster.py); the shared server is never
touched. The URL names the standby first: asyncpg must skip it (`target_session_attrs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from bench.pg_cluster import PgCluster
from burrow.store import Store, migrate
from burrow.store import schema as s
from burrow.store.engine import create_database_if_missing
from burrow.store.errors import LeaseRefusal, StaleLease, StoreUnavailable
from tests.support.pg_cluster import started_pg_cluster
from tests.support.store import blob, claim_act, rows, start_with_activity

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    """A started primary and synchronous standby, removed afterwards."""
    with started_pg_cluster("sync") as instance:
        yield instance


def standby_first(cluster: PgCluster, database: str = "burrow") -> str:
    """The failover URL with the standby listed before the primary."""
    hosts = f"127.0.0.1:{cluster.standby.port},127.0.0.1:{cluster.primary.port}"
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"


async def server_port(store: Store) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(text("SELECT inet_server_port()")))


@contextlib.contextmanager
def silent_host() -> Iterator[int]:
    """A port that takes TCP connections and never answers: a machine gone, as clients see it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # the kernel completes the handshakes; nothing ever replies
        yield int(sock.getsockname()[1])


async def test_the_failover_url_skips_the_standby_for_every_kind_of_connection_c2(
    cluster: PgCluster,
) -> None:
    """C2: the store, migrations and database creation all reach the writable server."""
    url = standby_first(cluster)
    await migrate.upgrade(url)  # alembic, through the same URL; already at head: a no-op
    assert await create_database_if_missing(standby_first(cluster, "burrow_other")) is True
    store = Store.connect(url, pool_size=2)
    try:
        assert await server_port(store) == cluster.primary.port
        await start_with_activity(store, "failover-url")
    finally:
        await store.close()


async def test_a_silent_host_listed_first_is_passed_over_within_its_own_timeout_c2(
    cluster: PgCluster,
) -> None:
    """C2: a dead machine (connections neither refused nor answered) costs its own bounded
    attempt; it does not use up the whole connect timeout before the next host is tried."""
    with silent_host() as port:
        hosts = f"127.0.0.1:{port},127.0.0.1:{cluster.primary.port}"
        store = Store.connect(f"postgresql://postgres@{hosts}/burrow", pool_size=1)
        try:
            assert await server_port(store) == cluster.primary.port
        finally:
            await store.close()


async def test_a_completion_whose_reply_was_lost_in_the_failover_is_recorded_once_d3_d4(
    cluster: PgCluster,
) -> None:
    """D3, D4: after the primary dies, pooled connections fail as StoreUnavailable (callers
    retry); new ones land on the promoted standby, nothing pins the old server, and an activity
    result committed just before the kill (its reply lost) is refused as `already_recorded`
    when sent again: recorded once. Warm workflow state is fenced by the new server epoch."""
    store = Store.connect(standby_first(cluster), pool_size=2)
    try:
        run_id = await start_with_activity(store, "failover-reply")
        attempt = await claim_act(store)
        await store.complete_activity_task(lease=attempt.lease, result=blob(7))  # reply "lost"
        assert store.server_epochs.epoch == 0

        await asyncio.to_thread(cluster.kill_primary)
        with pytest.raises(StoreUnavailable):
            await store.complete_activity_task(lease=attempt.lease, result=blob(7))
        with pytest.raises(StoreUnavailable):  # only a standby answers: not for a writer
            await store.get_run(namespace="default", workflow_id="failover-reply", run_id=None)
        await asyncio.to_thread(cluster.promote)

        with pytest.raises(StaleLease) as again:
            await store.complete_activity_task(lease=attempt.lease, result=blob(7))
        assert again.value.reason is LeaseRefusal.ALREADY_RECORDED
        assert await server_port(store) == cluster.standby.port
        assert store.server_epochs.epoch == 1
        recorded = [*await rows(store, s.history_events, run_id)]
        recorded += await rows(store, s.inbox_events, run_id)  # moved in at the next claim
        assert [e["event_type"] for e in recorded].count("ActivityCompleted") == 1
    finally:
        await store.close()
