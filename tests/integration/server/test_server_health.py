"""`GET /api/health` answers as the reference server does (issue 27 item 7, SPEC M8).

The SDK's own integration test asserts `status == "serving"`. The outage case runs on a private
Postgres of this module's own; the shared test server is never stopped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import httpx
import pytest

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from tests.integration.server.conftest import ADMIN_TOKEN, Api
from tests.support.private_postgres import PrivatePostgres, private_postgres


async def test_health_answers_serving_with_the_database_check_m8(api: Api) -> None:
    """M8: 200 `{"status": "serving", "timestamp", "checks": {"database": "ok"}}`, no token."""
    response = await api.http.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "serving"
    assert body["checks"] == {"database": "ok"}
    assert datetime.fromisoformat(body["timestamp"]).tzinfo is not None
    assert set(body) == {"status", "timestamp", "checks"}


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A private Postgres this module stops."""
    with private_postgres() as instance:
        yield instance


@pytest.fixture
async def private_api(server: PrivatePostgres) -> AsyncIterator[Api]:
    """The app on the private server."""
    if not server.is_running():
        server.start()
    app = create_app(
        ServerSettings(admin_token=ADMIN_TOKEN, sweep_interval_seconds=60.0),
        Settings.load(database_url=server.url()),
    )
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
    try:
        yield Api(http, app.state.burrow)
    finally:
        await http.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.mark.slow
async def test_health_is_503_degraded_while_the_database_is_down_m8(
    server: PrivatePostgres, private_api: Api
) -> None:
    """M8: with the database stopped, 503 `degraded` with `checks.database == "unavailable"`;
    once it is back, 200 with the database `ok` (a repair pass that failed meanwhile may keep
    the status `degraded` until it next succeeds)."""
    assert (await private_api.http.get("/api/health")).json()["status"] == "serving"
    server.stop()
    down = await private_api.http.get("/api/health")
    assert down.status_code == 503
    assert down.json()["status"] == "degraded"
    assert down.json()["checks"] == {"database": "unavailable"}
    server.start()
    back = await private_api.http.get("/api/health")
    assert (back.status_code, back.json()["checks"]) == (200, {"database": "ok"})
