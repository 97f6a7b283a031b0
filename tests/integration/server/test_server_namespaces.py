"""Namespaces and retention over HTTP (issue 30; reference NamespaceController, its feature test,
NamespaceResolverMiddlewareTest and HistoryRetentionTest): the SDK Client's list_namespaces,
describe_namespace, create_namespace, update_namespace, delete_namespace, retention_status and
retention_pass against `burrow server`; every refusal typed, with nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from durable_workflow import Client
from durable_workflow.errors import InvalidArgument, NamespaceNotFound, ServerError

from burrow.store import schema as s
from tests.integration.server.conftest import ADMIN_TOKEN, CONTROL, QUEUE, WORLD, Api
from tests.support.store import execute, rows

ROUTE = "/api/namespaces"
ADMIN = {**CONTROL, "Authorization": f"Bearer {ADMIN_TOKEN}"}


async def sdk_client(api: Api, namespace: str = "default") -> Client:
    """The SDK's Client with the admin token, its HTTP calls served by the in-process app."""
    client = Client("http://test", token=ADMIN_TOKEN, namespace=namespace)
    await client._http.aclose()
    client._http = api.http  # closed by the api fixture
    return client


@pytest.fixture
async def client(api: Api) -> AsyncIterator[Client]:
    yield await sdk_client(api)


async def start_in(api: Api, namespace: str, workflow_id: str) -> Any:
    return await api.http.post(
        "/api/workflows",
        headers={**CONTROL, "X-Namespace": namespace},
        json={
            "workflow_id": workflow_id,
            "workflow_type": "greeter",
            "task_queue": QUEUE,
            "input": WORLD,
        },
    )


async def test_the_sdk_client_creates_lists_describes_updates_and_deletes(client: Client) -> None:
    """Issue 30, reference NamespaceControllerTest: names are stored lowercase and found in any
    case; a namespace made without a window keeps runs 30 days; update changes only what it is
    given; delete answers the namespace with `deleted`, and it is gone."""
    made = await client.create_namespace("Team-A", description="billing", retention_days=7)
    assert (made.name, made.description, made.retention_days, made.status) == (
        "team-a",
        "billing",
        7,
        "active",
    )
    assert made.created_at and made.updated_at
    plain = await client.create_namespace("minimal.ns_1", retention_days=None)  # type: ignore[arg-type]
    assert plain.retention_days == 30
    listed = await client.list_namespaces()
    assert [n.name for n in listed.namespaces] == ["default", "minimal.ns_1", "team-a"]
    assert (await client.describe_namespace("TEAM-A")).description == "billing"

    changed = await client.update_namespace("team-a", retention_days=14)
    assert (changed.description, changed.retention_days) == ("billing", 14)
    assert changed.updated_at and changed.updated_at >= made.updated_at  # type: ignore[operator]
    renamed = await client.update_namespace("team-a", description="payments")
    assert (renamed.description, renamed.retention_days) == ("payments", 14)

    gone = await client.delete_namespace("team-a")
    assert (gone.name, gone.status, gone.deleted) == ("team-a", "deleted", {})
    with pytest.raises(NamespaceNotFound):
        await client.describe_namespace("team-a")
    assert [n.name for n in (await client.list_namespaces()).namespaces] == [
        "default",
        "minimal.ns_1",
    ]


async def test_the_server_serves_every_namespace_of_the_store(make_api: Any) -> None:
    """Issue 30, reference NamespaceResolverMiddlewareTest: BURROW_SERVER_NAMESPACES is created
    at start; a namespace created later is served at once, and no longer once deleted."""
    api = await make_api(namespaces=("default", "boot"))
    client = await sdk_client(api)
    assert [n.name for n in (await client.list_namespaces()).namespaces] == ["boot", "default"]
    assert (await start_in(api, "boot", "wf-boot")).status_code == 201
    refused = await start_in(api, "later", "wf-1")
    assert (refused.status_code, refused.json()["reason"]) == (404, "namespace_not_found")

    await client.create_namespace("later")
    started = await start_in(api, "later", "wf-1")
    assert started.status_code == 201, started.text
    later = await sdk_client(api, "later")
    assert (await later.describe_namespace("later")).name == "later"

    deleted = await client._request("DELETE", "/namespaces/later?force=true")
    assert deleted["deleted"]["runs"] == 1 and deleted["deleted"]["history_events"] >= 1
    again = await start_in(api, "later", "wf-2")
    assert (again.status_code, again.json()["reason"]) == (404, "namespace_not_found")
    assert [r for r in await rows(api.state.store, s.runs) if r["namespace"] == "later"] == []


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "reason"),
    [
        ("POST", ROUTE, {"name": "existing"}, 409, "namespace_already_exists"),
        ("POST", ROUTE, {"name": "EXISTING"}, 409, "namespace_already_exists"),
        ("POST", ROUTE, {"name": "bad name!"}, 422, "validation_failed"),
        ("POST", ROUTE, {"name": "x" * 129}, 422, "validation_failed"),
        ("POST", ROUTE, {}, 422, "validation_failed"),
        ("POST", ROUTE, {"name": "n", "retention_days": 0}, 422, "validation_failed"),
        ("POST", ROUTE, {"name": "n", "retention_days": 366}, 422, "validation_failed"),
        ("POST", ROUTE, {"name": "n", "retention_days": "7"}, 422, "validation_failed"),
        ("POST", ROUTE, {"name": "n", "description": "d" * 1001}, 422, "validation_failed"),
        ("PUT", ROUTE + "/existing", {"retention_days": 400}, 422, "validation_failed"),
        ("PUT", ROUTE + "/nope", {"retention_days": 5}, 404, "namespace_not_found"),
        ("GET", ROUTE + "/nope", None, 404, "namespace_not_found"),
        ("DELETE", ROUTE + "/nope", None, 404, "namespace_not_found"),
        ("DELETE", ROUTE + "/existing", None, 409, "namespace_not_empty"),
    ],
)
async def test_refusals_are_typed_and_write_nothing(
    api: Api,
    client: Client,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    reason: str,
) -> None:
    """Issue 30, reference NamespaceControllerTest: duplicates (any case) are 409, bad names,
    windows and descriptions 422, unknown names 404, and a namespace holding runs is not
    deleted without force; the store is as it was."""
    await client.create_namespace("existing", description="kept", retention_days=9)
    assert (await start_in(api, "existing", "wf-1")).status_code == 201
    before = (await rows(api.state.store, s.namespaces), await rows(api.state.store, s.runs))

    answer = await api.http.request(method, path, headers=ADMIN, json=body)

    assert (answer.status_code, answer.json()["reason"]) == (status, reason), answer.text
    after = (await rows(api.state.store, s.namespaces), await rows(api.state.store, s.runs))
    assert after == before


async def test_sdk_errors_and_roles(api: Api, client: Client) -> None:
    """Issue 30: the SDK raises its typed errors; writes need the admin role, reads the
    operator role, like the reference's route group."""
    with pytest.raises(NamespaceNotFound):
        await client.describe_namespace("nope")
    with pytest.raises(InvalidArgument):
        await client.create_namespace("bad name!")
    await client.create_namespace("dup")
    with pytest.raises(ServerError) as taken:
        await client.create_namespace("dup")
    assert taken.value.reason() == "namespace_already_exists"
    assert (await start_in(api, "dup", "wf-1")).status_code == 201
    with pytest.raises(ServerError) as held:
        await client.delete_namespace("dup")
    assert (held.value.reason(), held.value.body["holds"]) == (  # type: ignore[index]
        "namespace_not_empty",
        {"runs": 1},
    )
    made = await api.control("POST", ROUTE, json={"name": "by-operator"})
    assert made.status_code == 401
    assert (await api.control("GET", ROUTE)).status_code == 200


async def test_retention_status_and_pass_over_the_sdk(api: Api, client: Client) -> None:
    """Issue 30, reference HistoryRetentionTest: the namespace's window and expired closed runs
    are reported; a pass deletes them, and nothing of the running run or of another namespace."""
    await client.create_namespace("ops", retention_days=1)
    ops = await sdk_client(api, "ops")
    for workflow_id in ("old", "open"):
        assert (await start_in(api, "ops", workflow_id)).status_code == 201
    assert (await start_in(api, "default", "old")).status_code == 201
    await execute(
        api.state.store,
        "UPDATE runs SET status = 'completed', closed_at = now() - interval '2 days'"
        " WHERE workflow_id = 'old'",
    )
    runs = {
        (r["namespace"], r["workflow_id"]): r["run_id"] for r in await rows(api.state.store, s.runs)
    }

    status = await ops.retention_status()
    assert (status["namespace"], status["retention_days"]) == ("ops", 1)
    assert status["expired_run_ids"] == [runs[("ops", "old")]]
    assert (status["expired_run_count"], status["scan_pressure"]) == (1, False)
    assert (await client.retention_status())["expired_run_ids"] == []  # default keeps 30 days

    named = await ops.retention_pass(run_ids=[runs[("ops", "open")]])
    assert named["results"] == [
        {"run_id": runs[("ops", "open")], "outcome": "skipped", "reason": "run_not_terminal"}
    ]
    done = await ops.retention_pass(limit=10)
    # The server's own repair pass may delete the run first (under load it can run meanwhile):
    # then this pass finds nothing left, and the run is gone either way.
    if done["processed"]:
        assert (done["processed"], done["pruned"], done["skipped"], done["failed"]) == (1, 1, 0, 0)
        [result] = done["results"]
        assert (result["run_id"], result["outcome"]) == (runs[("ops", "old")], "pruned")
        assert result["history_events_deleted"] >= 1 and result["tasks_deleted"] >= 1
    else:
        assert (done["pruned"], done["failed"], done["results"]) == (0, 0, [])
    async with asyncio.timeout(10):  # the repair pass's transaction may still be committing
        while True:
            left = {(r["namespace"], r["workflow_id"]) for r in await rows(api.state.store, s.runs)}
            if ("ops", "old") not in left:
                break
            await asyncio.sleep(0.05)
    assert left == {("ops", "open"), ("default", "old")}
