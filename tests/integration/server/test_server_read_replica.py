"""`burrow server` with a read replica (BURROW_DATABASE_READ_URL): lag-tolerant reads only.

A private primary and a hot standby (bench/pg_cluster.py); replication is stopped midway, so
the replica lags for certain. The shared test server is not used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from bench.pg_cluster import PgCluster
from burrow.config import Settings
from burrow.errors import ConfigurationError
from burrow.server import ServerSettings, create_app
from tests.integration.server.conftest import CONTROL, OPERATOR_TOKEN, QUEUE, WORLD
from tests.support.pg_cluster import started_pg_cluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    """A started primary and asynchronous standby, removed afterwards."""
    with started_pg_cluster("async") as instance:
        yield instance


@pytest.fixture
async def http(cluster: PgCluster) -> AsyncIterator[httpx.AsyncClient]:
    """The server app on the cluster's primary, with its standby as the read replica."""
    server = ServerSettings(
        operator_token=OPERATOR_TOKEN,
        sweep_interval_seconds=60.0,
        database_read_url=cluster.standby.url(),
    )
    app = create_app(server, Settings.load(database_url=cluster.url()))
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client
    await lifespan.__aexit__(None, None, None)


async def _closed(http: httpx.AsyncClient, workflow_id: str) -> str:
    """Start a run and terminate it; its run id."""
    start = {"workflow_id": workflow_id, "workflow_type": "greeter", "task_queue": QUEUE}
    started = await http.post("/api/workflows", headers=CONTROL, json={**start, "input": WORLD})
    assert started.status_code == 201, started.text
    done = await http.post(f"/api/workflows/{workflow_id}/terminate", headers=CONTROL)
    assert done.status_code == 200, done.text
    return str(started.json()["run_id"])


async def _replayed(cluster: PgCluster, workflow_id: str) -> None:
    conn = await asyncpg.connect(cluster.standby.url())
    try:
        deadline = time.monotonic() + 30
        query = "SELECT status FROM runs WHERE workflow_id = $1"
        while await conn.fetchval(query, workflow_id) != "terminated":
            assert time.monotonic() < deadline, "the standby did not replay the run"
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def _history(http: httpx.AsyncClient, workflow_id: str, run_id: str) -> list[Any]:
    path = f"/api/workflows/{workflow_id}/runs/{run_id}/history"
    response = await http.get(path, headers=CONTROL)
    assert response.status_code == 200, response.text
    events: list[Any] = response.json()["events"]
    return events


async def test_lists_come_from_the_replica_and_closed_histories_only_when_complete_c2(
    cluster: PgCluster, http: httpx.AsyncClient
) -> None:
    """C2: a lagging replica serves the list (a moment old) and the history of a closed run it
    has replayed; a closed run it lacks is read from the primary, and starts, terminations
    and describes (writes and fenced reads) never touch it: a standby would refuse a write."""
    replicated = await _closed(http, "replicated")
    await _replayed(cluster, "replicated")
    await cluster.pause_replication()
    behind = await _closed(http, "behind")

    listed = await http.get("/api/workflows", headers=CONTROL)
    assert listed.status_code == 200, listed.text
    assert [w["workflow_id"] for w in listed.json()["workflows"]] == ["replicated"]
    described = await http.get("/api/workflows/behind", headers=CONTROL)
    assert described.status_code == 200, described.text
    assert described.json()["run_id"] == behind

    for workflow_id, run_id in (("replicated", replicated), ("behind", behind)):
        events = await _history(http, workflow_id, run_id)
        assert len(events) >= 2, events
        assert str(events[-1]).count("Terminated") >= 1, events[-1]


def test_a_malformed_read_url_is_refused_naming_the_variable_without_its_password() -> None:
    with pytest.raises(ConfigurationError) as refused:
        ServerSettings.load({"BURROW_DATABASE_READ_URL": "postgresql://u:s3cret@h1:1,h2:x/b"})
    assert "BURROW_DATABASE_READ_URL" in str(refused.value)
    assert "s3cret" not in str(refused.value)
