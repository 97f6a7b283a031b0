"""Contract tests of `burrow server` through httpx on the ASGI app (lifespan included)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from durable_workflow import Client

from burrow.config import Settings
from burrow.server import ServerSettings, create_app
from burrow.server.deps import ServerState

WORKER_TOKEN = "worker-secret"
OPERATOR_TOKEN = "operator-secret"
ADMIN_TOKEN = "admin-secret"
QUEUE = "q1"

WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}", "X-Durable-Workflow-Protocol-Version": "1.20"}
CONTROL = {
    "Authorization": f"Bearer {OPERATOR_TOKEN}",
    "X-Durable-Workflow-Control-Plane-Version": "2",
}
# ["world"] in the SDK's Avro single-object encoding (PROTOCOL.md 10).
WORLD = {"codec": "avro", "blob": "wwHioz3/VYAiNwwCCgp3b3JsZAA="}
GREET = {"type": "schedule_activity", "activity_type": "greet", "queue": QUEUE, "arguments": WORLD}


def fence(task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A workflow task completion's body: the claim's lease fence, then `extra`."""
    return {
        "lease_owner": task["lease_owner"],
        "workflow_task_attempt": task["workflow_task_attempt"],
        **extra,
    }


class Api:
    """An httpx client on the app, with the server state for store-side checks."""

    def __init__(self, http: httpx.AsyncClient, state: ServerState) -> None:
        self.http = http
        self.state = state

    async def worker(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self.http.request(method, path, headers=WORKER, **kw)

    async def control(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self.http.request(method, path, headers=CONTROL, **kw)

    async def start(self, workflow_id: str, workflow_type: str = "greeter") -> dict[str, Any]:
        response = await self.control(
            "POST",
            "/api/workflows",
            json={
                "workflow_id": workflow_id,
                "workflow_type": workflow_type,
                "task_queue": QUEUE,
                "input": WORLD,
            },
        )
        assert response.status_code == 201, response.text
        body: dict[str, Any] = response.json()
        return body

    async def register(self, worker_id: str = "w1", **extra: Any) -> None:
        body = {
            "worker_id": worker_id,
            "task_queue": QUEUE,
            "runtime": "python",
            "supported_workflow_types": ["greeter"],
            "supported_activity_types": ["greet"],
            **extra,
        }
        response = await self.worker("POST", "/api/worker/register", json=body)
        assert response.status_code == 201, response.text

    async def poll_workflow(self, worker_id: str = "w1", **extra: Any) -> dict[str, Any]:
        body = {"worker_id": worker_id, "task_queue": QUEUE, "timeout_seconds": 5, **extra}
        response = await self.worker("POST", "/api/worker/workflow-tasks/poll", json=body)
        assert response.status_code == 200, response.text
        task: dict[str, Any] = response.json()["task"]
        return task

    async def poll_activity(self, worker_id: str = "w1", **extra: Any) -> dict[str, Any]:
        body = {"worker_id": worker_id, "task_queue": QUEUE, "timeout_seconds": 5, **extra}
        response = await self.worker("POST", "/api/worker/activity-tasks/poll", json=body)
        assert response.status_code == 200, response.text
        task: dict[str, Any] = response.json()["task"]
        return task


ApiFactory = Callable[..., Awaitable[Api]]


@pytest.fixture
async def make_api(database_url: str) -> AsyncIterator[ApiFactory]:
    """Build an app on the test database with the given server settings; closed at teardown."""
    stack: list[tuple[Any, httpx.AsyncClient]] = []

    async def make(**overrides: Any) -> Api:
        server = ServerSettings(
            **{
                "worker_token": WORKER_TOKEN,
                "operator_token": OPERATOR_TOKEN,
                "admin_token": ADMIN_TOKEN,
                "sweep_interval_seconds": 60.0,
                **overrides,
            }
        )
        app = create_app(server, Settings.load(database_url=database_url))
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        stack.append((lifespan, http))
        return Api(http, app.state.burrow)

    yield make
    for lifespan, http in reversed(stack):
        await http.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def api(make_api: ApiFactory) -> Api:
    """The app with split worker / operator / admin tokens."""
    return await make_api()


class InProcessClient(Client):
    """The SDK Client, not cloned for an SDK worker's query poller thread: the worker's pollers
    stay on the test's loop and on the app's transport."""


async def sdk_on_app(api: Api, cls: type[Client] = Client, **tokens: str) -> Client:
    """The SDK's Client (or a subclass) whose HTTP calls the in-process app serves.

    `tokens` are the Client's token keywords; by default the operator and worker tokens.
    Its transport is the app's, closed by the `api` fixture.
    """
    sdk = cls(
        "http://test", **(tokens or {"control_token": OPERATOR_TOKEN, "worker_token": WORKER_TOKEN})
    )
    await sdk._http.aclose()
    sdk._http = api.http
    return sdk


@pytest.fixture
async def client(api: Api) -> Client:
    """The SDK's Client with the operator and worker tokens, served by the in-process app."""
    return await sdk_on_app(api)
