"""Search attributes over HTTP (issue 30; reference SearchAttributeController and its feature
test): the SDK Client's list/create/delete, namespace scoping, and every refusal typed with
nothing written."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from durable_workflow import Client
from durable_workflow.errors import ServerError

from burrow.errors import SearchAttributeLimitReached
from burrow.protocol.list_query_types import BUILTIN_ATTRIBUTES
from burrow.store import schema as s
from tests.integration.server.conftest import CONTROL, WORKER_TOKEN, Api

ROUTE = "/api/search-attributes"


async def listed(api: Api, namespace: str = "default") -> dict[str, Any]:
    answer = await api.http.get(ROUTE, headers={**CONTROL, "X-Namespace": namespace})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def definitions(api: Api) -> list[tuple[str, str, str]]:
    async with api.state.store.engine.connect() as conn:
        rows = await conn.execute(s.search_attribute_definitions.select())
        return sorted((r.namespace, r.name, r.type) for r in rows)


async def test_the_sdk_client_creates_lists_and_deletes_custom_attributes(
    api: Api, client: Client
) -> None:
    """Issue 30: every type registers; the list shows the built-ins and the customs."""
    fresh = await client.list_search_attributes()
    assert fresh.custom_attributes == {}
    assert fresh.system_attributes == {k: v.value for k, v in BUILTIN_ATTRIBUTES.items()}
    kinds = ["keyword", "text", "int", "double", "bool", "datetime", "keyword_list"]
    for kind in kinds:
        created = await client.create_search_attribute(f"Attr_{kind}", kind)
        assert created == {"name": f"Attr_{kind}", "type": kind, "outcome": "created"}
    listed_now = await client.list_search_attributes()
    assert listed_now.custom_attributes == {f"Attr_{kind}": kind for kind in kinds}
    assert await client.delete_search_attribute("Attr_int") == {
        "name": "Attr_int",
        "outcome": "deleted",
    }
    assert "Attr_int" not in (await client.list_search_attributes()).custom_attributes


async def test_custom_attributes_are_scoped_to_their_namespace(make_api: Any) -> None:
    """Issue 30: a name registered in one namespace is unseen and free in another, and a
    delete in one leaves the other's."""
    api = await make_api(namespaces=("default", "other"))
    other = {**CONTROL, "X-Namespace": "other"}
    made = await api.control("POST", ROUTE, json={"name": "CustomerId", "type": "keyword"})
    assert made.status_code == 201, made.text
    assert (await listed(api, "other"))["custom_attributes"] == {}
    again = await api.http.post(ROUTE, json={"name": "CustomerId", "type": "int"}, headers=other)
    assert again.status_code == 201, again.text
    gone = await api.http.delete(f"{ROUTE}/CustomerId", headers=other)
    assert gone.status_code == 200, gone.text
    assert (await listed(api))["custom_attributes"] == {"CustomerId": "keyword"}


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"name": "WorkflowType", "type": "keyword"}, 409, "name_reserved"),
        ({"name": "ExecutionStatus", "type": "keyword"}, 409, "name_reserved"),
        ({"name": "Taken", "type": "int"}, 409, "attribute_already_exists"),
        ({"name": "1starts_with_a_digit", "type": "keyword"}, 422, "validation_failed"),
        ({"name": "has-dash", "type": "keyword"}, 422, "validation_failed"),
        ({"name": "x" * 129, "type": "keyword"}, 422, "validation_failed"),
        ({"name": "", "type": "keyword"}, 422, "validation_failed"),
        ({"name": "Fine", "type": "float"}, 422, "validation_failed"),
        ({"name": "Fine"}, 422, "validation_failed"),
        ({"type": "int"}, 422, "validation_failed"),
    ],
)
async def test_a_refused_registration_writes_nothing(
    api: Api, body: dict[str, str], status: int, reason: str
) -> None:
    """Issue 30: the reference's statuses and reasons; the definitions stay as they were."""
    made = await api.control("POST", ROUTE, json={"name": "Taken", "type": "keyword"})
    assert made.status_code == 201, made.text
    before = await definitions(api)
    refused = await api.control("POST", ROUTE, json=body)
    assert (refused.status_code, refused.json()["reason"]) == (status, reason), refused.text
    if reason == "attribute_already_exists":
        assert (refused.json()["name"], refused.json()["type"]) == ("Taken", "keyword")
    assert await definitions(api) == before


async def test_the_namespace_limit_holds(make_api: Any) -> None:
    """PROTOCOL.md limits.max_search_attributes: past the limit, 422 and nothing written."""
    api = await make_api()
    store = api.state.store
    for i in range(3):
        await store.register_search_attribute(
            namespace="default", name=f"A{i}", type="int", limit=3
        )
    with pytest.raises(SearchAttributeLimitReached, match="maximum of 3"):
        await store.register_search_attribute(namespace="default", name="A3", type="int", limit=3)
    assert [name for _, name, _ in await definitions(api)] == ["A0", "A1", "A2"]


async def test_a_delete_is_refused_for_built_ins_and_unknown_names(
    api: Api, client: Client
) -> None:
    """Issue 30: 409 `system_attribute`, 404 `attribute_not_found`; nothing removed."""
    await client.create_search_attribute("Keep", "bool")
    before = await definitions(api)
    system = await api.control("DELETE", f"{ROUTE}/StartTime")
    assert (system.status_code, system.json()["reason"]) == (409, "system_attribute")
    unknown = await api.control("DELETE", f"{ROUTE}/Nope")
    assert (unknown.status_code, unknown.json()["reason"]) == (404, "attribute_not_found")
    with pytest.raises(ServerError):
        await client.delete_search_attribute("Nope")
    assert await definitions(api) == before


async def test_removing_an_attribute_removes_its_values(api: Api) -> None:
    """Issue 30: registered again (even with another type) an attribute starts empty."""
    await api.state.store.register_search_attribute(namespace="default", name="Tier", type="int")
    async with api.state.store.engine.begin() as conn:
        await conn.execute(
            s.run_search_attributes.insert(),
            [
                {"run_id": "00000000-0000-0000-0000-00000000000a", "namespace": "default",
                 "name": "Tier", "int_value": 3},
                {"run_id": "00000000-0000-0000-0000-00000000000b", "namespace": "other",
                 "name": "Tier", "int_value": 4},
            ],
        )  # fmt: skip
    removed = await api.state.store.remove_search_attribute(namespace="default", name="Tier")
    assert removed == 1
    async with api.state.store.engine.connect() as conn:
        left = (await conn.execute(s.run_search_attributes.select())).all()
    assert [(r.namespace, r.int_value) for r in left] == [("other", 4)]


async def test_an_unauthenticated_or_worker_caller_is_refused(api: Api) -> None:
    """M8: operator role, like the reference's route group."""
    anonymous = await api.http.get(ROUTE, headers={"X-Durable-Workflow-Control-Plane-Version": "2"})
    assert anonymous.status_code == 401, anonymous.text
    as_worker = await api.http.post(
        ROUTE,
        json={"name": "Sneaky", "type": "int"},
        headers={**CONTROL, "Authorization": f"Bearer {WORKER_TOKEN}"},
    )
    assert as_worker.status_code in (401, 403), as_worker.text
    assert await definitions(api) == []
    assert isinstance(api.http, httpx.AsyncClient)
